// segment: the search segment reader's verification (postings/segment.h
// Segment::Open, which maps a file and checks magic, version, roaring tag,
// fingerprint, field counts, length, checksum and directory bounds) on
// arbitrary bytes written to a file. The fingerprint and field counts it
// is opened with are the header's own, so those checks pass whenever the
// header is long enough.
// Every input is opened twice: as it is (the footer's XXH3 checksum then
// refuses nearly every mutation) and with the length field and checksum
// recomputed, so that mutations reach the directory bounds checks.
// Invariants: a refusal is Corruption (or IOError for an empty file);
// Open never reads outside the file.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "postings/segment.h"
#include "postings/segment_format.h"
#include "tests/fuzz/fuzz_util.h"

using namespace corvid::postings;
namespace sf = corvid::postings::segment_format;

namespace {

template <typename T>
T Get(const std::string& s, size_t at) {
  T v{};
  if (s.size() >= at + sizeof(T)) std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

void Open(const std::string& bytes, const std::filesystem::path& file) {
  corvid::fuzz::WriteFile(file, bytes);
  const uint64_t fingerprint = Get<uint64_t>(bytes, 16);
  const uint32_t text_fields = Get<uint32_t>(bytes, 28), numeric_fields = Get<uint32_t>(bytes, 32);
  auto seg = Segment::Open(file.string(), fingerprint, text_fields, numeric_fields, Segment::Checksum::kVerify);
  if (!seg.ok()) {
    const auto code = seg.status().code();
    FUZZ_CHECK_MSG(code == corvid::StatusCode::kCorruption || code == corvid::StatusCode::kIOError,
                   "refused with code %d: %s", int(code), seg.status().message().c_str());
    return;
  }
  FUZZ_CHECK((*seg)->file_bytes() == bytes.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path file = corvid::fuzz::ScratchDir("segment") / "seg.cvs";
  std::string bytes(reinterpret_cast<const char*>(data), size);
  Open(bytes, file);
  if (bytes.size() >= sf::kHeaderBytes + sf::kFooterBytes) {
    std::string fixed = bytes;
    const uint64_t len = fixed.size();
    std::memcpy(fixed.data() + 48, &len, 8);
    const uint64_t sum = sf::FileChecksum(fixed.data(), fixed.size() - sf::kFooterBytes);
    std::memcpy(fixed.data() + fixed.size() - sf::kFooterBytes, &sum, 8);
    if (fixed != bytes) Open(fixed, file);
  }
  return 0;
}
