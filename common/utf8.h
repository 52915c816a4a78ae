// UTF-8 validation shared by the store (ids, names) and the server (request
// bodies). Strict RFC 3629: no overlongs, no surrogates, nothing above
// U+10FFFF. Runs of ASCII are checked eight bytes at a time.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace corvid {

// Returns the byte offset of the first invalid sequence, or
// std::string_view::npos when `s` is valid UTF-8.
inline size_t FindInvalidUtf8(std::string_view s) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Skip ASCII a word at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, u + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    unsigned char c = u[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return i;
    if (i + len > n) return i;
    for (int k = 1; k < len; ++k) {
      if ((u[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (u[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

inline bool IsValidUtf8(std::string_view s) { return FindInvalidUtf8(s) == std::string_view::npos; }

// Code points in valid UTF-8 (bytes that are not continuation bytes).
inline size_t CountCodePoints(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The index just past the code point that starts at s[i] (i < s.size()):
// past the continuation bytes after it, the code points CountCodePoints
// counts.
inline size_t NextCodePoint(std::string_view s, size_t i) {
  ++i;
  while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
  return i;
}

// Appends code point `cp` (at most U+10FFFF) as UTF-8.
inline void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

// Decodes the code point that starts at s[i] (i < s.size()) without
// validating: the lead byte alone fixes the length (1 below 0x80, 2 below
// 0xE0, 3 below 0xF0, else 4), and a sequence cut short by the end of `s`
// keeps the bits it has. Returns that nominal length, which may run past
// the end of `s`. For matching text that may be malformed the same way
// every time (postings/fuzzy.cc); validation is FindInvalidUtf8's.
inline size_t DecodeCodePointAt(std::string_view s, size_t i, uint32_t& cp) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return n;
}

// The longest prefix of `s` of at most `max_bytes` that does not end inside
// a multi-byte character, for echoing a cut-down value in a message. When
// `s` is valid UTF-8 so is the result.
inline std::string_view Utf8Prefix(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t cut = max_bytes;
  // A character is at most 4 bytes: at most 3 continuation bytes to step back over.
  while (cut > 0 && max_bytes - cut < 3 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut);
}

// Appends `s` to `out` with each ill-formed sequence replaced by U+FFFD,
// one per maximal subpart (Unicode §3.9, as ICU and the WHATWG decoder do):
// a valid lead byte followed by some but not all of its continuation bytes
// is one U+FFFD; any other bad byte is one each. Valid UTF-8 is appended
// unchanged.
inline void AppendReplacingInvalidUtf8(std::string_view s, std::string& out) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  out.reserve(out.size() + s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    size_t bad = FindInvalidUtf8(s.substr(i));
    if (bad == std::string_view::npos) bad = s.size() - i;
    out.append(s.substr(i, bad));
    i += bad;
    if (i == s.size()) break;
    // The continuation bytes a lead byte may take, the first one narrowed
    // so that overlongs, surrogates and code points past U+10FFFF are not
    // part of a subpart.
    const unsigned char c = u[i];
    int need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    if (c >= 0xE0 && c <= 0xEF) need = 2;
    if (c >= 0xF0 && c <= 0xF4) need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    size_t len = 1;
    for (int k = 0; k < need && i + len < s.size() && u[i + len] >= lo && u[i + len] <= hi; ++k) {
      ++len;
      lo = 0x80;
      hi = 0xBF;
    }
    out += "\xEF\xBF\xBD";
    i += len;
  }
}

// `s` with each ill-formed sequence replaced by U+FFFD (as above).
inline std::string ReplaceInvalidUtf8(std::string_view s) {
  std::string out;
  AppendReplacingInvalidUtf8(s, out);
  return out;
}

}  // namespace corvid
