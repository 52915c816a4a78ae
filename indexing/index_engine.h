// IndexEngine: the indexing facade. It owns every index — its definition,
// its state on disk and one worker thread that pulls the index's collection
// from the store's change feed — and reports progress, errors and
// freshness. Index kinds (map/reduce and search, indexing/kinds.cc) plug in through
// index_kind.h; this engine knows nothing kind-specific beyond creating them.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/state_snapshot.h"
#include "common/status.h"
#include "common/verify_report.h"

namespace corvid::storage {
class DocumentStore;
}
namespace corvid::mapreduce {
class MapReduceIndex;
}
namespace corvid::postings {
class SearchIndex;
}

namespace corvid::indexing {

enum class PutOutcome { kCreated, kUnchanged, kReplaced };

struct RecordedError {
  uint64_t etag = 0;
  std::string id;
  std::string message;
  std::chrono::system_clock::time_point at;
};

// The kinds of index (API.md: a definition's "type").
enum class IndexType { kMapReduce, kSearch };
// "mapreduce" | "search", as definitions and /admin/indexes name them.
inline const char* IndexTypeName(IndexType t) { return t == IndexType::kMapReduce ? "mapreduce" : "search"; }

// An index's state as /admin/indexes reports it.
enum class IndexState { kIdle, kIndexing, kPaused, kError };
inline const char* IndexStateName(IndexState s) {
  switch (s) {
    case IndexState::kIdle: return "idle";
    case IndexState::kIndexing: return "indexing";
    case IndexState::kPaused: return "paused";
    case IndexState::kError: return "error";
  }
  return "error";
}

// What GET /admin/indexes reports for one index (API.md, Administration).
struct IndexProgress {
  std::string name;
  IndexType type = IndexType::kSearch;
  std::string collection;
  IndexState state = IndexState::kIdle;
  std::string state_message;  // why, when state is error
  uint64_t last_indexed_etag = 0;
  uint64_t backlog = 0;    // unprocessed changes of the collection
  double progress = 1.0;   // processed / (processed + backlog) change-feed entries
  bool stale = false;
  // Documents processed per second of wall time over the last minute (or
  // since the first batch in it began): the rate lastIndexedEtag moves at.
  double docs_per_sec = 0;
  // backlog / docs_per_sec; 0 when caught up; none while nothing moves.
  std::optional<double> eta_seconds;
  uint64_t entries = 0;
  uint64_t error_count = 0;
  std::vector<RecordedError> recent_errors;  // oldest first, at most kMaxRecentErrors
  uint64_t last_batch_docs = 0;
  double last_batch_ms = 0;
  uint64_t memory_bytes = 0;
  uint64_t disk_bytes = 0;
  // Totals since start-up, for /metrics.
  uint64_t indexed_docs_total = 0;
  uint64_t batches_total = 0;
  double batch_ms_total = 0;
  // A changed definition building beside this one (API.md, Indexes): its
  // progress and definition, until it replaces this one.
  std::shared_ptr<const IndexProgress> replacing;
  std::string replacing_definition;
};

inline constexpr size_t kMaxRecentErrors = 500;

struct EngineOptions {
  size_t batch_max_docs = 8192;
  // A batch stops taking documents once it holds this much JSON. Each batch
  // is one segment with its own per-term lists: large documents with many
  // fields (W3) index ~8% faster per worker at 64 MiB than at 32 MiB.
  size_t batch_max_bytes = size_t{64} << 20;
  // Tombstones older than this that every index has processed are purged
  // (API.md, --tombstone-retention); none: never.
  std::optional<std::chrono::seconds> tombstone_retention;
};

// A query's view of one index: keeps the index alive while it is read.
struct IndexReader {
  std::string name;
  IndexType type = IndexType::kSearch;
  std::string collection;
  uint64_t indexed_etag = 0;  // processed through this etag when the reader was taken
  uint64_t generation = 0;    // of the index's state then (IndexEngine::ResetSince)
  std::shared_ptr<const mapreduce::MapReduceIndex> mapreduce;  // set for kMapReduce
  std::shared_ptr<const postings::SearchIndex> search;         // set for kSearch
};

// One index in a backup: its current definition and its state's files,
// taken together (IndexEngine::SnapshotIndexes).
struct IndexBackup {
  std::string name;
  std::string definition_json;
  StateSnapshot state;
};

class IndexEngine {
 public:
  using ProgressListener = std::function<void(const std::string& name, uint64_t indexed_etag)>;

  // Opens every index defined under `dir` and starts its worker. The store
  // must outlive the engine.
  static Result<std::unique_ptr<IndexEngine>> Open(const std::string& dir, storage::DocumentStore& store,
                                                   EngineOptions options = {});
  // `corvid verify`: checks every index's definition and state under
  // `dir` (the server stopped) without changing anything.
  static Status Verify(const std::string& dir, VerifyReport& report);
  // Stops every worker (the batch in progress finishes first).
  ~IndexEngine();
  IndexEngine(const IndexEngine&) = delete;
  IndexEngine& operator=(const IndexEngine&) = delete;

  // Creates the index, or replaces it (rebuilding from the store) when the
  // definition differs; the same definition again is a no-op. Invalid
  // names or definitions → InvalidArgument saying what is wrong.
  Result<PutOutcome> PutIndex(std::string_view name, std::string_view definition_json);
  // Stops the worker and removes the index and its files. NotFound if absent.
  Status DeleteIndex(std::string_view name);

  std::vector<std::string> Names() const;  // sorted
  // The definition's JSON text as it was given.
  Result<std::string> Definition(std::string_view name) const;
  Result<IndexProgress> Progress(std::string_view name) const;
  std::vector<IndexProgress> AllProgress() const;  // sorted by name

  // Pause: returns once the worker's current batch (if any) is done; no
  // later change is indexed until Resume.
  // Reset: drops the index's state and rebuilds it from the store; returns
  // once the state is dropped (the index reports etag 0 from then on).
  Status Pause(std::string_view name);
  Status Resume(std::string_view name);
  Status Reset(std::string_view name);

  // For queries.
  Result<IndexReader> Reader(std::string_view name) const;

  // Every index's current version as one consistent state each (a
  // replacement still building is left out: a restore resumes from the
  // version that answered). Each index's etag is at most the store's last
  // etag now, so a store snapshot taken after this covers every index.
  Result<std::vector<IndexBackup>> SnapshotIndexes() const;
  // The etag the index has processed through, now (a reader's is the one
  // when it was taken; a reset lowers it to 0).
  Result<uint64_t> IndexedEtag(std::string_view name) const;
  // True if the index was reset, replaced or deleted since the reader was
  // taken: a query's snapshot may then be of the new state, which covers
  // less than the reader's indexed_etag.
  bool ResetSince(const IndexReader& reader) const;
  // The etag a query's answer is complete through, given the etag of the
  // snapshot it read: the larger of the reader's (taken before the query;
  // the worker publishes it after the state it covers, and it runs ahead
  // of the snapshot's when the collection had no changes) and the
  // snapshot's; only the snapshot's if the index was reset meanwhile (the
  // snapshot may be the cleared or a partly rebuilt state).
  uint64_t AnswerEtag(const IndexReader& reader, uint64_t snapshot_etag) const;
  // True if the index's collection has changes after `indexed_etag`.
  bool IsStale(const IndexReader& reader, uint64_t indexed_etag) const;
  // Called on a worker thread after each batch (and after each catch-up
  // with nothing to do for the collection). Must be cheap.
  uint64_t AddProgressListener(ProgressListener listener);
  void RemoveProgressListener(uint64_t handle);

  class Impl;

 private:
  explicit IndexEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace corvid::indexing
