#pragma once

// An index's files as one consistent state, for a backup
// (GET /admin/backup): taken at once, read later on another thread while
// the index goes on. Each file's writer keeps alive what it reads (a
// segment's mapping, a copy of an LMDB environment).

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace corvid {

using ByteSink = std::function<Status(std::string_view)>;

struct SnapshotFile {
  std::string name;  // relative to the index's state directory
  // Hands the file's bytes to `sink`, in pieces.
  std::function<Status(const ByteSink& sink)> write;
};

struct StateSnapshot {
  uint64_t etag = 0;  // the etag the files cover
  std::vector<SnapshotFile> files;
};

}  // namespace corvid
