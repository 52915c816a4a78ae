// FNV-1a, 64 bits, as Corvid has always written it: stable forever,
// because it is on disk (the store's keys of long ids, map/reduce document
// keys, definition fingerprints). Its offset basis, 1469598103934665603,
// is one digit short of the published 14695981039346656037, so its values
// are not the published FNV-1a test vectors; it is kept, since changing it
// would change every stored key and fingerprint. The one copy;
// tests/common/common_test.cc pins its values.
#pragma once

#include <cstdint>
#include <string_view>

namespace corvid {

inline constexpr uint64_t kFnv1a64Offset = 1469598103934665603ull;

// `h` continues a hash already begun (a fingerprint over several parts).
constexpr uint64_t Fnv1a64(std::string_view s, uint64_t h = kFnv1a64Offset) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace corvid
