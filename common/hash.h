// A fast 64-bit hash for short in-memory keys (terms, cache slots). Not
// stable across versions: never write it to disk (on-disk hashes, such as
// storage/format.h's IdHash, are defined beside their formats).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace corvid {

// Eight bytes at a time, each mixed by a multiply; all 64 output bits are
// well mixed, so callers may use low bits for buckets and high bits as tags.
// The bytes after the last whole word are read with fixed-size loads (one
// overlapping 8-byte load, or two 4-byte ones, or three bytes), never a
// variable-length copy: that is a library call, or byte stores to the stack
// that the next 8-byte load waits for (store forwarding fails), on a path
// taken once per token.
inline uint64_t HashShortBytes(std::string_view s) {
  const char* p = s.data();
  const size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  size_t i = 0;
  uint64_t w;
  for (; i + 8 <= n; i += 8) {
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  const size_t rest = n - i;
  if (rest == 0) {
    w = 0;
  } else if (n >= 8) {
    std::memcpy(&w, p + n - 8, 8);
  } else if (rest >= 4) {
    uint32_t a, b;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + n - 4, 4);
    w = (uint64_t{a} << 32) | b;
  } else {
    w = (uint64_t{static_cast<uint8_t>(p[0])} << 16) | (uint64_t{static_cast<uint8_t>(p[rest / 2])} << 8) |
        static_cast<uint8_t>(p[rest - 1]);
  }
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  return h * 0x9E3779B97F4A7C15ull;
}

}  // namespace corvid
