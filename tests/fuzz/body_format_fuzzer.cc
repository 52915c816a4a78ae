// body_format: the stored-body decoders of storage/body_format.h
// (DecodedSize, DecodeWhole, DecodeFields, HeadFields) on arbitrary bytes,
// and the encoder's round trip on arbitrary valid JSON objects.
//
// Input: byte 0 = the DocValue flags (format.h) to decode with, byte 1 =
// options, the rest = the stored bytes (decode mode) or a JSON text
// (round-trip mode, options bit 7).
//   options bits 0-1: which field names DecodedSize/DecodeFields ask for
//   bit 2 (decode): before decoding, recompute the structured header's
//          checksum (the low 32 bits of its XXH3-64), so that mutations
//          reach the checks behind it instead of all failing there
//   bit 3 (round trip): encode with the dictionary
//   bit 4 (decode): also recompute the last 4 bytes as a head's checksum
//          (HeadFields reads the bytes as a head)
//   bit 5 (round trip): with bit 6, the padding goes last, so that the
//          object's own members are its head
//   bit 6 (round trip): pad the object past kStructuredMinBytes, so that
//          it is stored structured
// Invariants, decode: a refusal is Corruption; DecodedSize(no names)
// equals the size DecodeWhole gives; a DecodeFields that succeeds reports
// what DecodedSize(names) gives. Round trip: DecodeWhole gives back
// exactly the text Encode took; DecodedSize agrees; DecodeFields gives one
// JSON object; the head Encode gives is HeadOf's (verify's, computed
// without compressing), and what it answers is byte for byte DecodeFields'
// projection.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/json_input.h"
#include "storage/body_format.h"
#include "storage/format.h"
#include "tests/fuzz/fuzz_util.h"

using corvid::fuzz::Printable;
using namespace corvid::storage;

namespace {

const std::vector<std::string> kNameSets[4] = {
    {},
    {"id"},
    {"body", "id", "title"},
    {"_pad", "a", "n", "z"},
};

std::shared_ptr<const body::Dictionary> TheDictionary() {
  static const std::shared_ptr<const body::Dictionary> dict = [] {
    std::string content;
    for (int i = 0; i < 40; ++i)
      content += R"({"id":"doc-)" + std::to_string(i) +
                 R"(","title":"The quick brown fox","body":"jumps over the lazy dog","tags":["a","b"],"n":)" +
                 std::to_string(i * 7) + "}";
    return body::Dictionary::Load(1, content, 3);
  }();
  return dict;
}

const body::DictionaryLookup kLookup = [](uint32_t id) -> std::shared_ptr<const body::Dictionary> {
  return id == 1 ? TheDictionary() : nullptr;
};

bool ReadVarint(const std::string& s, size_t& p, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p >= s.size()) return false;
    const auto b = static_cast<uint8_t>(s[p++]);
    v |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// Walks the structured header as body_format.h lays it out (version 2, or
// the version 1 it still reads) and writes its checksum where it belongs,
// if the walk gets that far.
void FixStructuredChecksum(std::string& s) {
  size_t p = 0;
  if (s.empty()) return;
  const auto version = static_cast<uint8_t>(s[0]);
  if (version != 1 && version != 2) return;
  ++p;
  uint64_t v, count;
  if (!ReadVarint(s, p, v) || !ReadVarint(s, p, v) || !ReadVarint(s, p, count) || count > s.size()) return;
  for (uint64_t f = 0; f < count; ++f)
    if (!ReadVarint(s, p, v) || !ReadVarint(s, p, v)) return;
  if (!ReadVarint(s, p, count) || count > s.size()) return;
  if (version == 2) {
    // The directory's length, the directory, the sorted offsets.
    if (!ReadVarint(s, p, v) || v > s.size() - p) return;
    p += v;
    if (count > (s.size() - p) / 4) return;
    p += 4 * count;
  } else {
    for (uint64_t f = 0; f < count; ++f) {
      if (!ReadVarint(s, p, v) || v > s.size() - p) return;
      p += v;
      if (!ReadVarint(s, p, v) || !ReadVarint(s, p, v) || !ReadVarint(s, p, v)) return;
    }
  }
  if (s.size() - p < 4) return;
  const uint32_t sum = static_cast<uint32_t>(XXH3_64bits(s.data(), p));
  std::memcpy(s.data() + p, &sum, 4);
}

void CheckRefusal(const corvid::Status& s, const char* what) {
  FUZZ_CHECK_MSG(s.code() == corvid::StatusCode::kCorruption, "%s refused with code %d (not Corruption): %s", what,
                 int(s.code()), s.message().c_str());
}

void Decode(uint8_t flags, uint8_t options, std::string stored) {
  if (options & 4) FixStructuredChecksum(stored);
  const std::vector<std::string>& names = kNameSets[options & 3];
  if (!names.empty()) {
    std::string as_head = stored;
    if ((options & 16) && as_head.size() >= 4) {
      const uint32_t sum = static_cast<uint32_t>(XXH3_64bits(as_head.data(), as_head.size() - 4));
      std::memcpy(as_head.data() + as_head.size() - 4, &sum, 4);
    }
    std::string projected;
    auto h = body::HeadFields(as_head, names, projected);
    if (!h.ok()) CheckRefusal(h.status(), "HeadFields");
  }
  auto size_all = body::DecodedSize(flags, stored, {});
  if (!size_all.ok()) CheckRefusal(size_all.status(), "DecodedSize");
  auto size_names = body::DecodedSize(flags, stored, names);
  if (!size_names.ok()) CheckRefusal(size_names.status(), "DecodedSize(names)");
  std::string whole;
  const corvid::Status s = body::DecodeWhole(flags, stored, kLookup, whole);
  if (!s.ok()) {
    CheckRefusal(s, "DecodeWhole");
  } else if (size_all.ok()) {
    FUZZ_CHECK_MSG(*size_all == whole.size(), "DecodedSize %llu but DecodeWhole gave %zu bytes",
                   static_cast<unsigned long long>(*size_all), whole.size());
  }
  std::string fields;
  uint64_t reported = 0;
  const corvid::Status f = body::DecodeFields(flags, stored, kLookup, names, fields, &reported);
  if (!f.ok()) {
    CheckRefusal(f, "DecodeFields");
  } else if (size_names.ok()) {
    FUZZ_CHECK_MSG(reported == *size_names, "DecodeFields reported %llu bytes, DecodedSize %llu",
                   static_cast<unsigned long long>(reported), static_cast<unsigned long long>(*size_names));
  }
}

void RoundTrip(uint8_t flags, uint8_t options, std::string json) {
  if (corvid::server::ValidateJsonObject(json, nullptr, corvid::server::DuplicateKeys::kReject)) return;
  if (options & 64) {
    // {"_pad":"xxx…", <the object's members>}: large enough to be structured.
    const size_t open = json.find('{');
    const bool empty = json[json.find_first_not_of(" \t\r\n", open + 1)] == '}';
    const std::string pad = "\"_pad\":\"" + std::string(body::kStructuredMinBytes, 'x') + "\"";
    if (options & 32) json.insert(json.rfind('}'), (empty ? "" : ",") + pad);
    else json.insert(open + 1, pad + (empty ? "" : ","));
    if (corvid::server::ValidateJsonObject(json, nullptr, corvid::server::DuplicateKeys::kReject)) return;
  }
  const body::Dictionary* dict = (options & 8) ? TheDictionary().get() : nullptr;
  const size_t thresholds[] = {0, 64, 1024, SIZE_MAX};
  std::string stored, head;
  const uint8_t out_flags = body::Encode(json, dict, 1, thresholds[flags & 3], stored, &head);
  FUZZ_CHECK_MSG(head == body::HeadOf(json), "Encode's head is not HeadOf's for '%s'", Printable(json).c_str());
  std::string back;
  const corvid::Status s = body::DecodeWhole(out_flags, stored, kLookup, back);
  FUZZ_CHECK_MSG(s.ok(), "DecodeWhole of an encoded body failed (flags %d): %s", int(out_flags), s.message().c_str());
  FUZZ_CHECK_MSG(back == json, "round trip changed the body (flags %d): '%s' -> '%s'", int(out_flags),
                 Printable(json).c_str(), Printable(back).c_str());
  auto size = body::DecodedSize(out_flags, stored, {});
  FUZZ_CHECK(size.ok() && *size == json.size());
  const std::vector<std::string>& names = kNameSets[options & 3];
  std::string fields;
  const corvid::Status f = body::DecodeFields(out_flags, stored, kLookup, names, fields);
  FUZZ_CHECK_MSG(f.ok(), "DecodeFields of an encoded body failed: %s", f.message().c_str());
  auto problem = corvid::server::ValidateJsonObject(fields, nullptr, corvid::server::DuplicateKeys::kReject);
  FUZZ_CHECK_MSG(!problem, "DecodeFields gave no JSON object (%s): '%s' from '%s'", problem->message.c_str(),
                 Printable(fields).c_str(), Printable(json).c_str());
  if (!head.empty() && !names.empty()) {
    std::string projected;
    auto h = body::HeadFields(head, names, projected);
    FUZZ_CHECK_MSG(h.ok(), "HeadFields of an encoded head failed: %s", h.status().message().c_str());
    FUZZ_CHECK_MSG(!*h || projected == fields, "the head answered '%s', the body '%s', for '%s'",
                   Printable(projected).c_str(), Printable(fields).c_str(), Printable(json).c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0], options = data[1];
  std::string rest(reinterpret_cast<const char*>(data + 2), size - 2);
  if (options & 128) {
    RoundTrip(flags, options, std::move(rest));
  } else {
    Decode(flags, options, std::move(rest));
  }
  return 0;
}
