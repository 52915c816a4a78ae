// DocumentStore: the storage facade. JSON documents keyed by (collection,
// id) in LMDB, a server-wide etag per write, a change feed ordered by etag
// (tombstones included) and a "new etag committed" signal. Every write goes
// through one transaction merger (group commit, see document_store_write.cc);
// reads go straight to LMDB's MVCC snapshots and never block writers.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/doc_change.h"
#include "common/status.h"
#include "common/verify_report.h"

namespace corvid::storage {

struct StoreOptions {
  // Virtual size of the LMDB map; the file grows only as data is written.
  size_t map_size = size_t{256} << 30;
  // Bodies at least this large are zstd-compressed (kept raw when that is
  // not smaller) while their collection has no dictionary; with one, from
  // body::kDictCompressMinBytes; large objects are always structured
  // (body_format.h).
  size_t compress_threshold = 1024;
  int zstd_level = 1;
  // The merger closes a batch once it holds this many operations or bytes
  // (a bulk request is never split, so one may exceed them).
  size_t max_batch_ops = 20000;
  size_t max_batch_bytes = size_t{64} << 20;
  // A commit that takes this long is logged (store.slow_commit); 0: never.
  uint64_t slow_commit_ms = 1000;
  // Change batches drop the map's pages from the process's resident set
  // each time they have read this many bytes of bodies through it (0:
  // never). Those pages are page cache, not memory the server holds, but
  // they count in its RSS, and Linux maps a touched page's whole folio (up
  // to 2 MB): an index reading the headers of large documents mapped the
  // whole store.
  size_t drop_resident_every = size_t{32} << 20;
};

enum class WriteKind : uint8_t { kPut, kDelete };

// One document write. Preconditions are honoured only for single-document
// requests (bulk requests carry none).
struct WriteOp {
  WriteKind kind = WriteKind::kPut;
  std::string collection;
  std::string id;
  std::string body;                   // JSON text for kPut; empty for kDelete
  std::optional<uint64_t> if_match;   // stored etag must equal this
  bool if_match_any = false;          // the document must exist (If-Match: *)
  bool if_none_match_any = false;     // the document must not exist
};

// Where a replicated store stands in its cluster's write log (cluster/):
// every entry up to `applied` is in the store (or was skipped), and a
// restart reads the log again from `resume` (<= applied + 1: a bulk's
// chunks before its commit entry are read again). `applied_hash` is the
// fingerprint of entry `applied` as the log held it (0: not recorded), so
// a node can tell whether its log and the cluster's still agree.
// `history` digests the fingerprints of every entry up to `applied`
// (cluster/history_check.h; 0: not recorded), so that nodes can compare
// whole histories, not only their last entries.
struct LogPosition {
  uint64_t applied = 0;
  uint64_t resume = 0;
  uint64_t applied_hash = 0;
  uint64_t history = 0;
};

// A request is applied atomically: all of its ops or none.
struct WriteRequest {
  std::vector<WriteOp> ops;
  // Single-document semantics: preconditions apply and deleting an absent
  // document is NotFound. Bulk (false): deletes of absent ids still record
  // a tombstone, so every op receives an etag.
  bool single = true;
  // Cluster mode: the log entry this request applies, recorded in the same
  // transaction as its writes (a request with no ops records only that).
  std::optional<LogPosition> log;
};

struct WriteResult {
  Status status;            // ok, NotFound, PreconditionFailed, IOError, ...
  uint64_t first_etag = 0;  // etags given to the ops, consecutive
  uint64_t last_etag = 0;
  bool created = false;     // single PUT: the document did not exist before
};

struct Document {
  uint64_t etag = 0;
  std::string body;  // the JSON text exactly as written
};

struct Change {
  uint64_t etag = 0;
  std::string collection;
  std::string id;
  bool deleted = false;
};

// What one PurgeTombstones call did.
struct PurgeResult {
  uint64_t purged = 0;      // tombstones removed (with their change-feed entries)
  uint64_t scanned_to = 0;  // every tombstone up to this etag is gone
  uint64_t purged_max = 0;  // the highest etag of a tombstone ever purged
};

struct CollectionInfo {
  std::string name;
  uint64_t count = 0;       // live documents
  uint64_t tombstones = 0;  // deleted documents (each has one change-feed entry)
};

// A batch of one collection's changes with the documents' bodies, read in
// one snapshot. Bodies point into LMDB's memory map (or, for compressed
// ones, into the batch's own buffers): valid while the batch lives. Holding
// a batch pins an LMDB read snapshot, so keep it only while indexing it.
class ChangeBatch {
 public:
  virtual ~ChangeBatch() = default;
  // Ascending etag. For deleted documents `json` is empty.
  virtual std::span<const DocChange> changes() const = 0;
  // True when the batch holds every change of the collection up to the
  // store's last etag as of the snapshot (it was not cut by a limit).
  virtual bool complete() const = 0;
  // The store's last etag in the batch's snapshot.
  virtual uint64_t snapshot_etag() const = 0;
};

// Validates a collection name or document id: 1..512 bytes of UTF-8
// without NUL. Returns InvalidArgument naming `what` otherwise.
Status ValidateName(std::string_view name, std::string_view what);

class DocumentStore {
 public:
  using WriteCallback = std::function<void(WriteResult)>;
  using CommitListener = std::function<void(uint64_t last_etag)>;

  // Opens (creating if needed) the store in directory `dir`.
  static Result<std::unique_ptr<DocumentStore>> Open(const std::string& dir,
                                                     StoreOptions options = {});
  // `corvid verify`: checks the store in `dir` (not open anywhere: the
  // server is stopped) without changing it, adding what it finds to
  // `report` (store_verify.cc). A non-ok Status: the check itself failed.
  static Status Verify(const std::string& dir, VerifyReport& report);
  // Drains queued writes, stops the merger and closes LMDB.
  ~DocumentStore();
  DocumentStore(const DocumentStore&) = delete;
  DocumentStore& operator=(const DocumentStore&) = delete;

  // Queues a write. Bodies are compressed on the calling thread; `done` is
  // called exactly once, on the merger thread, after the write is durable
  // (fsync'd) or has failed. `done` must not block for long.
  void Submit(WriteRequest request, WriteCallback done);
  // Submit and wait: for tests and tools.
  WriteResult Write(WriteRequest request);

  // The document, or NotFound (absent or deleted).
  Result<Document> Get(std::string_view collection, std::string_view id) const;

  // A page of a collection's live documents whose ids sort (bytewise) after
  // `after`, in id order, from one read snapshot: at most `limit`, with
  // `more` set when another follows. NotFound for a collection never
  // written. Cost: one cursor walk over the page (plus the tombstones
  // among it), every body decompressed.
  struct DocumentPage {
    struct Entry {
      std::string id;
      uint64_t etag = 0;
      std::string body;
    };
    std::vector<Entry> docs;
    bool more = false;
  };
  Result<DocumentPage> ListDocuments(std::string_view collection, std::string_view after, size_t limit) const;

  // Changes with etag > since in etag order, at most `limit`, optionally of
  // one collection only. Each document appears once, at its latest etag.
  Result<std::vector<Change>> ChangesSince(uint64_t since, size_t limit,
                                           std::optional<std::string_view> collection = {}) const;

  // The changes of `collection` with etag > since, with bodies, at most
  // `max_docs` documents and (roughly) `max_bytes` of bodies, always at
  // least one change if there is any. With `fields` (top-level names,
  // sorted), a body may be only those fields (a JSON object of them, in
  // document order): large documents are then read by the fields an index
  // uses, not whole (body_format.h); small ones come whole.
  Result<std::unique_ptr<ChangeBatch>> ReadChangeBatch(std::string_view collection, uint64_t since,
                                                       size_t max_docs, size_t max_bytes,
                                                       std::span<const std::string> fields = {}) const;

  // How many changes of `collection` have etag > since (the backlog of an
  // index that has processed through `since`), counting at most `cap`.
  // Cost: O(log n + result).
  Result<uint64_t> CountChangesSince(std::string_view collection, uint64_t since, uint64_t cap = UINT64_MAX) const;

  // The same, exact up to `exact_up_to` and, with `estimate`, estimated
  // beyond (the collection's entries taken as evenly spread over its
  // etags), so that a progress report costs O(log n + exact_up_to), not
  // O(backlog).
  Result<uint64_t> BacklogSince(std::string_view collection, uint64_t since, uint64_t exact_up_to,
                                bool estimate = true) const;

  // Collections sorted by name, with their live document counts.
  std::vector<CollectionInfo> Collections() const;
  // One collection's counts, if it exists.
  std::optional<CollectionInfo> Collection(std::string_view name) const;

  // The etag of the last durable write (0 for an empty store).
  uint64_t LastEtag() const;


  // Registers `listener`, called on the merger thread after every commit.
  // Listeners must be cheap and must not call back into the store's write
  // path synchronously. Returns a handle for RemoveCommitListener.
  uint64_t AddCommitListener(CommitListener listener);
  void RemoveCommitListener(uint64_t handle);

  // Removes tombstones (their documents' entries and change-feed entries)
  // with etag <= `through`, in transactions of at most `batch` each, through
  // the merger; the scan resumes where the last one stopped (a tombstone is
  // always newer than any scan that could have missed it). With
  // `clock_time` (unix seconds), records (clock_time, LastEtag()) in the
  // etag clock, and drops the samples older than `clock_keep_from` but the
  // newest of them (the one EtagAtTime(clock_keep_from) needs), so the
  // clock stays as long as the retention. Collection tombstone counts drop
  // accordingly.
  Result<PurgeResult> PurgeTombstones(uint64_t through, uint64_t clock_time = 0, size_t batch = 10000,
                                      uint64_t clock_keep_from = 0);
  // The last etag the store had at or before unix time `t`, from the etag
  // clock (0 if no sample is that old).
  Result<uint64_t> EtagAtTime(uint64_t t) const;
  // The highest etag of a tombstone ever purged (0: none): a reader of the
  // change feed from below it may have missed deletes.
  uint64_t PurgedMax() const;

  // The last log position committed (all zero for a single server).
  LogPosition GetLogPosition() const;
  // Once a request carrying a log position failed for a reason of this
  // node's own (I/O, a full disk, a fault; not a precondition), every later
  // such request fails (Unavailable) without being applied, so a node never
  // applies an entry without the ones before it; the applier reads the log
  // again from GetLogPosition() and then lifts the fence.
  void ResetLogFence();

  // A compacted copy of one read snapshot of the store (LMDB's
  // mdb_env_copyfd2), read as a stream: the bytes of a data.mdb that
  // `DocumentStore::Open` opens as this store was at `etag()`. Writes go on
  // meanwhile; they wait only while the copy's snapshot is taken. The copy
  // runs on a thread of its own; destroying the object stops it.
  class SnapshotCopy {
   public:
    virtual ~SnapshotCopy() = default;
    // The last etag the snapshot holds.
    virtual uint64_t etag() const = 0;
    // Cluster mode: the last log entry the snapshot holds (0 otherwise).
    virtual uint64_t log_applied() const = 0;
    // Up to `cap` bytes into `buf`; 0 at the end. An error if the copy failed.
    virtual Result<size_t> Read(char* buf, size_t cap) = 0;
  };
  Result<std::unique_ptr<SnapshotCopy>> BeginSnapshotCopy() const;

  struct Stats {
    uint64_t commits = 0;        // durable transactions
    uint64_t requests = 0;       // requests applied (ok or failed)
    uint64_t ops = 0;            // ops written
    uint64_t max_batch_requests = 0;
  };
  Stats GetStats() const;

  class Impl;

 private:
  explicit DocumentStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace corvid::storage
