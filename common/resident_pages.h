#pragma once

// Keeping a pass over a whole memory-mapped file (a backup copying the
// store, an index's environment or a segment) out of the process's resident
// set. The pages stay in the page cache; the next access maps them again
// with a minor fault. Without this, VmRSS grows by every byte a backup
// reads, though none of it is memory the process holds. And asking for a
// range of a mapping ahead of reading it (WillNeed).

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

namespace corvid {

// madvise over the pages that hold [data, data + size).
inline void AdvisePages(const void* data, size_t size, int advice) {
  if (data == nullptr || size == 0) return;
  const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t start = uintptr_t(data) & ~(page - 1);
  (void)::madvise(reinterpret_cast<void*>(start), uintptr_t(data) + size - start, advice);
}

// Drops the pages of [data, data + size) of a read-only shared file
// mapping from the resident set.
inline void DropResidentPages(const void* data, size_t size) { AdvisePages(data, size, MADV_DONTNEED); }

// Starts reading [data, data + size) of a file mapping into the page cache
// without waiting for it (MADV_WILLNEED): one request for a range a reader
// is about to walk, instead of a fault per page of a MADV_RANDOM mapping.
inline void WillNeed(const void* data, size_t size) { AdvisePages(data, size, MADV_WILLNEED); }

// The address and length of this process's mapping of the file at `path`
// (the largest, if several), from /proc/self/maps; none if it has none.
// For mappings made by a library that does not say where (LMDB's).
inline std::optional<std::pair<void*, size_t>> FindFileMapping(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return std::nullopt;
  std::optional<std::pair<void*, size_t>> best;
  char line[4096];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    unsigned major = 0, minor = 0;
    char perms[8];
    if (std::sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &start, &end, perms, &offset, &major, &minor, &inode) != 7)
      continue;
    if (inode != st.st_ino || makedev(major, minor) != st.st_dev) continue;
    if (!best || end - start > best->second) best = std::make_pair(reinterpret_cast<void*>(start), size_t(end - start));
  }
  std::fclose(maps);
  return best;
}

}  // namespace corvid
