// Checksum, crash-safe writes and memory maps for postings/ files.
#include "postings/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace corvid::postings {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t Round(uint64_t acc, uint64_t in) {
  acc += in * kP2;
  acc = Rotl(acc, 31);
  return acc * kP1;
}

}  // namespace

// Four accumulators over 32-byte stripes (XXH64's round function), then the
// tail bytes one 8-byte word (zero padded) at a time, then a final avalanche
// mixed with the length.
uint64_t Checksum64(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t a = kP1 + kP2, b = kP2, c = 0, d = 0 - kP1;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, 32);
    a = Round(a, w[0]);
    b = Round(b, w[1]);
    c = Round(c, w[2]);
    d = Round(d, w[3]);
  }
  uint64_t h = Rotl(a, 1) + Rotl(b, 7) + Rotl(c, 12) + Rotl(d, 18) + n;
  for (; i < n; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, std::min<size_t>(8, n - i));
    h ^= Round(0, w);
    h = Rotl(h, 27) * kP1 + kP3;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

}  // namespace corvid::postings
