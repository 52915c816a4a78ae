// Small encoding helpers shared by the segment and manifest encoders and
// readers: fixed-width puts and gets, and what an outdated file's status
// says.
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
#include "common/varint.h"

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

// LEB128 varints (PutVarint, and the unchecked pointer-based readers of
// the hot paths): common/varint.h.

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
