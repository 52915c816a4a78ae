// ErrorLog: an index's errors on disk, so `errors.count` and `recent`
// survive restarts (as RavenDB keeps index errors). Only the index's
// worker thread uses it.
//
// Format: <index dir>/errors.log, NDJSON, one error per line:
//   {"etag": N, "id": "...", "message": "...", "at": <ms since the Unix epoch>}
// optionally preceded by one line {"dropped": N} counting older errors that
// compaction removed. A batch's errors are appended just before the batch
// commits (the index kinds' BeforeCommit hook), so a process killed
// between the two runs the batch again rather than losing its errors, and
// Append skips what that second run finds again. Appends are not fsync'd:
// after a power loss the log may miss the last errors (the documents stay
// indexed or skipped as before); a torn last line is ignored on load.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <span>

#include "indexing/index_engine.h"

namespace corvid::indexing {

class ErrorLog {
 public:
  // Loads `path` if it exists (an unreadable or missing file is an empty log).
  explicit ErrorLog(std::filesystem::path path);

  // Appends `errors` to the file and to recent(); compacts the file when
  // it holds many more lines than are kept in memory. Errors at or below
  // the highest etag of an earlier Append are skipped: they come from a
  // batch run again after its commit failed or the process died (the
  // engine logs a batch's errors just before the batch commits). An error
  // with etag 0 is about the index, not a document (its files were found
  // damaged), and is never skipped.
  void Append(std::span<const RecordedError> errors);
  // Forgets every error and removes the file.
  void Clear();

  uint64_t count() const { return count_; }
  // The last kMaxRecentErrors errors, oldest first.
  const std::deque<RecordedError>& recent() const { return recent_; }

 private:
  void Compact();

  std::filesystem::path path_;
  uint64_t count_ = 0;
  uint64_t through_ = 0;  // the highest etag logged
  uint64_t lines_in_file_ = 0;
  std::deque<RecordedError> recent_;
};

}  // namespace corvid::indexing
