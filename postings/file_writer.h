// A file written front to back through a bounded buffer: the streaming
// merger writes segments far larger than memory with it. Dirty pages are
// bounded too (written back every kWritebackBytes), so a merge under a
// memory cgroup does not fill it with page cache it cannot drop.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace corvid::postings {

class FileWriter {
 public:
  // Creates (truncates) `path` for writing. Errors are sticky: appends
  // after one are ignored and status() reports the first.
  static Result<FileWriter> Create(const std::string& path);
  // An unlinked temporary file in `dir`, written and then read back with
  // CopyTo (spills of the merger).
  static Result<FileWriter> Temporary(const std::string& dir);
  FileWriter(FileWriter&& o) noexcept;
  FileWriter& operator=(FileWriter&&) = delete;
  FileWriter(const FileWriter&) = delete;
  ~FileWriter();

  // Hashes (XXH3-64) every byte from offset `from` on; call before any byte
  // past `from` is written.
  void HashFrom(uint64_t from) { hash_from_ = from; }
  uint64_t Hash() const { return XXH3_64bits_digest(hash_); }

  void Append(const void* p, size_t n);
  void Append(std::string_view s) { Append(s.data(), s.size()); }
  template <typename T>
  void Put(T v) {
    Append(&v, sizeof v);
  }
  void Zeros(size_t n);
  // Zeros up to the next multiple of `a`.
  void AlignTo(size_t a) { Zeros((a - offset() % a) % a); }
  uint64_t offset() const { return offset_; }

  // Writes `n` bytes at `off` (< offset()), bypassing the hash: a header
  // whose fields are known only at the end.
  void WriteAt(uint64_t off, const void* p, size_t n);
  // Appends this (temporary) file's bytes [0, offset()) to `out`.
  void CopyTo(FileWriter& out);
  // Writes the buffer out and fdatasyncs.
  Status Sync();
  // Writes the buffer out; status() then says whether everything was written.
  void Flush();
  const Status& status() const { return status_; }

 private:
  static constexpr size_t kBufferBytes = size_t{1} << 20;
  static constexpr uint64_t kWritebackBytes = uint64_t{32} << 20;
  FileWriter(int fd, std::string path);
  void Fail(const char* what);
  void WriteOut(const char* p, size_t n, uint64_t at);

  int fd_ = -1;
  std::string path_;
  std::string buf_;
  uint64_t offset_ = 0;         // bytes appended
  uint64_t flushed_ = 0;        // bytes written to the file
  uint64_t written_back_ = 0;   // writeback started up to here
  uint64_t hash_from_ = UINT64_MAX;
  XXH3_state_t* hash_ = nullptr;
  Status status_;
};

}  // namespace corvid::postings
