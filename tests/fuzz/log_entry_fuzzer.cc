// log_entry: the cluster log entry decoders (cluster/log_entry.h:
// DecodeHeader, DecodeWritePayload, DecodeChunkPayload,
// DecodeCommitPayload, DecodeIndexPayload) on arbitrary bytes. The input
// is an entry; its payload (or the whole input when the header does not
// decode) is given to every payload decoder.
// Invariants: a refusal is Corruption; what decodes encodes back to the
// same bytes (encoder and decoder agree on the format). One known
// exception is left out: EncodeIndexPayload writes no definition when it
// is empty, which DecodeIndexPayload then refuses for kIndexPut (no index
// definition is empty: the router refuses an empty body first).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cluster/log_entry.h"
#include "tests/fuzz/fuzz_util.h"

using corvid::fuzz::Printable;
using namespace corvid::cluster;

namespace {

void CheckRefusal(const corvid::Status& s, const char* what) {
  FUZZ_CHECK_MSG(s.code() == corvid::StatusCode::kCorruption, "%s refused with code %d: %s", what, int(s.code()),
                 s.message().c_str());
}

void SameBytes(std::string_view encoded, std::string_view input, const char* what) {
  FUZZ_CHECK_MSG(encoded == input, "%s: decoded then encoded differs: '%s' vs input '%s'", what,
                 Printable(encoded).c_str(), Printable(input).c_str());
}

void Payloads(std::string_view payload) {
  {
    corvid::storage::WriteRequest request;
    const corvid::Status s = DecodeWritePayload(payload, request);
    if (!s.ok()) {
      CheckRefusal(s, "DecodeWritePayload");
    } else {
      std::string out;
      EncodeWritePayload(request, out);
      SameBytes(out, payload, "write payload");
    }
  }
  {
    uint32_t index = 0;
    std::string_view bytes;
    const corvid::Status s = DecodeChunkPayload(payload, index, bytes);
    if (!s.ok()) {
      CheckRefusal(s, "DecodeChunkPayload");
    } else {
      FUZZ_CHECK(bytes.data() >= payload.data() && bytes.data() + bytes.size() <= payload.data() + payload.size());
      std::string out;
      EncodeChunkPayload(index, bytes, out);
      SameBytes(out, payload, "chunk payload");
    }
  }
  {
    uint32_t chunks = 0;
    uint64_t bytes = 0;
    const corvid::Status s = DecodeCommitPayload(payload, chunks, bytes);
    if (!s.ok()) {
      CheckRefusal(s, "DecodeCommitPayload");
    } else {
      std::string out;
      EncodeCommitPayload(chunks, bytes, out);
      SameBytes(out, payload, "commit payload");
    }
  }
  for (EntryType type : {EntryType::kIndexPut, EntryType::kIndexDelete}) {
    std::string name, definition;
    const corvid::Status s = DecodeIndexPayload(payload, type, name, definition);
    if (!s.ok()) {
      CheckRefusal(s, "DecodeIndexPayload");
      continue;
    }
    if (type == EntryType::kIndexPut && definition.empty()) continue;  // the known exception (above)
    std::string out;
    EncodeIndexPayload(name, type == EntryType::kIndexPut ? std::string_view(definition) : std::string_view(), out);
    SameBytes(out, payload, "index payload");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view entry(reinterpret_cast<const char*>(data), size);
  EntryHeader h;
  std::string_view payload;
  const corvid::Status s = DecodeHeader(entry, h, payload);
  if (!s.ok()) {
    CheckRefusal(s, "DecodeHeader");
    Payloads(entry);
    return 0;
  }
  FUZZ_CHECK(payload.data() >= entry.data() && payload.data() + payload.size() == entry.data() + entry.size());
  std::string out;
  EncodeHeader(h, out);
  out.append(payload);
  SameBytes(out, entry, "header");
  Payloads(payload);
  return 0;
}
