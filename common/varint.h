// LEB128 varints of up to 64 bits (7 bits a byte, low first): the store's
// body headers, the map/reduce state's document records and the postings'
// segments are written with them, so the encoding never changes
// (tests/common pins it). GetVarint checks its bounds; the pointer-based
// readers below it serve the postings' hot paths over checksummed data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace corvid {

inline void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Reads a varint at `p` (advanced past it); false if it runs past `end` or
// is longer than 64 bits allow.
inline bool GetVarint(const char*& p, const char* end, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p == end) return false;
    const auto b = static_cast<uint8_t>(*p++);
    v |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// The same bytes written at p (room for VarintSize(v) <= 5); returns the
// byte after them.
inline char* WriteVarint(char* p, uint32_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}
inline size_t VarintSize(uint32_t v) {
  return 1 + (v >= (1u << 7)) + (v >= (1u << 14)) + (v >= (1u << 21)) + (v >= (1u << 28));
}
// Decodes a varint of at most 32 bits at p, with no bounds check: only for
// data whose checksum was verified and whose structure was written by
// PutVarint (postings' segments). Returns the byte after it.
inline const uint8_t* GetVarint(const uint8_t* p, uint32_t* v) {
  uint32_t r = 0;
  int shift = 0;
  while (*p & 0x80) {
    r |= static_cast<uint32_t>(*p & 0x7f) << shift;
    shift += 7;
    ++p;
  }
  *v = r | (static_cast<uint32_t>(*p) << shift);
  return p + 1;
}

// Skips n varints from p: eight bytes at a time (a byte below 0x80 ends a
// varint), then byte by byte. A word is read only while at least 8
// varints (8 bytes) remain, so nothing past the last varint is read.
inline const uint8_t* SkipVarints(const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    const auto ends = static_cast<size_t>((((~w & 0x8080808080808080ull) >> 7) * 0x0101010101010101ull) >> 56);
    if (ends >= n) break;  // the n-th end is in this word: finish byte by byte
    n -= ends;
    p += 8;
  }
  for (; n > 0; --n) {
    while (*p & 0x80) ++p;
    ++p;
  }
  return p;
}

}  // namespace corvid
