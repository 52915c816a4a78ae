// manifest: the search index manifest decoder (postings/manifest.h
// DecodeManifest) on arbitrary bytes, as they are and with the trailing
// XXH3-64 recomputed (so that mutations reach the checks behind it:
// counts, lengths, the deleted-docs bitmaps).
// Invariants: a refusal is Corruption; a decoded manifest encodes
// (EncodeManifest) to bytes that decode to the same manifest.
#include <roaring/roaring.h>
#include <xxhash.h>

#include <cstddef>
#include <cstring>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "postings/file_util.h"
#include "postings/manifest.h"
#include "tests/fuzz/fuzz_util.h"

using namespace corvid::postings;

namespace {

void Check(std::string_view bytes) {
  auto m = DecodeManifest(bytes);
  if (!m.ok()) {
    FUZZ_CHECK_MSG(m.status().code() == corvid::StatusCode::kCorruption, "refused with code %d: %s",
                   int(m.status().code()), m.status().message().c_str());
    return;
  }
  std::vector<ManifestEntry> entries;
  for (const auto& s : m->segments) {
    FUZZ_CHECK(s.deleted != nullptr);
    entries.push_back({s.id, s.doc_count, s.deleted.get()});
    (void)roaring_bitmap_get_cardinality(s.deleted.get());
  }
  const std::string again = EncodeManifest(m->fingerprint, m->etag, m->next_segment_id, entries);
  auto back = DecodeManifest(again);
  FUZZ_CHECK_MSG(back.ok(), "a re-encoded manifest does not decode: %s", back.status().message().c_str());
  FUZZ_CHECK(back->fingerprint == m->fingerprint && back->etag == m->etag &&
             back->next_segment_id == m->next_segment_id && back->segments.size() == m->segments.size());
  for (size_t i = 0; i < m->segments.size(); ++i) {
    FUZZ_CHECK(back->segments[i].id == m->segments[i].id);
    FUZZ_CHECK(back->segments[i].doc_count == m->segments[i].doc_count);
    FUZZ_CHECK(roaring_bitmap_equals(back->segments[i].deleted.get(), m->segments[i].deleted.get()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  Check(bytes);
  if (bytes.size() >= 56) {
    const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size() - 8);
    std::string fixed = bytes;
    std::memcpy(fixed.data() + fixed.size() - 8, &sum, 8);
    if (fixed != bytes) Check(fixed);
  }
  return 0;
}
