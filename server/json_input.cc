// One-pass validation of request JSON with RapidJSON's SAX reader.
#include "server/json_input.h"

#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

#include <cstring>

#include "common/utf8.h"

namespace corvid::server {

namespace {

using rapidjson::SizeType;

// Tracks depth, the root's type, and the top-level "id" / "_deleted".
class Handler : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, Handler> {
 public:
  explicit Handler(ObjectFields* fields) : fields_(fields) {}

  bool too_deep = false;
  bool root_is_object = false;

  bool StartObject() { return Open(true); }
  bool StartArray() { return Open(false); }
  bool EndObject(SizeType) { --depth_; return true; }
  bool EndArray(SizeType) { --depth_; return true; }
  bool Key(const char* s, SizeType len, bool) {
    pending_ = Pending::kNone;
    if (depth_ == 1 && fields_) {
      if (len == 2 && std::memcmp(s, "id", 2) == 0) pending_ = Pending::kId;
      else if (len == 8 && std::memcmp(s, "_deleted", 8) == 0) pending_ = Pending::kDeleted;
    }
    return true;
  }
  bool String(const char* s, SizeType len, bool) {
    if (pending_ == Pending::kId && depth_ == 1) {
      fields_->id_present = true;
      fields_->id.emplace(s, len);
    }
    return Scalar();
  }
  bool Bool(bool b) {
    if (pending_ == Pending::kDeleted && depth_ == 1) fields_->deleted = b;
    return Scalar();
  }
  // Numbers (kept as text), null: anything that is not a string for "id".
  bool Default() { return Scalar(); }
  bool RawNumber(const char*, SizeType, bool) { return Scalar(); }

 private:
  enum class Pending { kNone, kId, kDeleted };

  bool Open(bool object) {
    if (depth_ == 0 && !seen_root_) root_is_object = object;
    seen_root_ = true;
    NoteNonString();
    if (++depth_ > kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    return true;
  }
  bool Scalar() {
    seen_root_ = true;
    NoteNonString();
    pending_ = Pending::kNone;
    return true;
  }
  // A value for a pending "id" that did not arrive through String().
  void NoteNonString() {
    if (pending_ == Pending::kId && depth_ == 1 && !fields_->id) fields_->id_present = true;
    pending_ = Pending::kNone;
  }

  ObjectFields* fields_;
  int depth_ = 0;
  bool seen_root_ = false;
  Pending pending_ = Pending::kNone;
};

}  // namespace

bool IsBlank(std::string_view text) {
  for (char c : text)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return false;
  return true;
}

std::optional<JsonProblem> ValidateJsonObject(std::string_view text, ObjectFields* fields) {
  if (IsBlank(text)) return JsonProblem{"empty_body", "the body is empty; expected a JSON object", std::nullopt};
  ObjectFields scratch;
  if (fields) *fields = ObjectFields{};
  Handler handler(fields ? fields : &scratch);
  // Validating UTF-8 up front (ASCII runs eight bytes at a time) is much
  // faster than RapidJSON's byte-by-byte check inside strings, and also
  // catches invalid bytes outside strings.
  if (size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos)
    return JsonProblem{"invalid_utf8", "invalid UTF-8 at offset " + std::to_string(bad), bad};
  rapidjson::Reader reader;
  rapidjson::MemoryStream stream(text.data(), text.size());
  constexpr unsigned kFlags = rapidjson::kParseIterativeFlag | rapidjson::kParseNumbersAsStringsFlag;
  rapidjson::ParseResult ok = reader.Parse<kFlags>(stream, handler);
  if (handler.too_deep) {
    return JsonProblem{"too_deep",
                       "JSON nesting exceeds " + std::to_string(kMaxJsonDepth) + " levels at offset " +
                           std::to_string(ok.Offset()),
                       ok.Offset()};
  }
  if (!ok) {
    std::string message = rapidjson::GetParseError_En(ok.Code());
    message += " at offset " + std::to_string(ok.Offset());
    return JsonProblem{"invalid_json", std::move(message), ok.Offset()};
  }
  if (!handler.root_is_object)
    return JsonProblem{"not_an_object", "the JSON value must be an object", size_t{0}};
  return std::nullopt;
}

}  // namespace corvid::server
