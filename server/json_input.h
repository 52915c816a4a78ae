// Validation of JSON request bodies before they are stored. A body is
// checked in one SAX pass (RapidJSON, no DOM, numbers kept as text so every
// value round-trips exactly): well-formed, valid UTF-8, nesting within the
// limit, an object at the root. The document is then stored as sent.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace corvid::server {

inline constexpr int kMaxJsonDepth = 256;

// The value of a hex digit, or -1 (percent-escapes, \u escapes).
inline int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

struct JsonProblem {
  std::string code;     // invalid_json | invalid_utf8 | not_an_object | empty_body | too_deep
  std::string message;  // human text, says where
  std::optional<size_t> offset;  // byte offset of the error, when known
};

// What a bulk line may carry besides its content.
struct ObjectFields {
  std::optional<std::string> id;  // top-level "id" when it is a string
  bool id_present = false;        // "id" present (maybe not a string)
  bool deleted = false;           // top-level "_deleted": true
};

// Returns nothing when `text` is one JSON object (surrounding whitespace
// allowed) that passes every check; otherwise what is wrong. Fills
// `fields` (if given) with the top-level "id" and "_deleted".
std::optional<JsonProblem> ValidateJsonObject(std::string_view text, ObjectFields* fields = nullptr);

// True if `text` is only JSON whitespace.
bool IsBlank(std::string_view text);

}  // namespace corvid::server
