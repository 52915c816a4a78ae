// json_body: server/json_input.h ValidateJsonObject, the check every PUT
// body (and every bulk line, index definition, search body) passes, on
// arbitrary bytes, both with and without duplicate-key rejection.
// Invariants beyond "no crash, no sanitizer report":
//  - kReject accepting implies kAllow accepting, and kAllow refusing
//    implies kReject refusing;
//  - a problem's offset is within the text and its message is valid UTF-8
//    (it is sent inside a JSON error body);
//  - an accepted body parses as one JSON object with the parser every
//    reader of a stored document uses (ParseWithExactNumbers), and the
//    "id" / "_deleted" it reports are that object's;
//  - IsBlank agrees with the `empty_body` problem.
#include <rapidjson/document.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/exact_json.h"
#include "common/utf8.h"
#include "server/json_input.h"
#include "tests/fuzz/fuzz_util.h"

using corvid::fuzz::Fail;
using corvid::fuzz::Printable;
using namespace corvid::server;

namespace {

void CheckProblem(const JsonProblem& p, std::string_view text) {
  FUZZ_CHECK_MSG(!p.code.empty(), "empty problem code for '%s'", Printable(text).c_str());
  FUZZ_CHECK_MSG(corvid::IsValidUtf8(p.message), "problem message is not UTF-8: '%s'", Printable(p.message).c_str());
  if (p.offset) FUZZ_CHECK_MSG(*p.offset <= text.size(), "offset %zu beyond %zu", *p.offset, text.size());
  const bool empty = p.code == "empty_body";
  FUZZ_CHECK_MSG(empty == IsBlank(text), "IsBlank=%d but code %s", int(IsBlank(text)), p.code.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  ObjectFields allow_fields, reject_fields;
  const auto allow = ValidateJsonObject(text, &allow_fields, DuplicateKeys::kAllow);
  const auto reject = ValidateJsonObject(text, &reject_fields, DuplicateKeys::kReject);
  // And once without fields (the definition and search bodies' call).
  const auto plain = ValidateJsonObject(text);
  FUZZ_CHECK(plain.has_value() == allow.has_value());

  if (allow) CheckProblem(*allow, text);
  if (reject) CheckProblem(*reject, text);
  if (!reject) FUZZ_CHECK_MSG(!allow, "kReject accepted what kAllow refused (%s): '%s'", allow->code.c_str(),
                              Printable(text).c_str());
  if (allow) FUZZ_CHECK_MSG(reject.has_value(), "kAllow refused (%s) what kReject accepted", allow->code.c_str());
  if (reject && !allow)
    FUZZ_CHECK_MSG(reject->code == "duplicate_key", "kReject refused with %s what kAllow accepted: '%s'",
                   reject->code.c_str(), Printable(text).c_str());

  if (allow) return 0;
  // Accepted: no raw NUL anywhere (RapidJSON would stop reading there),
  // and every stored document's reader parses it, whole.
  FUZZ_CHECK_MSG(text.find('\0') == std::string_view::npos, "accepted body holds a NUL byte: '%s'",
                 Printable(text).c_str());
  rapidjson::Document doc;
  const rapidjson::ParseResult r = corvid::ParseWithExactNumbers<rapidjson::kParseValidateEncodingFlag>(doc, text);
  FUZZ_CHECK_MSG(!r.IsError(), "accepted body does not parse (error %d at %zu): '%s'", int(r.Code()), r.Offset(),
                 Printable(text).c_str());
  FUZZ_CHECK(doc.IsObject());
  if (!reject) {
    // No repeated key at the top level: "id" and "_deleted" are unambiguous.
    const rapidjson::Value* id = doc.HasMember("id") ? &doc["id"] : nullptr;
    FUZZ_CHECK(reject_fields.id_present == (id != nullptr));
    if (id != nullptr) {
      FUZZ_CHECK(reject_fields.id.has_value() == id->IsString());
      if (id->IsString()) FUZZ_CHECK(*reject_fields.id == std::string_view(id->GetString(), id->GetStringLength()));
    }
    const bool deleted = doc.HasMember("_deleted") && doc["_deleted"].IsTrue();
    FUZZ_CHECK(reject_fields.deleted == deleted);
  }
  return 0;
}
