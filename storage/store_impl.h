// DocumentStore::Impl, shared by document_store.cc (open, reads) and
// document_store_write.cc (the transaction merger). Internal to storage/.
//
// Guards (each member says what it guards): `queue_mu` the write queue;
// `collections_mu` the in-memory collection table (written by the merger
// after a commit); `dicts_mu` and `samplers_mu` the compression
// dictionaries and their samples; `log_mu` the cluster log position;
// `stats_mu` the counters. LMDB serializes
// writers itself (only the merger thread writes). The one lock held across
// an LMDB commit (its fsync) is `commit_gate`, which only a backup's
// snapshot (BeginSnapshotCopy) waits for.
#pragma once

#include <lmdb.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "common/listener_set.h"
#include "common/lmdb_util.h"
#include "storage/body_format.h"
#include "storage/document_store.h"
#include "storage/format.h"

namespace corvid::storage {


// An LMDB cursor, closed on scope exit.
class Cursor {
 public:
  Cursor(MDB_txn* txn, MDB_dbi dbi) { rc_ = mdb_cursor_open(txn, dbi, &cur_); }
  ~Cursor() { if (cur_) mdb_cursor_close(cur_); }
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;
  Status status() const { return LmdbStatus(rc_, "cursor"); }
  MDB_cursor* get() const { return cur_; }

 private:
  MDB_cursor* cur_ = nullptr;
  int rc_ = 0;
};

// A read-only LMDB transaction, aborted on scope exit.
class ReadTxn {
 public:
  explicit ReadTxn(MDB_env* env);
  ~ReadTxn() { if (txn_) mdb_txn_abort(txn_); }
  ReadTxn(const ReadTxn&) = delete;
  ReadTxn& operator=(const ReadTxn&) = delete;
  const Status& status() const { return status_; }
  MDB_txn* get() const { return txn_; }

 private:
  MDB_txn* txn_ = nullptr;
  Status status_;
};


// A queued write request with its bodies already encoded (compressed).
// A purge of tombstones (DocumentStore::PurgeTombstones), run by the
// merger like a write: it changes collection counts the merger owns.
struct PurgeJob {
  uint64_t through = 0;     // purge tombstones with etag <= this
  size_t limit = 0;         // at most this many per transaction
  uint64_t clock_time = 0;  // record (clock_time, last etag) in the etag clock; 0: no
  uint64_t clock_keep_from = 0;  // drop clock samples older than this, but the newest of them
  PurgeResult* result = nullptr;
};

struct PendingWrite {
  WriteRequest request;
  std::vector<uint8_t> body_flags;  // per op: the body's format flags (body_format.h)
  std::vector<std::string> heads;   // per op, if any may have one: its body's head (body_format.h)
  size_t bytes = 0;
  DocumentStore::WriteCallback done;
  std::optional<PurgeJob> purge;  // a purge instead of `request`
};

struct CollectionEntry {
  uint32_t number = 0;
  uint64_t count = 0;       // live documents
  uint64_t tombstones = 0;  // deleted documents still in the change feed
};

class DocumentStore::Impl {
 public:
  StoreOptions options;
  MDB_env* env = nullptr;
  MDB_dbi meta_db = 0, collections_db = 0, docs_db = 0, changes_db = 0, coll_changes_db = 0, dicts_db = 0;
  MDB_dbi bodies_db = 0;  // format 3: bodies by etag (format.h)
  MDB_dbi heads_db = 0;   // format 4: heads of structured bodies by etag
  // This process's map of data.mdb (found at open; none: not found), and
  // the bytes of bodies change batches have read through it (and commits
  // written) since its pages were last dropped from the resident set
  // (StoreOptions::drop_resident_every).
  // DropMappedPages drops the map's pages (the backup's copy and change
  // batches, as they read through it).
  std::optional<std::pair<void*, size_t>> data_map;
  std::atomic<uint64_t> mapped_reads{0};
  void NoteMappedRead(uint64_t bytes);
  void DropMappedPages() const;
  // The etag clock: (unix seconds, BE64) -> the last etag then (LE64),
  // a sample a minute, so that a tombstone's age can be told from its etag.
  MDB_dbi clock_db = 0;
  // The highest etag of a tombstone purged (meta "purged_max"): a change
  // feed read from below it may have missed deletes (410 changes_purged).
  std::atomic<uint64_t> purged_max{0};
  // The cluster log position (meta "log_applied", "log_resume"), and the
  // fence a failed log request raises (DocumentStore::ResetLogFence).
  mutable std::mutex log_mu;
  LogPosition log_position;  // guarded by log_mu
  std::atomic<bool> log_fenced{false};

  // Compression dictionaries (body_format.h): every one by id, and each
  // collection's current one. Written after a dictionary is committed.
  mutable std::shared_mutex dicts_mu;
  std::unordered_map<uint32_t, std::shared_ptr<const body::Dictionary>> dicts;
  std::unordered_map<uint32_t, std::shared_ptr<const body::Dictionary>> current_dict;  // by collection
  uint32_t next_dict = 1;  // guarded by dicts_mu
  // Documents sampled per collection until it has a dictionary.
  struct Sampler {
    std::vector<std::string> samples;
    size_t bytes = 0;
    bool busy = false;    // a thread is training from it
    bool failed = false;  // training gave nothing: no dictionary for this collection until restart
    bool active = false;  // sampling for a (re)training
    // The current dictionary's compression: the ratio of its first window
    // of bodies, and the window being filled (NoteCompression).
    double baseline = 0;
    uint64_t window_raw = 0, window_stored = 0;
  };
  std::mutex samplers_mu;
  std::map<uint32_t, Sampler> samplers;  // guarded by samplers_mu
  size_t sample_bytes = 0;               // guarded by samplers_mu: held by every sampler

  std::shared_ptr<const body::Dictionary> CurrentDictionary(uint32_t coll) const;
  body::DictionaryLookup Dictionaries() const;
  // Keeps a sample of `json` for `coll`'s dictionary (its first, or with
  // `retrain` a new one once NoteCompression saw drift); trains, stores and
  // publishes one when enough are kept (on the calling thread, once).
  // Returns whether the collection is still being sampled.
  bool Sample(uint32_t coll, std::string_view json, bool retrain = false);
  // Records how well `coll`'s dictionary compressed bodies (`raw` bytes
  // into `stored`); when a window of them does markedly worse than its
  // first one did, sampling starts for a new dictionary (the old one stays
  // for the bodies that use it). Returns true when it starts.
  bool NoteCompression(uint32_t coll, uint64_t raw, uint64_t stored);
  Status StoreDictionary(uint32_t coll, const std::string& bytes);
  Status LoadDictionaries(MDB_txn* txn);
  // The "bodies" entry at `etag`, not read (mdb_get does not touch an
  // overflow page); NotFound if there is none.
  Status FindBodyApart(MDB_txn* txn, uint64_t etag, std::string_view& entry) const;
  // Points `view` at that entry (format::ApplyBodyEntry); Corruption if it
  // is malformed.
  static Status ApplyBodyApart(std::string_view entry, format::DocView& view);
  // Points a live document's `view` at its body: for a DocValue flagged
  // kFlagBodyApart, the "bodies" entry at its etag (FindBodyApart), which
  // must be there (Corruption if not); otherwise the body it holds.
  Status ResolveBody(MDB_txn* txn, format::DocView& view) const;
  // A stored body (resolved) back to its text.
  Status Decode(const format::DocView& view, std::string& out) const {
    return body::DecodeWhole(view.flags, view.body, Dictionaries(), out);
  }

  // Collections by name. Written only by the merger thread after a commit.
  mutable std::shared_mutex collections_mu;
  std::map<std::string, CollectionEntry, std::less<>> collections;
  std::vector<std::string> names_by_number;  // index = collection number
  uint32_t next_collection = 1;  // merger thread only

  // The commit signal.
  std::atomic<uint64_t> last_etag{0};
  // Held by the merger from a commit until its etag is published, and by
  // BeginSnapshotCopy while the copy's read snapshot is taken: the copy's
  // etag is then exactly the snapshot's.
  mutable std::mutex commit_gate;
  ListenerSet<uint64_t> listeners;

  // The merger's queue.
  std::mutex queue_mu;
  std::condition_variable queue_cv;
  std::deque<PendingWrite> queue;  // guarded by queue_mu
  bool stopping = false;           // guarded by queue_mu
  std::thread merger;
  // Queues `p` for the merger; false (and `p` untouched) once stopping.
  bool Enqueue(PendingWrite& p);

  mutable std::mutex stats_mu;
  Stats stats;  // guarded by stats_mu

  ~Impl();
  Status OpenEnv(const std::string& dir);
  Status LoadState();

  // Merger (document_store_write.cc).
  void MergerLoop();
  void CommitBatch(std::vector<PendingWrite>& batch);
  void Publish(uint64_t etag);

  // Collection number for `name` as seen by readers, if it exists.
  std::optional<uint32_t> FindCollection(std::string_view name) const;
  std::string CollectionName(uint32_t number) const;
};

}  // namespace corvid::storage
