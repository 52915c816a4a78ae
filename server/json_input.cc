// One-pass validation of request JSON with RapidJSON's SAX reader (a
// second pass only to describe a lone surrogate escape).
#include "server/json_input.h"

#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

#include <cstring>
#include <vector>

#include "common/utf8.h"

namespace corvid::server {

namespace {

using rapidjson::SizeType;

// The raw body is checked to be UTF-8 before parsing, so a decoded string
// can only be ill-formed through a \u escape: RapidJSON 1.1 refuses a high
// surrogate that is not followed by a low one
// (kParseErrorStringUnicodeSurrogateInvalid) but encodes a lone low
// surrogate ("\udc00") as the bytes ED B0 80. kParseValidateEncodingFlag
// does not help: it checks the raw bytes of strings, never what an escape
// decodes to. A surrogate encodes as 0xED followed by 0xA0-0xBF, which
// well-formed UTF-8 never holds (0xED takes 0x80-0x9F there), so finding
// that pair is the whole check; Hangul text (0xED 0x80-0x9F) passes
// without a second validation.
bool DecodesToUtf8(std::string_view decoded) {
  const char* p = decoded.data();
  const char* end = p + decoded.size();
  while ((p = static_cast<const char*>(std::memchr(p, 0xED, static_cast<size_t>(end - p)))) != nullptr) {
    if (++p < end && static_cast<unsigned char>(*p) >= 0xA0) return false;
  }
  return true;
}

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
  bool lone_surrogate = false;  // a decoded string was not UTF-8 (parse stopped there)

  bool Key(const char* s, SizeType len, bool) {
    if (!DecodedIsUtf8(s, len)) return false;
    pending_ = Pending::kNone;
    if (depth_ == 1 && fields_) {
      if (len == 2 && std::memcmp(s, "id", 2) == 0) pending_ = Pending::kId;
      else if (len == 8 && std::memcmp(s, "_deleted", 8) == 0) pending_ = Pending::kDeleted;
    }
    return true;
  }
  bool String(const char* s, SizeType len, bool) {
    if (!DecodedIsUtf8(s, len)) return false;
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

  bool DecodedIsUtf8(const char* s, SizeType len) {
    if (!DecodesToUtf8(std::string_view(s, len))) lone_surrogate = true;
    return !lone_surrogate;
  }

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

// Re-parses a body up to its first string that decodes to a lone surrogate
// and says where that string is ("a.b[2]", "a key of 'a'"). Only runs once
// such a string was found, so the validation of good bodies pays nothing
// for it.
class Locator : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, Locator> {
 public:
  bool StartObject() { return Open(true); }
  bool StartArray() { return Open(false); }
  bool EndObject(SizeType) { return Close(); }
  bool EndArray(SizeType) { return Close(); }
  bool Key(const char* s, SizeType len, bool) {
    if (!DecodesToUtf8(std::string_view(s, len))) return false;
    frames_.back().key.assign(s, len);
    frames_.back().awaiting_key = false;
    return true;
  }
  bool String(const char* s, SizeType len, bool) {
    if (!DecodesToUtf8(std::string_view(s, len))) return false;
    return Value();
  }
  bool Default() { return Value(); }
  bool RawNumber(const char*, SizeType, bool) { return Value(); }

  // Where the parse stopped: the string being parsed when it failed.
  std::string Where() const {
    bool in_key = !frames_.empty() && frames_.back().object && frames_.back().awaiting_key;
    // A key belongs to its object; a value to its own member or element.
    std::string path;
    for (size_t i = 0; i + (in_key ? 1 : 0) < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (!f.object)
        path.append("[").append(std::to_string(f.index)).append("]");
      else
        path.append(path.empty() ? "" : ".").append(f.key);
      if (path.size() > kMaxPathBytes) break;
    }
    if (path.size() > kMaxPathBytes) path = std::string(Utf8Prefix(path, kMaxPathBytes)) + "...";
    if (in_key) return path.empty() ? "a top-level key" : "a key of '" + path + "'";
    return path.empty() ? "the top-level value" : "'" + path + "'";
  }

 private:
  static constexpr size_t kMaxPathBytes = 200;
  struct Frame {
    bool object;
    bool awaiting_key = true;  // objects: the next string is a key
    size_t index = 0;          // arrays: the index of the next element
    std::string key;           // objects: the current member's key
  };

  bool Open(bool object) {
    frames_.push_back(Frame{.object = object, .key = {}});
    return true;
  }
  bool Close() {
    frames_.pop_back();
    return Value();
  }
  // A value is complete: the enclosing object expects a key, an array its next element.
  bool Value() {
    if (frames_.empty()) return true;
    Frame& f = frames_.back();
    if (f.object)
      f.awaiting_key = true;
    else
      ++f.index;
    return true;
  }

  std::vector<Frame> frames_;
};

// The value of the four hex digits `s` starts with, or -1.
int Hex4(std::string_view s) {
  if (s.size() < 4) return -1;
  int v = 0;
  for (char c : s.substr(0, 4)) {
    const int d = HexValue(c);
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// `pos` is inside a well-formed JSON string of `text` (or at its closing
// quote) that holds a \u escape spelling a lone surrogate. Returns the
// offset of that escape's backslash (the first such in the string).
size_t LoneSurrogateEscape(std::string_view text, size_t pos) {
  // The opening quote is the first '"' before `pos` that is not escaped,
  // i.e. not preceded by an odd run of backslashes.
  size_t open = pos;
  while (open > 0) {
    open = text.rfind('"', open - 1);
    if (open == std::string_view::npos) return pos;
    size_t backslashes = 0;
    while (backslashes < open && text[open - 1 - backslashes] == '\\') ++backslashes;
    if (backslashes % 2 == 0) break;
  }
  for (size_t i = open + 1; i + 1 < text.size() && text[i] != '"'; ++i) {
    if (text[i] != '\\') continue;
    if (text[i + 1] != 'u') {
      ++i;  // a two-character escape such as \\ or \"
      continue;
    }
    int cp = Hex4(text.substr(i + 2));
    if (cp >= 0xDC00 && cp <= 0xDFFF) return i;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      int low = text.substr(i + 6, 2) == "\\u" ? Hex4(text.substr(i + 8)) : -1;
      if (low < 0xDC00 || low > 0xDFFF) return i;
      i += 6;  // the pair's low half
    }
    i += 5;
  }
  return pos;
}

// The problem for a body whose parse stopped at a string that decodes to
// a lone surrogate: `result` is the stopped parse.
JsonProblem LoneSurrogateProblem(std::string_view text, rapidjson::ParseResult result) {
  // RapidJSON's own error points at a lone high surrogate's escape (a lone
  // low one may come before it in the same string); a string our handler
  // refused ends just before the offset where the parse stopped.
  size_t offset = LoneSurrogateEscape(text, result.Code() == rapidjson::kParseErrorStringUnicodeSurrogateInvalid
                                                ? result.Offset()
                                                : result.Offset() - 1);
  Locator locator;
  rapidjson::Reader reader;
  rapidjson::MemoryStream stream(text.data(), text.size());
  reader.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseNumbersAsStringsFlag>(stream, locator);
  std::string message = "invalid UTF-8 at offset " + std::to_string(offset) + ": the escape " +
                        std::string(text.substr(offset, 6)) + " spells a lone surrogate (in " + locator.Where() + ")";
  return JsonProblem{"invalid_utf8", std::move(message), offset};
}

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
  if (handler.lone_surrogate || ok.Code() == rapidjson::kParseErrorStringUnicodeSurrogateInvalid)
    return LoneSurrogateProblem(text, ok);
  if (!ok) {
    std::string message = rapidjson::GetParseError_En(ok.Code());
    message += " at offset " + std::to_string(ok.Offset());
    return JsonProblem{"invalid_json", std::move(message), ok.Offset()};
  }
  // RapidJSON's MemoryStream reads a NUL byte as the end of the input, so
  // "{}\0anything" parsed as "{}": JSON text never holds a raw NUL (in a
  // string it must be escaped), so one is an error wherever it stands.
  if (stream.Tell() != text.size())
    return JsonProblem{"invalid_json", "a NUL byte at offset " + std::to_string(stream.Tell()), stream.Tell()};
  if (!handler.root_is_object)
    return JsonProblem{"not_an_object", "the JSON value must be an object", size_t{0}};
  return std::nullopt;
}

}  // namespace corvid::server
