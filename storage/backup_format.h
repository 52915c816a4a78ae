// The backup file: one consistent snapshot of a data directory (the store,
// the index definitions, each index's files), as GET /admin/backup streams
// it and `corvid restore` installs it. It is written as it is produced, so
// no part's size is known before the part ends: sizes and checksums follow
// the data, and a manifest of every part ends the file.
//
// Format version 1, every integer little-endian:
//
//   file     := header part* trailer
//   header   := "CORVIDBK" | u32 version | u64 etag | u64 log sequence
//               (etag: the last etag the store part holds; log sequence:
//               the cluster log entry it came from, 0 on a single server)
//   part     := 'P' | u16 name length | name | chunk* | u32 0 |
//               u64 size | u64 XXH3-64 of the part's bytes
//               (name: a relative path under the data directory, of
//               [A-Za-z0-9._-] components joined by '/', none "." or "..")
//   chunk    := u32 length (1 .. kMaxChunk) | that many bytes
//   trailer  := 'E' | u32 part count | (u16 name length | name | u64 size |
//               u64 XXH3-64) per part, in file order |
//               u64 XXH3-64 of every byte of the file before this field |
//               "CORVIDBE"
//
// A reader trusts nothing before the whole file has been checked: restore
// reads it through once (every part's checksum, the manifest against the
// parts, the file checksum, the end magic) before it writes a byte, then
// again to write the parts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace corvid::storage {

inline constexpr char kBackupMagic[8] = {'C', 'O', 'R', 'V', 'I', 'D', 'B', 'K'};
inline constexpr char kBackupEndMagic[8] = {'C', 'O', 'R', 'V', 'I', 'D', 'B', 'E'};
inline constexpr uint32_t kBackupVersion = 1;
inline constexpr uint32_t kBackupMaxChunk = uint32_t{4} << 20;
inline constexpr size_t kBackupMaxName = 1024;

// Whether `name` may name a part (see the format above).
bool ValidBackupPartName(std::string_view name);

// Writes a backup through `sink`, in pieces of about kPiece bytes (whole
// chunks), never holding more than one piece.
class BackupWriter {
 public:
  static constexpr size_t kPiece = size_t{1} << 20;
  // Takes each piece (whole chunks, about kPiece bytes); it may keep it.
  using Sink = std::function<Status(std::string&& piece)>;

  BackupWriter(Sink sink, uint64_t etag, uint64_t log_sequence);
  ~BackupWriter();
  BackupWriter(const BackupWriter&) = delete;
  BackupWriter& operator=(const BackupWriter&) = delete;

  Status BeginPart(std::string_view name);
  Status Write(std::string_view bytes);
  Status EndPart();
  // Writes the trailer and hands everything left to the sink.
  Status Finish();

  uint64_t bytes_written() const { return written_; }

 private:
  struct Entry {
    std::string name;
    uint64_t size = 0, hash = 0;
  };
  Status Emit(std::string_view bytes);  // into the piece; the piece to the sink when full
  Status Flush();
  Status FlushChunk();

  Sink sink_;
  std::string piece_;
  std::string chunk_;          // the open part's bytes not yet framed
  void* file_hash_ = nullptr;  // XXH3_state_t
  void* part_hash_ = nullptr;
  bool in_part_ = false;
  Entry part_;
  std::vector<Entry> entries_;
  uint64_t written_ = 0;
};

struct BackupPartInfo {
  std::string name;
  uint64_t size = 0;
  uint64_t hash = 0;
};

struct BackupInfo {
  uint32_t version = 0;
  uint64_t etag = 0;
  uint64_t log_sequence = 0;
  uint64_t file_bytes = 0;
  std::vector<BackupPartInfo> parts;
};

// Reads the whole file and checks everything the format lets a reader
// check; writes nothing. Corruption names what is wrong and where.
Result<BackupInfo> VerifyBackup(const std::string& path);

// Progress of a restore: bytes of the file read so far, and its size.
using RestoreProgress = std::function<void(uint64_t done, uint64_t total)>;

// Verifies `path`, then writes every part under `dir` (created; it must not
// exist or be empty), each file fsynced, then the directories. On failure
// after writing began, what was written is removed.
Result<BackupInfo> RestoreBackup(const std::string& path, const std::string& dir, const RestoreProgress& progress = {});

}  // namespace corvid::storage
