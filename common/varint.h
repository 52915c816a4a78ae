// LEB128 varints of up to 64 bits (7 bits a byte, low first): the store's
// body headers and the map/reduce state's document records are written
// with them, so the encoding never changes (tests/common pins it). The
// postings' hot-path 32-bit codec, pointer-based, is in postings/file_util.h.
#pragma once

#include <cstdint>
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

}  // namespace corvid
