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
inline uint64_t HashShortBytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  std::memcpy(&w, s.data() + i, s.size() - i);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  return h * 0x9E3779B97F4A7C15ull;
}

}  // namespace corvid
