// The on-disk layout of a map/reduce index, and its encoders/decoders.
// Everything mapreduce/ writes to LMDB is described here, so an index
// directory can be recognised and verified long after it was written.
//
// Environment: `<dir>/data.mdb` (LMDB, default durable sync mode), with these
// named databases. Integers in values are little-endian; keys use the
// order-preserving encodings below so LMDB's bytewise order is result order.
//
//   "meta"    "format"       -> u32 kFormatVersion
//             "fingerprint"  -> u64 Definition::Fingerprint()
//             "through_etag" -> u64 LastAppliedEtag()
//   "rows"    GroupKey       -> RowValue      (one per group key with >= 1 entry)
//   "docs"    DocKey         -> DocRecord     (one per document with >= 1 entry)
//   "minmax"  u8 reducer | GroupKey | OrderedNumber -> u64 multiplicity
//             (a counted multiset per group key and min/max reducer: the
//             first key under the prefix is the min, the last the max)
//
// GroupKey (a tuple, order-preserving, self-delimiting; CouchDB collation
// bool < number < string). The empty tuple is the single byte 0x00. Else the
// concatenation of its components:
//   false       0x10
//   true        0x11
//   number      0x20 | OrderedDouble(d) 8 bytes | u64 BE (residual ^ 2^63)
//               d = the value as a double (-0 normalised to +0); residual =
//               value - d, exact, nonzero only for int64 values that a double
//               cannot hold. So 1 and 1.0 are the same key; decoding gives an
//               integer when the value is integral and fits int64.
//   string      0x30 | UTF-8 bytes with 0x00 written 0x00 0xFF | 0x00 0x01
// A GroupKey is at most kMaxGroupKeyBytes; a longer one is an index error.
//
// OrderedDouble(d): the IEEE bits, big-endian, sign bit flipped for d >= 0,
// all bits flipped for d < 0 (so memcmp order is numeric order).
//
// OrderedNumber (17 bytes, min/max values): OrderedDouble(d) | u64 BE
// (residual ^ 2^63) | u8 type (0 int64, 1 double). 2 and 2.0 are distinct,
// adjacent entries (the int first).
//
// DocKey: the document id when at most kMaxDirectIdBytes, else its first
// kMaxDirectIdBytes - 8 bytes | u64 BE FNV-1a hash of the whole id.
//
// DocRecord: varint entry count, then per entry
//   varint key length | GroupKey | per numeric reducer (sum/avg/min/max, in
//   definition order): u8 kind (0 none, 1 int64, 2 double) [| 8 bytes LE]
//
// RowValue (fixed size for a definition): u64 entry count, then per reducer
//   count()       nothing (it is the entry count)
//   sum/avg       i128 integer sum | f64 sum of doubles | u64 numeric inputs
//                 | u64 double inputs | f64 the doubles' compensation
//                 (AddCompensated; the sum is f64 sum + compensation)  (48 bytes)
//   min/max       u8 present | OrderedNumber cached min or max    (18 bytes)
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/fnv1a.h"
#include "common/varint.h"

namespace corvid::mapreduce::format {

inline constexpr uint32_t kFormatVersion = 2;  // 2: compensated double sums
inline constexpr size_t kMaxGroupKeyBytes = 480;
inline constexpr size_t kMaxDirectIdBytes = 500;
inline constexpr size_t kOrderedNumberBytes = 17;

inline constexpr uint8_t kTagFalse = 0x10;
inline constexpr uint8_t kTagTrue = 0x11;
inline constexpr uint8_t kTagNumber = 0x20;
inline constexpr uint8_t kTagString = 0x30;

inline constexpr uint8_t kNumNone = 0;
inline constexpr uint8_t kNumInt = 1;
inline constexpr uint8_t kNumDouble = 2;

inline void PutBE64(char* p, uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    p[i] = char(v & 0xff);
    v >>= 8;
  }
}
inline uint64_t GetBE64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | uint8_t(p[i]);
  return v;
}
template <typename T>
inline void PutLE(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
inline T GetLE(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Varints: common/varint.h.
using corvid::GetVarint;
using corvid::PutVarint;

inline uint64_t OrderedDoubleBits(double d) {
  if (d == 0) d = 0;  // -0 -> +0
  uint64_t u = std::bit_cast<uint64_t>(d);
  return (u & (uint64_t(1) << 63)) ? ~u : (u | (uint64_t(1) << 63));
}
inline double FromOrderedDoubleBits(uint64_t u) {
  u = (u & (uint64_t(1) << 63)) ? (u & ~(uint64_t(1) << 63)) : ~u;
  return std::bit_cast<double>(u);
}

// A number split as (d, residual): see "number" above.
inline void SplitInt(int64_t v, double* d, int64_t* residual) {
  *d = double(v);
  *residual = int64_t(__int128(v) - __int128(*d));
}

// Appends OrderedDouble(d) | residual (16 bytes).
inline void PutNumberBody(std::string& out, double d, int64_t residual) {
  char b[16];
  PutBE64(b, OrderedDoubleBits(d));
  PutBE64(b + 8, uint64_t(residual) ^ (uint64_t(1) << 63));
  out.append(b, 16);
}

// Decodes a 16-byte number body; sets *is_int and *i when the value is an
// integral int64 (prefer_int: treat an integral double as an int).
inline void GetNumberBody(const char* p, bool prefer_int, bool* is_int, int64_t* i, double* d) {
  *d = FromOrderedDoubleBits(GetBE64(p));
  int64_t residual = int64_t(GetBE64(p + 8) ^ (uint64_t(1) << 63));
  *is_int = false;
  if (residual != 0 || prefer_int) {
    if (*d >= -9223372036854775808.0 && *d <= 9223372036854775808.0 && double(__int128(*d)) == *d) {
      __int128 v = __int128(*d) + residual;
      if (v >= INT64_MIN && v <= INT64_MAX) {
        *is_int = true;
        *i = int64_t(v);
      }
    }
  }
}

inline void PutKeyInt(std::string& out, int64_t v) {
  out.push_back(char(kTagNumber));
  double d;
  int64_t r;
  SplitInt(v, &d, &r);
  PutNumberBody(out, d, r);
}
inline void PutKeyDouble(std::string& out, double v) {
  out.push_back(char(kTagNumber));
  PutNumberBody(out, v, 0);
}
inline void PutKeyBool(std::string& out, bool b) { out.push_back(char(b ? kTagTrue : kTagFalse)); }
inline void PutKeyString(std::string& out, std::string_view s) {
  out.push_back(char(kTagString));
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\0') {
      out.append(s.data() + start, i + 1 - start);
      out.push_back(char(0xff));
      start = i + 1;
    }
  }
  out.append(s.data() + start, s.size() - start);
  out.push_back('\0');
  out.push_back('\x01');
}

// OrderedNumber (17 bytes) for min/max values.
inline void PutOrderedInt(std::string& out, int64_t v) {
  double d;
  int64_t r;
  SplitInt(v, &d, &r);
  PutNumberBody(out, d, r);
  out.push_back('\0');
}
inline void PutOrderedDouble(std::string& out, double v) {
  PutNumberBody(out, v, 0);
  out.push_back('\x01');
}

// FNV-1a 64 (common/fnv1a.h), for long document ids and definition
// fingerprints.
using corvid::Fnv1a64;

// Writes the DocKey of `id` into *out (replacing its contents).
inline void DocKey(std::string_view id, std::string* out) {
  if (id.size() <= kMaxDirectIdBytes) {
    out->assign(id);
    return;
  }
  out->assign(id.substr(0, kMaxDirectIdBytes - 8));
  char b[8];
  PutBE64(b, Fnv1a64(id));
  out->append(b, 8);
}

}  // namespace corvid::mapreduce::format
