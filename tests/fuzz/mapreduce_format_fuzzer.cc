// mapreduce_format: the byte decoders of the map/reduce index's stored
// formats that mapreduce/format.h exposes (GetVarint from common/varint.h, GetNumberBody,
// FromOrderedDoubleBits, GetBE64) on arbitrary bytes, with their encoders'
// round trips. (The group-key decoder proper, DecodeComponent, is internal
// to mapreduce/query.cc; the router target reaches it through /results.)
// Invariants: GetVarint never reads past its end and re-encodes to the
// bytes it read when they were minimal; a 16-byte number body decodes, and
// what it decodes to encodes back to an equal number; the ordered double
// encoding round-trips every double but NaN and -0 and keeps order.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "mapreduce/format.h"
#include "tests/fuzz/fuzz_util.h"

namespace fmt = corvid::mapreduce::format;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* begin = reinterpret_cast<const char*>(data);
  const char* end = begin + size;

  // Varints, back to back.
  for (const char* p = begin; p < end;) {
    const char* at = p;
    uint64_t v = 0;
    if (!fmt::GetVarint(p, end, v)) break;
    FUZZ_CHECK(p > at && p <= end);
    std::string again;
    fmt::PutVarint(again, v);
    FUZZ_CHECK(again.size() <= size_t(p - at));
    // Minimal encodings (no redundant 0x80 continuation groups, and not
    // the 10th byte, whose bits past 64 are dropped) round-trip.
    if (p - at < 10 && (p - at == 1 || static_cast<uint8_t>(p[-1]) != 0))
      FUZZ_CHECK(std::string_view(at, size_t(p - at)) == again);
  }

  // Number bodies (16 bytes each), as min/max and group keys store them.
  for (size_t off = 0; off + 16 <= size; off += 16) {
    for (bool prefer_int : {false, true}) {
      bool is_int = false;
      int64_t i = 0;
      double d = 0;
      fmt::GetNumberBody(begin + off, prefer_int, &is_int, &i, &d);
      std::string enc;
      if (is_int) {
        fmt::PutKeyInt(enc, i);
        bool is_int2 = false;
        int64_t i2 = 0;
        double d2 = 0;
        fmt::GetNumberBody(enc.data() + 1, true, &is_int2, &i2, &d2);
        FUZZ_CHECK(is_int2 && i2 == i);
      } else if (!std::isnan(d)) {
        fmt::PutKeyDouble(enc, d);
        bool is_int2 = false;
        int64_t i2 = 0;
        double d2 = 0;
        fmt::GetNumberBody(enc.data() + 1, false, &is_int2, &i2, &d2);
        FUZZ_CHECK(d2 == d);
      }
    }
  }

  // Ordered doubles: bits -> double -> bits, and order.
  for (size_t off = 0; off + 16 <= size; off += 16) {
    const uint64_t a = fmt::GetBE64(begin + off), b = fmt::GetBE64(begin + off + 8);
    const double da = fmt::FromOrderedDoubleBits(a), db = fmt::FromOrderedDoubleBits(b);
    if (std::isnan(da) || std::isnan(db)) continue;
    if (da != 0) FUZZ_CHECK(fmt::OrderedDoubleBits(da) == a);
    if (da < db) FUZZ_CHECK(fmt::OrderedDoubleBits(da) < fmt::OrderedDoubleBits(db));
    char buf[8];
    fmt::PutBE64(buf, a);
    FUZZ_CHECK(std::memcmp(buf, begin + off, 8) == 0);
  }
  return 0;
}
