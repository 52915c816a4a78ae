// Small encoding helpers shared by the segment and manifest encoders and
// readers: the 32-bit LEB128 varints of the hot paths, fixed-width puts and
// gets, and what an outdated file's status says.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/durable_file.h"
#include "common/mapped_file.h"
#include "common/status.h"

namespace corvid::postings {

// The refusals of a segment or MANIFEST that is sound but outdated: written
// in another format, by another CRoaring, or for another definition. The
// readers end their Corruption message with one of these, and an index that
// starts over because of one does not report it as damage
// (SearchIndexImpl::Init).
inline constexpr std::string_view kOutdatedFormat = "unknown format version";
inline constexpr std::string_view kOutdatedRoaring = "written by another CRoaring version";
inline constexpr std::string_view kOutdatedDefinition = "written for another definition";
inline bool IsOutdated(const Status& s) {
  const std::string& m = s.message();
  return m.ends_with(kOutdatedFormat) || m.ends_with(kOutdatedRoaring) || m.ends_with(kOutdatedDefinition);
}

inline void PutVarint(std::string& out, uint32_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
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
// Decodes a varint at p (no bounds check: callers decode only data whose
// checksum was verified and whose structure was written by PutVarint).
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

template <typename T>
void PutFixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
template <typename T>
T GetFixed(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Crash-safe small files (WriteFileAtomic, ReadWholeFile, FsyncDir):
// common/durable_file.h. MappedFile: common/mapped_file.h.

}  // namespace corvid::postings
