// Opening the index's LMDB environment and the write path: ApplyBatch maps
// each changed document, retracts what its previous version emitted (read
// from "docs"), adds its new entries, accumulates per-row deltas in memory,
// and writes each touched row once, all in one durable write transaction.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <cstring>
#include <filesystem>

#include "common/faults.h"
#include "common/resident_pages.h"
#include "common/sanitizers.h"
#include "mapreduce/format.h"
#include "mapreduce/index_impl.h"

namespace corvid::mapreduce {
namespace {

// Address space only; the file grows as needed. Each open index reserves
// it, so a process holds at most ~500 indexes in x86-64's 128 TiB. Under
// ThreadSanitizer the application's mmap range is a few TiB, which a
// test's two dozen open indexes would exhaust (mmap fails with ENOMEM):
// TSan builds reserve 16 GiB each. (Without clang's way of saying TSan,
// common/sanitizers.h, the CI's TSan server reserved 256 GiB an index
// and e2e_indexes met ENOMEM.)
constexpr size_t kMapSize = kThreadSanitizer ? size_t(16) << 30 : size_t(256) << 30;

struct TxnGuard {
  MDB_txn* txn = nullptr;
  ~TxnGuard() {
    if (txn) mdb_txn_abort(txn);
  }
};

Status PutU64(MDB_txn* txn, MDB_dbi dbi, std::string_view key, uint64_t v) {
  MDB_val k = ToVal(key), d{sizeof v, &v};
  int rc = mdb_put(txn, dbi, &k, &d, 0);
  return rc ? LmdbFailure(rc, "put meta") : Status::Ok();
}

// Reads a u64/u32 meta value; false when absent or of the wrong size.
bool GetMeta(MDB_txn* txn, MDB_dbi dbi, std::string_view key, uint64_t* v, size_t size) {
  MDB_val k = ToVal(key), d;
  if (mdb_get(txn, dbi, &k, &d) != 0 || d.mv_size != size) return false;
  *v = 0;
  std::memcpy(v, d.mv_data, size);
  return true;
}

}  // namespace

Status LmdbFailure(int rc, std::string_view what) {
  std::string s = "mapreduce index: ";
  s += what;
  return LmdbStatus(rc, s);
}

void EncodeDocRecord(const MappedDoc& mapped, size_t numeric, std::string* out) {
  out->clear();
  size_t n = mapped.entries();
  if (n == 0) return;
  format::PutVarint(*out, n);
  for (size_t e = 0; e < n; ++e) {
    std::string_view key = mapped.key(e);
    format::PutVarint(*out, key.size());
    out->append(key);
    for (size_t r = 0; r < numeric; ++r) {
      const NumInput& in = mapped.inputs[e * numeric + r];
      out->push_back(char(in.kind));
      if (in.kind == format::kNumInt) format::PutLE(*out, in.i);
      else if (in.kind == format::kNumDouble) format::PutLE(*out, in.d);
    }
  }
}

// The state's named databases, in the order OpenImpl binds them.
constexpr const char* kDbNames[] = {"meta", "rows", "docs", "minmax"};

// Whether the state's meta says it is in this format, for this definition
// (by fingerprint), and through which etag; false: fresh, foreign or stale.
static bool StateMatches(MDB_txn* txn, MDB_dbi meta, uint64_t fingerprint, uint64_t* etag) {
  uint64_t fmt = 0, fp = 0;
  return GetMeta(txn, meta, "format", &fmt, 4) && fmt == format::kFormatVersion &&
         GetMeta(txn, meta, "fingerprint", &fp, 8) && fp == fingerprint && GetMeta(txn, meta, "through_etag", etag, 8);
}

Result<std::unique_ptr<MapReduceIndex>> MapReduceIndex::Open(const std::string& dir,
                                                             std::shared_ptr<const Definition> definition) {
  auto impl = std::dynamic_pointer_cast<const DefinitionImpl>(definition);
  if (!impl) return Status::InvalidArgument("mapreduce index: definition was not made by Definition::Compile");
  return MapReduceIndexImpl::OpenImpl(dir, std::move(impl));
}

Status MapReduceIndex::Verify(const std::string& dir, const Definition& definition, const std::string& label,
                              VerifyReport& report) {
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/data.mdb", ec)) {
    report.sound.push_back(label + ": empty (nothing indexed yet)");
    return Status::Ok();
  }
  MDB_env* env = nullptr;
  int rc = mdb_env_create(&env);
  if (rc) return LmdbFailure(rc, "env_create");
  struct EnvGuard {
    MDB_env* env;
    MDB_txn* txn = nullptr;
    ~EnvGuard() {
      if (txn) mdb_txn_abort(txn);
      mdb_env_close(env);
    }
  } g{env};
  mdb_env_set_maxdbs(env, 8);
  mdb_env_set_mapsize(env, kMapSize);
  // Read-only and without the lock file: the server is stopped.
  rc = mdb_env_open(env, dir.c_str(), MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS | MDB_NORDAHEAD, 0644);
  Status st = LmdbFailure(rc, "open " + dir + "/data.mdb");
  if (st.ok()) st = CheckLmdbFile(env, dir);
  if (st.ok()) st = LmdbFailure(mdb_txn_begin(env, nullptr, MDB_RDONLY, &g.txn), "txn_begin");
  // Every page of every database, as LMDB walks them.
  uint64_t entries[std::size(kDbNames)] = {};
  MDB_dbi meta = 0;
  for (size_t i = 0; i < std::size(kDbNames) && st.ok(); ++i) {
    MDB_dbi dbi = 0;
    st = LmdbFailure(mdb_dbi_open(g.txn, kDbNames[i], 0, &dbi), std::string("open db ") + kDbNames[i]);
    if (i == 0) meta = dbi;
    MDB_cursor* cur = nullptr;
    if (st.ok()) st = LmdbFailure(mdb_cursor_open(g.txn, dbi, &cur), "cursor");
    MDB_val k, v;
    if (st.ok()) {
      for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) ++entries[i];
      if (rc != MDB_NOTFOUND) st = LmdbFailure(rc, std::string("walk db ") + kDbNames[i]);
    }
    if (cur) mdb_cursor_close(cur);
  }
  if (!st.ok()) {
    report.damaged.push_back(label + ": " + st.ToString());
    return Status::Ok();
  }
  uint64_t etag = 0;
  const auto* def = dynamic_cast<const DefinitionImpl*>(&definition);
  if (!def || !StateMatches(g.txn, meta, def->Fingerprint(), &etag)) {
    report.notes.push_back(label + ": written in another format or for another definition; the server rebuilds it");
    return Status::Ok();
  }
  report.sound.push_back(label + ": " + std::to_string(entries[1]) + " rows and " + std::to_string(entries[2]) +
                         " document entries, every page readable, through etag " + std::to_string(etag));
  return Status::Ok();
}

MapReduceIndexImpl::~MapReduceIndexImpl() {
  if (env_) mdb_env_close(env_);
}

Result<std::unique_ptr<MapReduceIndex>> MapReduceIndexImpl::OpenImpl(const std::string& dir,
                                                                     std::shared_ptr<const DefinitionImpl> def) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("mapreduce index: cannot create " + dir + ": " + ec.message());
  std::unique_ptr<MapReduceIndexImpl> idx(new MapReduceIndexImpl());
  idx->def_ = def;
  idx->red_offset_.clear();
  size_t off = 8;
  for (const Reducer& r : def->reducers()) {
    idx->red_offset_.push_back(off);
    switch (r.kind) {
      case ReducerKind::kCount: break;
      case ReducerKind::kSum: case ReducerKind::kAvg: off += kSumSlotBytes; break;
      case ReducerKind::kMin: case ReducerKind::kMax: off += 1 + format::kOrderedNumberBytes; idx->has_minmax_ = true; break;
    }
  }
  idx->row_bytes_ = off;

  for (int attempt = 0; attempt < 2; ++attempt) {
    int rc = mdb_env_create(&idx->env_);
    if (rc) return LmdbFailure(rc, "env_create");
    mdb_env_set_maxdbs(idx->env_, 8);
    mdb_env_set_mapsize(idx->env_, kMapSize);
    rc = mdb_env_open(idx->env_, dir.c_str(), MDB_NOTLS | MDB_NORDAHEAD, 0644);
    Status opened = LmdbFailure(rc, "open " + dir + "/data.mdb");
    if (opened.ok()) opened = CheckLmdbFile(idx->env_, dir);
    if (opened.ok()) break;
    mdb_env_close(idx->env_);
    idx->env_ = nullptr;
    if (opened.code() == StatusCode::kCorruption && attempt == 0) {
      // Not an LMDB file we can read: wipe it, the index rebuilds from etag 0.
      idx->damage_ = opened.message();
      std::filesystem::remove(dir + "/data.mdb", ec);
      std::filesystem::remove(dir + "/lock.mdb", ec);
      continue;
    }
    return opened;
  }

  TxnGuard g;
  int rc = mdb_txn_begin(idx->env_, nullptr, 0, &g.txn);
  if (rc) return LmdbFailure(rc, "txn_begin");
  MDB_dbi* dbis[] = {&idx->meta_, &idx->rows_, &idx->docs_, &idx->minmax_};  // kDbNames' order
  static_assert(std::size(dbis) == std::size(kDbNames));
  for (size_t i = 0; i < std::size(kDbNames); ++i) {
    rc = mdb_dbi_open(g.txn, kDbNames[i], MDB_CREATE, dbis[i]);
    if (rc) return LmdbFailure(rc, std::string("open db ") + kDbNames[i]);
  }
  uint64_t etag = 0;
  if (!StateMatches(g.txn, idx->meta_, def->Fingerprint(), &etag)) {
    // Fresh, foreign or stale state: start over from etag 0.
    for (MDB_dbi dbi : {idx->rows_, idx->docs_, idx->minmax_, idx->meta_}) {
      rc = mdb_drop(g.txn, dbi, 0);
      if (rc) return LmdbFailure(rc, "drop");
    }
    uint32_t v = format::kFormatVersion;
    MDB_val k = ToVal("format"), d{4, &v};
    rc = mdb_put(g.txn, idx->meta_, &k, &d, 0);
    if (rc) return LmdbFailure(rc, "put meta");
    Status st = PutU64(g.txn, idx->meta_, "fingerprint", def->Fingerprint());
    if (st.ok()) st = PutU64(g.txn, idx->meta_, "through_etag", 0);
    if (!st.ok()) return st;
    etag = 0;
  }
  rc = mdb_txn_commit(g.txn);
  g.txn = nullptr;
  if (rc) return LmdbFailure(rc, "commit");
  idx->last_etag_.store(etag);
  return std::unique_ptr<MapReduceIndex>(std::move(idx));
}

uint32_t MapReduceIndexImpl::DeltaIndex(std::string_view key) {
  auto it = delta_index_.find(key);
  if (it != delta_index_.end()) return it->second;
  uint32_t idx = uint32_t(deltas_.size());
  auto ins = delta_index_.emplace(std::string(key), idx).first;
  delta_keys_.push_back(ins->first);
  deltas_.emplace_back();
  sum_deltas_.resize(sum_deltas_.size() + def_->numeric_reducers());
  return idx;
}

Status MapReduceIndexImpl::BumpMinMax(MDB_txn* txn, size_t reducer, std::string_view key, const NumInput& in,
                                      int sign) {
  mm_key_.clear();
  mm_key_.push_back(char(reducer));
  mm_key_.append(key);
  if (in.kind == format::kNumInt) format::PutOrderedInt(mm_key_, in.i);
  else format::PutOrderedDouble(mm_key_, in.d);
  MDB_val k = ToVal(mm_key_);
  uint64_t one = 1;
  MDB_val d{8, &one};
  if (sign > 0) {
    int rc = mdb_put(txn, minmax_, &k, &d, MDB_NOOVERWRITE);
    if (rc == 0) return Status::Ok();
    if (rc != MDB_KEYEXIST) return LmdbFailure(rc, "put minmax");
    uint64_t n = format::GetLE<uint64_t>(static_cast<const char*>(d.mv_data)) + 1;
    MDB_val nd{8, &n};
    rc = mdb_put(txn, minmax_, &k, &nd, 0);
    return rc ? LmdbFailure(rc, "put minmax") : Status::Ok();
  }
  int rc = mdb_get(txn, minmax_, &k, &d);
  if (rc == MDB_NOTFOUND) return Status::Corruption("mapreduce index: min/max entry missing for a retracted value");
  if (rc) return LmdbFailure(rc, "get minmax");
  uint64_t n = format::GetLE<uint64_t>(static_cast<const char*>(d.mv_data));
  if (n <= 1) {
    rc = mdb_del(txn, minmax_, &k, nullptr);
  } else {
    --n;
    MDB_val nd{8, &n};
    rc = mdb_put(txn, minmax_, &k, &nd, 0);
  }
  return rc ? LmdbFailure(rc, "update minmax") : Status::Ok();
}

// Adds (sign +1) or retracts (-1) every entry of a DocRecord.
Status MapReduceIndexImpl::ApplyEntries(MDB_txn* txn, std::string_view record, int sign) {
  const char* p = record.data();
  const char* end = p + record.size();
  uint64_t n;
  if (!format::GetVarint(p, end, n)) return Status::Corruption("mapreduce index: bad document record");
  const auto& reducers = def_->reducers();
  size_t numeric = def_->numeric_reducers();
  NumInput inputs[64];
  std::vector<NumInput> big;
  NumInput* in = inputs;
  if (numeric > 64) {
    big.resize(numeric);
    in = big.data();
  }
  for (uint64_t e = 0; e < n; ++e) {
    uint64_t klen;
    if (!format::GetVarint(p, end, klen) || uint64_t(end - p) < klen)
      return Status::Corruption("mapreduce index: bad document record");
    std::string_view key(p, klen);
    p += klen;
    for (size_t r = 0; r < numeric; ++r) {
      if (p >= end) return Status::Corruption("mapreduce index: bad document record");
      in[r] = NumInput();
      in[r].kind = uint8_t(*p++);
      if (in[r].kind == format::kNumInt || in[r].kind == format::kNumDouble) {
        if (end - p < 8) return Status::Corruption("mapreduce index: bad document record");
        if (in[r].kind == format::kNumInt) in[r].i = format::GetLE<int64_t>(p);
        else in[r].d = format::GetLE<double>(p);
        p += 8;
      } else if (in[r].kind != format::kNumNone) {
        return Status::Corruption("mapreduce index: bad document record");
      }
    }
    uint32_t di = DeltaIndex(key);
    deltas_[di].count += sign;
    SumState* sums = sum_deltas_.data() + size_t(di) * numeric;  // no element when no reducer has an input
    for (size_t r = 0; r < reducers.size(); ++r) {
      const Reducer& red = reducers[r];
      if (red.input < 0) continue;
      const NumInput& x = in[red.input];
      if (x.kind == format::kNumNone) continue;
      if (red.kind == ReducerKind::kSum || red.kind == ReducerKind::kAvg) {
        SumState& s = sums[red.input];
        s.n += sign;
        if (x.kind == format::kNumInt) {
          s.isum += sign > 0 ? __int128(x.i) : -__int128(x.i);
        } else {
          AddCompensated(s.dsum, s.dcomp, sign > 0 ? x.d : -x.d);
          s.nd += sign;
        }
      } else {
        Status st = BumpMinMax(txn, r, key, x, sign);
        if (!st.ok()) return st;
        deltas_[di].minmax_dirty = true;
      }
    }
  }
  return Status::Ok();
}

Status MapReduceIndexImpl::RecomputeMinMax(MDB_txn* txn, size_t reducer, std::string_view key, char* slot) {
  mm_key_.clear();
  mm_key_.push_back(char(reducer));
  mm_key_.append(key);
  size_t prefix = mm_key_.size();
  bool is_max = def_->reducers()[reducer].kind == ReducerKind::kMax;
  if (is_max) mm_key_.append(format::kOrderedNumberBytes + 1, '\xff');
  MDB_cursor* cur;
  int rc = mdb_cursor_open(txn, minmax_, &cur);
  if (rc) return LmdbFailure(rc, "cursor_open");
  MDB_val k = ToVal(mm_key_), d;
  rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);
  if (is_max) {
    if (rc == 0) rc = mdb_cursor_get(cur, &k, &d, MDB_PREV);
    else if (rc == MDB_NOTFOUND) rc = mdb_cursor_get(cur, &k, &d, MDB_LAST);
  }
  slot[0] = 0;
  if (rc == 0) {
    std::string_view found = FromVal(k);
    if (found.size() == prefix + format::kOrderedNumberBytes &&
        std::memcmp(found.data(), mm_key_.data(), prefix) == 0) {
      slot[0] = 1;
      std::memcpy(slot + 1, found.data() + prefix, format::kOrderedNumberBytes);
    }
    rc = 0;
  } else if (rc == MDB_NOTFOUND) {
    rc = 0;
  }
  mdb_cursor_close(cur);
  return rc ? LmdbFailure(rc, "cursor_get") : Status::Ok();
}

Status MapReduceIndexImpl::FlushDeltas(MDB_txn* txn) {
  // Write rows in key order (better B-tree locality).
  std::vector<uint32_t> order(deltas_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return delta_keys_[a] < delta_keys_[b]; });
  const auto& reducers = def_->reducers();
  size_t numeric = def_->numeric_reducers();
  for (uint32_t di : order) {
    const RowDelta& delta = deltas_[di];
    std::string_view key = delta_keys_[di];
    const SumState* sums = sum_deltas_.data() + size_t(di) * numeric;
    bool sums_zero = true;
    for (size_t r = 0; r < numeric; ++r)
      if (sums[r].n != 0 || sums[r].isum != 0 || sums[r].dsum != 0 || sums[r].dcomp != 0 || sums[r].nd != 0)
        sums_zero = false;
    if (delta.count == 0 && sums_zero && !delta.minmax_dirty) continue;
    MDB_val k = ToVal(key), d;
    int rc = mdb_get(txn, rows_, &k, &d);
    if (rc == 0) {
      if (d.mv_size != row_bytes_) return Status::Corruption("mapreduce index: row of the wrong size");
      row_buf_.assign(static_cast<const char*>(d.mv_data), d.mv_size);
    } else if (rc == MDB_NOTFOUND) {
      row_buf_.assign(row_bytes_, '\0');
    } else {
      return LmdbFailure(rc, "get row");
    }
    char* row = row_buf_.data();
    int64_t count = int64_t(format::GetLE<uint64_t>(row)) + delta.count;
    if (count < 0) return Status::Corruption("mapreduce index: negative entry count");
    if (count == 0) {
      if (rc == 0) {
        rc = mdb_del(txn, rows_, &k, nullptr);
        if (rc) return LmdbFailure(rc, "del row");
      }
      continue;
    }
    uint64_t ucount = uint64_t(count);
    std::memcpy(row, &ucount, 8);
    for (size_t r = 0; r < reducers.size(); ++r) {
      const Reducer& red = reducers[r];
      char* slot = row + red_offset_[r];
      if (red.kind == ReducerKind::kSum || red.kind == ReducerKind::kAvg) {
        SumState s = LoadSum(slot);
        AddSums(s, sums[red.input]);
        if (s.nd == 0) s.dsum = s.dcomp = 0;  // exact again once no double is left
        StoreSum(slot, s);
      } else if ((red.kind == ReducerKind::kMin || red.kind == ReducerKind::kMax) && delta.minmax_dirty) {
        Status st = RecomputeMinMax(txn, r, key, slot);
        if (!st.ok()) return st;
      }
    }
    MDB_val nd{row_buf_.size(), row_buf_.data()};
    rc = mdb_put(txn, rows_, &k, &nd, 0);
    if (rc) return LmdbFailure(rc, "put row");
  }
  return Status::Ok();
}

// Maps one document. Mapping touches no state but the scratch, so a fault
// in it (common/faults.h) is that document's index error, as a bad value
// is: the batch goes on instead of failing again at every retry.
bool MapReduceIndexImpl::MapGuarded(const DocChange& ch) {
  try {
    return def_->MapDocument(ch.json, scratch_, &mapped_, &err_, &warn_);
  } catch (...) {
    err_ = "internal error mapping this document: " + CurrentExceptionText();
    RecordInternalError(FaultSite::kIndexWorker, err_);
    mapped_.Clear();
    return false;
  }
}

Status MapReduceIndexImpl::ApplyBatch(std::span<const DocChange> batch, uint64_t through_etag,
                                      std::vector<IndexError>& errors) {
  delta_index_.clear();
  delta_keys_.clear();
  deltas_.clear();
  sum_deltas_.clear();
  size_t errors_before = errors.size();
  TxnGuard g;
  int rc = mdb_txn_begin(env_, nullptr, 0, &g.txn);
  if (rc) return LmdbFailure(rc, "txn_begin");
  size_t numeric = def_->numeric_reducers();
  auto fail = [&](Status st) {
    errors.resize(errors_before);
    return st;
  };
  for (const DocChange& ch : batch) {
    format::DocKey(ch.id, &doc_key_);
    MDB_val k = ToVal(doc_key_), d;
    rc = mdb_get(g.txn, docs_, &k, &d);
    bool had = rc == 0;
    if (rc != 0 && rc != MDB_NOTFOUND) return fail(LmdbFailure(rc, "get doc"));
    if (had) old_rec_.assign(static_cast<const char*>(d.mv_data), d.mv_size);
    new_rec_.clear();
    if (!ch.deleted) {
      if (!MapGuarded(ch)) {
        errors.push_back(IndexError{ch.etag, std::string(ch.id), err_});
      } else {
        if (!warn_.empty()) errors.push_back(IndexError{ch.etag, std::string(ch.id), warn_});
        EncodeDocRecord(mapped_, numeric, &new_rec_);
      }
    }
    if (had && old_rec_ == new_rec_) continue;  // replay or an update that changes nothing here
    if (had) {
      Status st = ApplyEntries(g.txn, old_rec_, -1);
      if (!st.ok()) return fail(st);
    }
    if (!new_rec_.empty()) {
      Status st = ApplyEntries(g.txn, new_rec_, +1);
      if (!st.ok()) return fail(st);
      k = ToVal(doc_key_);
      MDB_val v = ToVal(new_rec_);
      rc = mdb_put(g.txn, docs_, &k, &v, 0);
      if (rc) return fail(LmdbFailure(rc, "put doc"));
    } else if (had) {
      k = ToVal(doc_key_);
      rc = mdb_del(g.txn, docs_, &k, nullptr);
      if (rc) return fail(LmdbFailure(rc, "del doc"));
    }
  }
  Status st = FlushDeltas(g.txn);
  if (st.ok()) st = PutU64(g.txn, meta_, "through_etag", through_etag);
  if (!st.ok()) return fail(st);
  if (before_commit_ && errors.size() > errors_before)
    before_commit_(std::span<const IndexError>(errors).subspan(errors_before));
  rc = mdb_txn_commit(g.txn);
  g.txn = nullptr;
  if (rc) return fail(LmdbFailure(rc, "commit"));
  last_etag_.store(through_etag, std::memory_order_release);
  return Status::Ok();
}

Status MapReduceIndexImpl::Clear() {
  TxnGuard g;
  int rc = mdb_txn_begin(env_, nullptr, 0, &g.txn);
  if (rc) return LmdbFailure(rc, "txn_begin");
  for (MDB_dbi dbi : {rows_, docs_, minmax_}) {
    rc = mdb_drop(g.txn, dbi, 0);
    if (rc) return LmdbFailure(rc, "drop");
  }
  Status st = PutU64(g.txn, meta_, "through_etag", 0);
  if (!st.ok()) return st;
  rc = mdb_txn_commit(g.txn);
  g.txn = nullptr;
  if (rc) return LmdbFailure(rc, "commit");
  last_etag_.store(0, std::memory_order_release);
  return Status::Ok();
}

uint64_t MapReduceIndexImpl::RowCount() const {
  MDB_txn* txn;
  if (mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn)) return 0;
  MDB_stat st;
  uint64_t n = mdb_stat(txn, rows_, &st) == 0 ? st.ms_entries : 0;
  mdb_txn_abort(txn);
  return n;
}

uint64_t MapReduceIndexImpl::DiskBytes() const {
  MDB_envinfo info;
  MDB_stat st;
  if (mdb_env_info(env_, &info) || mdb_env_stat(env_, &st)) return 0;
  return uint64_t(info.me_last_pgno + 1) * st.ms_psize;
}

Result<StateSnapshot> MapReduceIndexImpl::SnapshotFiles() const {
  const char* dir = nullptr;
  if (int rc = mdb_env_get_path(env_, &dir); rc) return LmdbFailure(rc, "env_get_path");
  // An unlinked file beside the environment: nothing to clean up after a
  // crash, and the copy's pages go to disk, not to memory.
  const int fd = ::open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError(std::string("create a temporary file in ") + dir + ": " + std::strerror(errno));
  auto file = std::shared_ptr<int>(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  if (int rc = mdb_env_copyfd2(env_, fd, MDB_CP_COMPACT); rc) return LmdbFailure(rc, "copy " + std::string(dir));
  // The copy walked the whole environment through the map: its pages leave
  // the resident set again (they stay cached; queries map them back).
  if (auto map = FindFileMapping(std::string(dir) + "/data.mdb")) DropResidentPages(map->first, map->second);
  StateSnapshot snap;
  snap.etag = LastAppliedEtag();  // read after the copy: at least the copy's
  snap.files.push_back(SnapshotFile{"data.mdb", [file](const ByteSink& sink) -> Status {
                                      std::string buf(size_t{1} << 20, '\0');
                                      for (off_t at = 0;;) {
                                        const ssize_t n = ::pread(*file, buf.data(), buf.size(), at);
                                        if (n < 0 && errno == EINTR) continue;
                                        if (n < 0) return Status::IOError(std::string("read the copy: ") + std::strerror(errno));
                                        if (n == 0) return Status::Ok();
                                        if (Status s = sink(std::string_view(buf.data(), size_t(n))); !s.ok()) return s;
                                        at += n;
                                      }
                                    }});
  return snap;
}

}  // namespace corvid::mapreduce
