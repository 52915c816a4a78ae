// The write path: the transaction merger (group commit).
//
// HTTP threads Submit() requests; bodies are compressed on the submitting
// thread, then queued. One merger thread takes everything queued (up to the
// batch limits), applies it in one LMDB write transaction, commits with one
// fsync, publishes the new last etag and only then answers each request.
// While a batch is syncing, the next one gathers in the queue.
//
// A request is atomic: its preconditions are checked before it writes, and
// if it fails after writing (rare: an id-hash collision, an LMDB error on one
// request) the batch transaction is aborted and re-applied without it, so one
// failing request never fails or half-applies the others.
#include <sys/statvfs.h>
#include <algorithm>
#include <exception>
#include <optional>
#include <system_error>
#include <thread>

#include "common/faults.h"
#include "common/log.h"
#include "storage/document_store.h"
#include "storage/format.h"
#include "storage/store_impl.h"

namespace corvid::storage {

namespace fmt = format;

namespace {

// Encodes a put's body in place (body_format.h) with its collection's
// dictionary, or samples it towards one; returns the flags. A structured
// body's head goes to `head` (if given).
uint8_t EncodeBody(DocumentStore::Impl& impl, const std::string& collection, std::string& body,
                   std::string* head) {
  // The collection's number and dictionary, looked up once per run of
  // writes to one collection on this thread (a bulk request's puts).
  thread_local const DocumentStore::Impl* cached_impl = nullptr;
  thread_local std::string cached_name;
  thread_local std::optional<uint32_t> coll;
  thread_local std::shared_ptr<const body::Dictionary> dict;
  thread_local uint64_t cached_at = 0;  // the store's commit count when cached: a dictionary may have come since
  const uint64_t now = impl.last_etag.load(std::memory_order_relaxed);
  if (cached_impl != &impl || cached_name != collection || cached_at != now || !coll || !dict) {
    cached_impl = &impl;
    cached_name = collection;
    cached_at = now;
    coll = impl.FindCollection(collection);
    dict = coll ? impl.CurrentDictionary(*coll) : nullptr;
  }
  if (coll && !dict) impl.Sample(*coll, body);
  thread_local std::string out;
  const uint8_t flags =
      body::Encode(body, dict.get(), impl.options.zstd_level, impl.options.compress_threshold, out, head);
  if (dict && (flags & (format::kFlagDict | format::kFlagStructured))) {
    // Compression is tallied per thread and handed over every 256 KiB (a
    // lock per document cost the bulk load).
    // Once a window drifted, this thread samples the collection's writes
    // for the new dictionary until the sample is taken.
    thread_local uint32_t tally_coll = 0;
    thread_local uint64_t tally_raw = 0, tally_stored = 0;
    thread_local std::optional<uint32_t> resampling;
    if (tally_coll != *coll || tally_raw >= (uint64_t{256} << 10)) {
      if (tally_raw > 0 && impl.NoteCompression(tally_coll, tally_raw, tally_stored)) resampling = tally_coll;
      tally_coll = *coll;
      tally_raw = tally_stored = 0;
    }
    tally_raw += body.size();
    tally_stored += out.size();
    if (resampling == *coll && !impl.Sample(*coll, body, /*retrain=*/true)) resampling.reset();
  }
  body.swap(out);
  if (out.capacity() > (size_t{4} << 20)) std::string().swap(out);  // don't pin huge buffers
  return flags;
}

// State of one attempt at applying a batch in a single transaction.
class BatchWriter {
 public:
  BatchWriter(DocumentStore::Impl& store, MDB_txn* txn, uint64_t etag)
      : store_(store), txn_(txn), etag_(etag), next_collection_(store.next_collection) {}

  // Applies one request. On a precondition/NotFound failure nothing was
  // written; `wrote` tells whether a failure left partial writes behind.
  Status Apply(PendingWrite& p, WriteResult& result, bool& wrote) {
    wrote = false;
    if (p.purge) return Purge(*p.purge, wrote);
    const WriteRequest& req = p.request;
    if (req.log) log_ = req.log;  // requests come in log order: the last one is the position
    for (size_t i = 0; i < req.ops.size(); ++i) {
      const WriteOp& op = req.ops[i];
      Status s = ApplyOp(op, p.body_flags[i], p.heads.empty() ? std::string_view() : p.heads[i], req.single,
                         result, wrote);
      if (!s.ok()) return s;
      if (i == 0) result.first_etag = etag_;
      result.last_etag = etag_;
    }
    return Status::Ok();
  }

  // Whether a purge changed anything (the batch then commits even without
  // a new etag).
  bool maintenance() const { return purged_max_.has_value() || log_.has_value(); }

  // Removes tombstones with etag <= job.through, from where the last purge
  // stopped (meta "purge_scan"), at most job.limit of them.
  Status Purge(PurgeJob& job, bool& wrote) {
    auto read_meta = [&](std::string_view name, uint64_t& out) -> Status {
      MDB_val k = ToVal(name), v;
      int rc = mdb_get(txn_, store_.meta_db, &k, &v);
      if (rc == MDB_NOTFOUND) return Status::Ok();
      if (rc != 0 || v.mv_size != 8) return rc != 0 ? LmdbStatus(rc, "read meta") : Status::Corruption("meta " + std::string(name));
      out = fmt::GetLE(static_cast<const char*>(v.mv_data), 8);
      return Status::Ok();
    };
    auto write_meta = [&](std::string_view name, uint64_t value) -> Status {
      std::string e;
      fmt::PutLE(e, value, 8);
      MDB_val k = ToVal(name), v = ToVal(e);
      int rc = mdb_put(txn_, store_.meta_db, &k, &v, 0);
      return rc == 0 ? Status::Ok() : LmdbStatus(rc, "write meta");
    };
    uint64_t scan = 0, purged_max = 0;
    if (Status s = read_meta("purge_scan", scan); !s.ok()) return s;
    if (Status s = read_meta("purged_max", purged_max); !s.ok()) return s;
    const uint64_t through = std::min(job.through, etag_);
    Cursor cursor(txn_, store_.changes_db);
    if (Status s = cursor.status(); !s.ok()) return s;
    MDB_cursor* cur = cursor.get();
    int rc = 0;
    std::string key = fmt::ChangeKey(scan + 1);
    MDB_val k = ToVal(key), v;
    uint64_t reached = std::max(scan, through);  // the whole range, unless the limit stops the scan first
    size_t n = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
      const uint64_t etag = fmt::GetBE64(static_cast<const char*>(k.mv_data));
      if (etag > through) break;
      if (n == job.limit) {
        reached = etag - 1;
        break;
      }
      if (v.mv_size < 5) return Status::Corruption("change entry");
      const char* cv = static_cast<const char*>(v.mv_data);
      if (!(uint8_t(cv[4]) & fmt::kFlagDeleted)) continue;
      const uint32_t number = uint32_t(fmt::GetLE(cv, 4));
      const std::string id(cv + 5, v.mv_size - 5);
      std::string name;
      {
        std::shared_lock lock(store_.collections_mu);
        if (number < store_.names_by_number.size()) name = store_.names_by_number[number];
      }
      CollectionEntry* coll = name.empty() ? nullptr : Collection(name, false);
      if (coll == nullptr) return Status::Corruption("a change names an unknown collection");
      std::string dk = fmt::DocKey(number, id), cck = fmt::CollChangeKey(number, etag);
      MDB_val k1 = ToVal(dk), k2 = ToVal(cck);
      rc = mdb_del(txn_, store_.docs_db, &k1, nullptr);
      if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "purge a tombstone");
      rc = mdb_del(txn_, store_.coll_changes_db, &k2, nullptr);
      if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "purge a change");
      rc = mdb_cursor_del(cur, 0);
      if (rc != 0) return LmdbStatus(rc, "purge a change");
      if (coll->tombstones > 0) --coll->tombstones;
      purged_max = std::max(purged_max, etag);
      ++n;
    }
    if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "scan the change feed");
    wrote = true;
    if (Status s = write_meta("purge_scan", reached); !s.ok()) return s;
    if (Status s = write_meta("purged_max", purged_max); !s.ok()) return s;
    if (job.clock_time != 0) {
      std::string ck, ce;
      fmt::PutBE64(ck, job.clock_time);
      fmt::PutLE(ce, etag_, 8);
      MDB_val k3 = ToVal(ck), v3 = ToVal(ce);
      rc = mdb_put(txn_, store_.clock_db, &k3, &v3, 0);
      if (rc != 0) return LmdbStatus(rc, "write the etag clock");
    }
    if (job.clock_keep_from != 0) {
      if (Status s = TrimClock(job.clock_keep_from); !s.ok()) return s;
    }
    purged_max_ = purged_max;
    job.result->purged = n;
    job.result->scanned_to = reached;
    job.result->purged_max = purged_max;
    return Status::Ok();
  }

  // Drops the etag clock's samples older than `keep_from`, but the newest
  // of them.
  Status TrimClock(uint64_t keep_from) {
    Cursor cursor(txn_, store_.clock_db);
    if (Status s = cursor.status(); !s.ok()) return s;
    MDB_cursor* cur = cursor.get();
    std::string key;
    fmt::PutBE64(key, keep_from);
    MDB_val k = ToVal(key), v;
    int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    rc = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_PREV) : mdb_cursor_get(cur, &k, &v, MDB_LAST);
    if (rc == MDB_NOTFOUND) return Status::Ok();
    if (rc != 0) return LmdbStatus(rc, "read the etag clock");
    const std::string kept(static_cast<const char*>(k.mv_data), k.mv_size);  // the newest sample before keep_from
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
      if (std::string_view(static_cast<const char*>(k.mv_data), k.mv_size) >= kept) break;
      rc = mdb_cursor_del(cur, 0);
      if (rc != 0) return LmdbStatus(rc, "trim the etag clock");
    }
    if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "trim the etag clock");
    return Status::Ok();
  }

  // Writes collection counts and meta; call once after all requests.
  Status Finish() {
    for (auto& [name, entry] : touched_) {
      std::string key, v;
      fmt::PutBE32(key, entry.number);
      fmt::PutLE(v, entry.count, 8);
      fmt::PutLE(v, entry.tombstones, 8);
      v.append(name);
      MDB_val k = ToVal(key), val = ToVal(v);
      if (int rc = mdb_put(txn_, store_.collections_db, &k, &val, 0); rc != 0)
        return LmdbStatus(rc, "write collection");
    }
    std::string e, c;
    fmt::PutLE(e, etag_, 8);
    fmt::PutLE(c, next_collection_, 4);
    MDB_val ek = ToVal("last_etag"), ev = ToVal(e), ck = ToVal("next_coll"), cv = ToVal(c);
    if (int rc = mdb_put(txn_, store_.meta_db, &ek, &ev, 0); rc != 0) return LmdbStatus(rc, "write meta");
    if (int rc = mdb_put(txn_, store_.meta_db, &ck, &cv, 0); rc != 0) return LmdbStatus(rc, "write meta");
    if (log_) {
      const std::pair<const char*, uint64_t> fields[] = {{"log_applied", log_->applied},
                                                          {"log_resume", log_->resume},
                                                          {"log_hash", log_->applied_hash},
                                                          {"log_history", log_->history}};
      for (const auto& [name, value] : fields) {
        std::string v;
        fmt::PutLE(v, value, 8);
        MDB_val k = ToVal(name), val = ToVal(v);
        if (int rc = mdb_put(txn_, store_.meta_db, &k, &val, 0); rc != 0) return LmdbStatus(rc, "write meta");
      }
    }
    return Status::Ok();
  }

  // After a successful commit: make the new collection state visible.
  void Publish() {
    std::unique_lock lock(store_.collections_mu);
    for (auto& [name, entry] : touched_) {
      store_.collections[name] = entry;
      if (store_.names_by_number.size() <= entry.number) store_.names_by_number.resize(entry.number + 1);
      store_.names_by_number[entry.number] = name;
    }
    store_.next_collection = next_collection_;
    if (purged_max_) store_.purged_max.store(*purged_max_, std::memory_order_release);
    if (log_) {
      std::lock_guard log_lock(store_.log_mu);
      store_.log_position = *log_;
    }
  }

  uint64_t etag() const { return etag_; }

 private:
  // The collection's entry as this batch sees it; created if `create`.
  CollectionEntry* Collection(const std::string& name, bool create) {
    if (auto it = touched_.find(name); it != touched_.end()) return &it->second;
    std::optional<CollectionEntry> existing;
    {
      std::shared_lock lock(store_.collections_mu);
      if (auto it = store_.collections.find(name); it != store_.collections.end()) existing = it->second;
    }
    if (!existing) {
      if (!create) return nullptr;
      existing = CollectionEntry{next_collection_++, 0};
    }
    return &touched_.emplace(name, *existing).first->second;
  }

  Status ApplyOp(const WriteOp& op, uint8_t body_flags, std::string_view head, bool single, WriteResult& result,
                 bool& wrote) {
    const bool is_put = op.kind == WriteKind::kPut;
    // A collection is created only by a write that will happen: a failed
    // precondition or a single delete in an unknown collection creates none.
    const bool must_exist = op.if_match || op.if_match_any;
    CollectionEntry* coll = Collection(op.collection, !single || (is_put && !must_exist));
    if (!coll) {
      if (must_exist) return Status::PreconditionFailed("document does not exist");
      return Status::NotFound("document not found");
    }
    std::string key = fmt::DocKey(coll->number, op.id);
    MDB_val k = ToVal(key), v;
    int rc = mdb_get(txn_, store_.docs_db, &k, &v);
    if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "read document");
    const bool found = rc == 0;
    fmt::DocView old;
    if (found && !fmt::DecodeDoc(FromVal(v), old)) return Status::Corruption("document value");
    if (found && (old.flags & fmt::kFlagLongId) && old.long_id != op.id)
      return Status::Busy("document id collides with another long id (hash collision); use a shorter id");
    const bool live = found && !(old.flags & fmt::kFlagDeleted);

    if (single) {
      if (op.if_match && (!live || old.etag != *op.if_match))
        return Status::PreconditionFailed(live ? "etag does not match" : "document does not exist");
      if (op.if_match_any && !live) return Status::PreconditionFailed("document does not exist");
      if (op.if_none_match_any && live) return Status::PreconditionFailed("document already exists");
      if (!is_put && !live) return Status::NotFound("document not found");
    }

    wrote = true;
    const uint64_t etag = ++etag_;
    if (found) {
      std::string ck = fmt::ChangeKey(old.etag), cck = fmt::CollChangeKey(coll->number, old.etag);
      MDB_val k1 = ToVal(ck), k2 = ToVal(cck);
      rc = mdb_del(txn_, store_.changes_db, &k1, nullptr);
      if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "delete old change");
      rc = mdb_del(txn_, store_.coll_changes_db, &k2, nullptr);
      if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "delete old change");
      if (old.flags & fmt::kFlagBodyApart) {
        std::string bk = fmt::BodyKey(old.etag);
        MDB_val k3 = ToVal(bk);
        rc = mdb_del(txn_, store_.bodies_db, &k3, nullptr);
        if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "delete old body");
        if (HasHeads()) {  // a lookup only in a store that has kept a head
          rc = mdb_del(txn_, store_.heads_db, &k3, nullptr);
          if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "delete old head");
        }
      }
    }

    // The DocValue (etag, flags, a long id); a body goes to "bodies" under
    // the new etag, appended: etags only grow.
    const uint8_t flags = is_put ? fmt::kFlagBodyApart : fmt::kFlagDeleted;
    std::string header = fmt::EncodeDocHeader(etag, flags, op.id);
    MDB_val dv = ToVal(header);
    rc = mdb_put(txn_, store_.docs_db, &k, &dv, 0);
    if (rc != 0) return LmdbStatus(rc, "write document");
    if (is_put) {
      std::string bk = fmt::BodyKey(etag);
      MDB_val k3 = ToVal(bk), bv{1 + op.body.size(), nullptr};
      rc = mdb_put(txn_, store_.bodies_db, &k3, &bv, MDB_RESERVE | MDB_APPEND);
      if (rc != 0) return LmdbStatus(rc, "write body");
      static_cast<char*>(bv.mv_data)[0] = char(body_flags);
      if (!op.body.empty()) std::memcpy(static_cast<char*>(bv.mv_data) + 1, op.body.data(), op.body.size());
      if (!head.empty()) {
        MDB_val hv = ToVal(head);
        rc = mdb_put(txn_, store_.heads_db, &k3, &hv, MDB_APPEND);
        if (rc != 0) return LmdbStatus(rc, "write head");
        has_heads_ = true;
      }
    }

    const uint8_t change_flags = is_put ? 0 : fmt::kFlagDeleted;
    std::string cv;
    cv.reserve(5 + op.id.size());
    fmt::PutLE(cv, coll->number, 4);
    cv.push_back(char(change_flags));
    cv.append(op.id);
    std::string ck = fmt::ChangeKey(etag);
    MDB_val k1 = ToVal(ck), v1 = ToVal(cv);
    rc = mdb_put(txn_, store_.changes_db, &k1, &v1, MDB_APPEND);
    if (rc != 0) return LmdbStatus(rc, "write change");
    std::string cck = fmt::CollChangeKey(coll->number, etag);
    MDB_val k2 = ToVal(cck), v2 = ToVal(std::string_view(cv).substr(4));
    rc = mdb_put(txn_, store_.coll_changes_db, &k2, &v2, 0);
    if (rc != 0) return LmdbStatus(rc, "write change");

    const bool was_tombstone = found && !live;
    if (is_put && !live) {
      ++coll->count;
      result.created = true;
      if (was_tombstone) --coll->tombstones;
    } else if (!is_put && live) {
      --coll->count;
      ++coll->tombstones;
    } else if (!is_put && !found) {
      ++coll->tombstones;  // a bulk delete of an id never seen
    }
    return Status::Ok();
  }

  // Whether the store holds any head (asked once per transaction).
  bool HasHeads() {
    if (!has_heads_) {
      MDB_stat st;
      has_heads_ = mdb_stat(txn_, store_.heads_db, &st) != 0 || st.ms_entries > 0;
    }
    return *has_heads_;
  }

  DocumentStore::Impl& store_;
  MDB_txn* txn_;
  uint64_t etag_;
  uint32_t next_collection_;
  std::map<std::string, CollectionEntry> touched_;
  std::optional<uint64_t> purged_max_;  // set by a purge: the batch commits without a new etag
  std::optional<LogPosition> log_;      // the last log position among the batch's requests
  std::optional<bool> has_heads_;
};

}  // namespace

// A collection's dictionary is trained from its first kTrainSamples
// documents (their first kSampleBytes each, kTrainBytes at most in all)
// into at most kDictionaryBytes, by the thread whose write completes the
// sample; that write waits for it (~0.1 s, once per collection).
constexpr size_t kTrainSamples = 1000;
constexpr size_t kSampleBytes = size_t{4} << 10;
constexpr size_t kTrainBytes = size_t{4} << 20;
constexpr size_t kDictionaryBytes = size_t{64} << 10;
// Samples of every collection together stay under this.
constexpr size_t kAllSamplesBytes = size_t{32} << 20;

// A window of kDriftWindowBytes of bodies compressed by a dictionary whose ratio
// (stored / raw) exceeds kDriftFactor times its first window's starts a
// retraining.
constexpr uint64_t kDriftWindowBytes = uint64_t{8} << 20;
constexpr double kDriftFactor = 1.3;

bool DocumentStore::Impl::NoteCompression(uint32_t coll, uint64_t raw, uint64_t stored) {
  std::lock_guard lock(samplers_mu);
  Sampler& s = samplers[coll];
  if (s.active) return false;  // already resampling
  s.window_raw += raw;
  s.window_stored += stored;
  if (s.window_raw < kDriftWindowBytes) return false;
  const double ratio = double(s.window_stored) / double(s.window_raw);
  s.window_raw = s.window_stored = 0;
  if (s.baseline == 0) {
    s.baseline = ratio;
    return false;
  }
  if (ratio <= s.baseline * kDriftFactor) return false;
  s.active = true;  // drifted: sample the documents written from now on
  s.failed = false;
  return true;
}

bool DocumentStore::Impl::Sample(uint32_t coll, std::string_view json, bool retrain) {
  std::vector<std::string> samples;
  {
    std::lock_guard lock(samplers_mu);
    Sampler& s = samplers[coll];
    if (s.busy || s.failed || (retrain && !s.active)) return false;
    const std::string_view piece = json.substr(0, kSampleBytes);
    if (sample_bytes + piece.size() > kAllSamplesBytes) return true;  // many collections sampling at once
    s.samples.emplace_back(piece);
    s.bytes += piece.size();
    sample_bytes += piece.size();
    if (s.samples.size() < kTrainSamples && s.bytes < kTrainBytes) return true;
    s.busy = true;
    samples.swap(s.samples);
    sample_bytes -= s.bytes;
    s.bytes = 0;
  }
  const std::string dict = body::TrainDictionary(samples, kDictionaryBytes);
  const Status st = dict.empty() ? Status::InvalidArgument("nothing to train from") : StoreDictionary(coll, dict);
  std::lock_guard lock(samplers_mu);
  if (st.ok()) {
    samplers.erase(coll);  // a fresh window and baseline for the new dictionary
  } else {
    Sampler& s = samplers[coll];
    s = Sampler{};
    s.failed = true;  // bodies stay compressed without one
  }
  return false;
}

Status DocumentStore::Impl::StoreDictionary(uint32_t coll, const std::string& bytes) {
  uint32_t id;
  {
    std::unique_lock lock(dicts_mu);
    id = next_dict++;
  }
  auto dict = body::Dictionary::Load(id, bytes, options.zstd_level);
  if (!dict) return Status::Internal("zstd: the trained dictionary does not load");
  // Its own write transaction (LMDB queues it behind the merger's): the
  // dictionary is durable before any body names it.
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env, nullptr, 0, &txn);
  if (rc != 0) return LmdbStatus(rc, "begin");
  std::string key, value;
  fmt::PutBE32(key, id);
  fmt::PutBE32(value, coll);
  value += bytes;
  MDB_val k = ToVal(key), v = ToVal(value);
  rc = mdb_put(txn, dicts_db, &k, &v, 0);
  if (rc != 0) {
    mdb_txn_abort(txn);
    return LmdbStatus(rc, "write dictionary");
  }
  rc = mdb_txn_commit(txn);
  if (rc != 0) return LmdbStatus(rc, "commit dictionary");
  std::unique_lock lock(dicts_mu);
  dicts[id] = dict;
  current_dict[coll] = std::move(dict);
  return Status::Ok();
}

// Whether the filesystem holding `env` has less room left than a batch
// may need (LMDB turns a write cut short by a full disk into EIO).
bool DiskNearlyFull(MDB_env* env) {
  const char* dir = nullptr;
  struct statvfs st;
  if (mdb_env_get_path(env, &dir) != 0 || ::statvfs(dir, &st) != 0) return false;
  return uint64_t(st.f_bavail) * st.f_frsize < (uint64_t{64} << 20);
}

// Requests of at least this many puts and bytes are encoded on two threads.
constexpr size_t kParallelEncodeOps = 256;
constexpr size_t kParallelEncodeBytes = size_t{1} << 20;

void DocumentStore::Submit(WriteRequest request, WriteCallback done) {
  for (const WriteOp& op : request.ops) {
    Status s = ValidateName(op.collection, "collection name");
    if (s.ok()) s = ValidateName(op.id, "document id");
    if (!s.ok()) {
      done(WriteResult{std::move(s)});
      return;
    }
  }
  if (request.ops.empty() && !request.log) {  // with a log position it records only that
    done(WriteResult{Status::InvalidArgument("empty write request")});
    return;
  }
  PendingWrite p;
  p.body_flags.assign(request.ops.size(), 0);
  // Heads come only with structured bodies.
  if (std::any_of(request.ops.begin(), request.ops.end(),
                  [](const WriteOp& op) { return op.body.size() >= body::kStructuredMinBytes; }))
    p.heads.resize(request.ops.size());
  // Compression is most of a bulk request's cost here: a large one is
  // encoded by the calling thread and a helper, half each (a bulk load
  // arrives on one connection, and the merger thread mostly waits on fsync).
  auto encode = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      WriteOp& op = request.ops[i];
      if (op.kind == WriteKind::kPut)
        p.body_flags[i] = EncodeBody(*impl_, op.collection, op.body, p.heads.empty() ? nullptr : &p.heads[i]);
    }
  };
  size_t request_bytes = 0;
  for (const WriteOp& op : request.ops) request_bytes += op.body.size();
  const size_t n = request.ops.size();
  if (n >= kParallelEncodeOps && request_bytes >= kParallelEncodeBytes && std::thread::hardware_concurrency() > 1) {
    std::exception_ptr failure;
    std::thread helper;
    try {
      helper = std::thread([&] {
        try {
          encode(n / 2, n);
        } catch (...) {
          failure = std::current_exception();
        }
      });
    } catch (const std::system_error&) {  // no thread to be had: encode it all here
    }
    encode(0, helper.joinable() ? n / 2 : n);
    if (helper.joinable()) helper.join();
    if (failure) std::rethrow_exception(failure);
  } else {
    encode(0, n);
  }
  for (const WriteOp& op : request.ops) p.bytes += op.body.size() + op.id.size() + 64;
  p.request = std::move(request);
  p.done = std::move(done);
  if (!impl_->Enqueue(p)) p.done(WriteResult{Status::ShuttingDown("the store is closing")});
}

bool DocumentStore::Impl::Enqueue(PendingWrite& p) {
  {
    std::lock_guard lock(queue_mu);
    if (stopping) return false;
    queue.push_back(std::move(p));
  }
  queue_cv.notify_one();
  return true;
}

void DocumentStore::Impl::MergerLoop() {
  std::vector<PendingWrite> batch;
  for (;;) {
    batch.clear();
    {
      std::unique_lock lock(queue_mu);
      queue_cv.wait(lock, [&] { return !queue.empty() || stopping; });
      if (queue.empty()) return;  // stopping, and everything queued is done
      size_t ops = 0, bytes = 0;
      while (!queue.empty() &&
             (batch.empty() || (ops + queue.front().request.ops.size() <= options.max_batch_ops &&
                                bytes + queue.front().bytes <= options.max_batch_bytes))) {
        ops += queue.front().request.ops.size();
        bytes += queue.front().bytes;
        batch.push_back(std::move(queue.front()));
        queue.pop_front();
      }
    }
    // A fault (std::bad_alloc, say) fails this batch's requests, never the
    // process: CommitBatch answers each of them either way.
    CommitBatch(batch);
  }
}

void DocumentStore::Impl::CommitBatch(std::vector<PendingWrite>& batch) {
  std::vector<WriteResult> results(batch.size());
  std::vector<bool> excluded(batch.size(), false);  // failed after writing
  Status batch_status;
  std::optional<uint64_t> committed_etag;  // set once a transaction commits

  // Each pass applies every request not yet excluded; a request that fails
  // after writing is excluded and the pass restarts (at most batch.size()).
  MDB_txn* txn = nullptr;  // open, not yet committed or aborted
  bool has_log = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].request.log) continue;
    has_log = true;
    if (log_fenced.load(std::memory_order_acquire)) {
      excluded[i] = true;
      results[i] = WriteResult{Status::Unavailable("an earlier log entry failed to apply on this node")};
    }
  }
  try {
  for (bool retry = true; retry;) {
    retry = false;
    txn = nullptr;
    int rc = mdb_txn_begin(env, nullptr, 0, &txn);
    if (rc != 0) {
      batch_status = LmdbStatus(rc, "begin write transaction");
      break;
    }
    BatchWriter writer(*this, txn, last_etag.load(std::memory_order_relaxed));
    for (size_t i = 0; i < batch.size() && !retry; ++i) {
      if (excluded[i]) continue;
      results[i] = WriteResult{};
      bool wrote = false;
      Status s = writer.Apply(batch[i], results[i], wrote);
      if (s.ok()) continue;
      if (batch[i].request.log && IsLocalFailure(s.code())) {
        // No later log entry may apply without this one.
        log_fenced.store(true, std::memory_order_release);
        for (size_t j = i + 1; j < batch.size(); ++j) {
          if (!batch[j].request.log || excluded[j]) continue;
          excluded[j] = true;
          results[j] = WriteResult{Status::Unavailable("an earlier log entry failed to apply on this node")};
        }
      }
      results[i] = WriteResult{std::move(s)};
      if (wrote) {
        excluded[i] = true;
        retry = true;
      }
    }
    if (retry) {
      mdb_txn_abort(std::exchange(txn, nullptr));
      continue;
    }
    if (writer.etag() == last_etag.load(std::memory_order_relaxed) && !writer.maintenance()) {
      mdb_txn_abort(std::exchange(txn, nullptr));  // every request failed its precondition: nothing to sync
      break;
    }
    batch_status = writer.Finish();
    if (!batch_status.ok()) {
      mdb_txn_abort(std::exchange(txn, nullptr));
      break;
    }
    const auto commit_start = std::chrono::steady_clock::now();
    {
      std::lock_guard gate(commit_gate);
      rc = mdb_txn_commit(std::exchange(txn, nullptr));  // durable: LMDB fsyncs before returning
      if (rc == 0) {
        committed_etag = writer.etag();
        writer.Publish();
        last_etag.store(writer.etag(), std::memory_order_release);  // Publish below wakes the waiters
      }
    }
    const auto commit_ms = uint64_t(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - commit_start).count());
    if (options.slow_commit_ms > 0 && commit_ms >= options.slow_commit_ms)
      logging::Warn("store.slow_commit", "a commit (its fsync) took longer than --slow-ms",
                    {{"ms", commit_ms}, {"requests", uint64_t(batch.size())}, {"etag", writer.etag()}});
    if (rc != 0) {
      batch_status = LmdbStatus(rc, "commit");
      // LMDB reports a short write as EIO: on a full disk that is ENOSPC.
      if (rc == EIO && DiskNearlyFull(env)) batch_status = Status::NoSpace("commit: " + batch_status.message());
      break;
    }
  }
  } catch (...) {
    // Nothing of an aborted transaction is kept; a committed one stays
    // (and its etag is published below), but its requests are answered
    // with the error, as when an fsync's outcome is unknown.
    if (txn) mdb_txn_abort(txn);
    const std::string what = CurrentExceptionText();
    RecordInternalError(FaultSite::kStoreMerger, what);
    batch_status = Status::Internal("internal error in the write path: " + what);
  }

  // A committed transaction's etags are published even after a fault, so
  // that the next batch never gives them again.
  if (committed_etag) Publish(*committed_etag);
  // The writer reads the trees' last pages through the map (a large folio
  // each, bench/RESULTS.md): counted with the batches' reads towards the
  // next drop of the map's pages, so that a bulk load does not leave the
  // store mapped.
  if (committed_etag) {
    uint64_t written = 0;
    for (const PendingWrite& p : batch) written += p.bytes;
    NoteMappedRead(written);
  }
  if (!batch_status.ok()) {
    for (auto& r : results) r = WriteResult{batch_status};
    if (has_log) log_fenced.store(true, std::memory_order_release);
  }
  {
    std::lock_guard lock(stats_mu);
    if (batch_status.ok()) ++stats.commits;
    stats.requests += batch.size();
    for (size_t i = 0; i < batch.size(); ++i)
      if (results[i].status.ok()) stats.ops += batch[i].request.ops.size();
    stats.max_batch_requests = std::max<uint64_t>(stats.max_batch_requests, batch.size());
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    try {
      batch[i].done(std::move(results[i]));
    } catch (...) {  // the caller's callback: its fault, not the next request's
      RecordInternalError(FaultSite::kStoreMerger, CurrentExceptionText());
    }
  }
}

}  // namespace corvid::storage
