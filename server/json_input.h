// Validation of JSON request bodies before they are stored. A body is
// checked in one SAX pass (RapidJSON, no DOM, numbers kept as text so every
// value round-trips exactly): well-formed, valid UTF-8, nesting within the
// limit, an object at the root and, for documents, no key twice in one
// object. The document is then stored as sent.
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
  std::string code;              // invalid_json | invalid_utf8 | not_an_object | empty_body | too_deep | duplicate_key
  std::string message;           // human text, says where
  std::optional<size_t> offset;  // byte offset of the error, when known
};

// What a bulk line may carry besides its content.
struct ObjectFields {
  std::optional<std::string> id;  // top-level "id" when it is a string
  bool id_present = false;        // "id" present (maybe not a string)
  bool deleted = false;           // top-level "_deleted": true
};

// Whether a key may appear twice in one object. Documents refuse it (API.md,
// as Elasticsearch does). Other bodies allow it here: an index definition's
// compiler refuses a repeated key itself, naming its path; search and
// analyze bodies are not checked.
enum class DuplicateKeys { kAllow, kReject };

// Returns nothing when `text` is one JSON object (surrounding whitespace
// allowed) that passes every check; otherwise what is wrong. Fills
// `fields` (if given) with the top-level "id" and "_deleted".
// With DuplicateKeys::kReject, the same key (compared decoded: "a" and
// "\u0061" are one key) twice in one object, at any depth, is the problem
// `duplicate_key`; the same key in different objects is fine. That check
// stays linear in the size of `text` whatever the keys (an object with
// many keys is indexed in a hash table keyed per process), and for small
// objects allocates nothing: its buffers are kept per thread (those a
// large body grew are given back after it).
std::optional<JsonProblem> ValidateJsonObject(std::string_view text, ObjectFields* fields = nullptr,
                                              DuplicateKeys duplicates = DuplicateKeys::kAllow);

// True if `text` is only JSON whitespace.
bool IsBlank(std::string_view text);

}  // namespace corvid::server
