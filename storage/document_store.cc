// DocumentStore: opening the LMDB environment, reads (documents, change
// feed, collections) and the commit signal. The write path is in
// document_store_write.cc.
#include "storage/document_store.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <filesystem>
#include <future>

#include "common/resident_pages.h"
#include "common/utf8.h"
#include "storage/format.h"
#include "storage/store_impl.h"

namespace corvid::storage {

namespace fmt = format;

ReadTxn::ReadTxn(MDB_env* env) {
  int rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn_);
  if (rc != 0) {
    txn_ = nullptr;
    status_ = LmdbStatus(rc, "begin read transaction");
  }
}

namespace {

struct DctxDeleter {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};

}  // namespace

Status ValidateName(std::string_view name, std::string_view what) {
  if (name.empty() || name.size() > 512)
    return Status::InvalidArgument(std::string(what) + " must be 1 to 512 bytes");
  if (name.find('\0') != std::string_view::npos)
    return Status::InvalidArgument(std::string(what) + " must not contain NUL");
  if (!IsValidUtf8(name)) return Status::InvalidArgument(std::string(what) + " is not valid UTF-8");
  return Status::Ok();
}

DocumentStore::DocumentStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DocumentStore::~DocumentStore() = default;

DocumentStore::Impl::~Impl() {
  {
    std::lock_guard lock(queue_mu);
    stopping = true;
  }
  queue_cv.notify_all();
  if (merger.joinable()) merger.join();
  if (env) mdb_env_close(env);
}

Status DocumentStore::Impl::OpenEnv(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("create " + dir + ": " + ec.message());
  int rc = mdb_env_create(&env);
  if (rc != 0) return LmdbStatus(rc, "mdb_env_create");
  mdb_env_set_maxdbs(env, 16);
  mdb_env_set_maxreaders(env, 1024);
  rc = mdb_env_set_mapsize(env, options.map_size);
  if (rc != 0) return LmdbStatus(rc, "mdb_env_set_mapsize");
  // MDB_NOTLS: read transactions are not tied to threads (HTTP handlers hop
  // threads). MDB_NORDAHEAD: random document reads gain nothing from it.
  rc = mdb_env_open(env, dir.c_str(), MDB_NOTLS | MDB_NORDAHEAD, 0644);
  if (rc != 0) return LmdbStatus(rc, "open " + dir + "/data.mdb");
  if (Status s = CheckLmdbFile(env, dir); !s.ok()) return s;
  data_map = FindFileMapping(dir + "/data.mdb");

  MDB_txn* txn = nullptr;
  rc = mdb_txn_begin(env, nullptr, 0, &txn);
  if (rc != 0) return LmdbStatus(rc, "begin");
  struct Named { const char* name; MDB_dbi* dbi; } dbs[] = {
      {"meta", &meta_db}, {"collections", &collections_db}, {"docs", &docs_db},
      {"changes", &changes_db}, {"coll_changes", &coll_changes_db}, {"dicts", &dicts_db},
      {"clock", &clock_db}, {"bodies", &bodies_db}, {"heads", &heads_db}};
  for (auto& d : dbs) {
    rc = mdb_dbi_open(txn, d.name, MDB_CREATE, d.dbi);
    if (rc != 0) {
      mdb_txn_abort(txn);
      return LmdbStatus(rc, std::string("open database ") + d.name);
    }
  }
  // Stamp or check the format version.
  MDB_val key = ToVal("format"), val;
  rc = mdb_get(txn, meta_db, &key, &val);
  if (rc == MDB_NOTFOUND) {
    std::string v;
    fmt::PutLE(v, fmt::kFormatVersion, 4);
    MDB_val nv = ToVal(v);
    rc = mdb_put(txn, meta_db, &key, &nv, 0);
  } else if (rc == 0) {
    const uint64_t version = val.mv_size == 4 ? fmt::GetLE(static_cast<const char*>(val.mv_data), 4) : 0;
    if (version < 1 || version > fmt::kFormatVersion) {
      mdb_txn_abort(txn);
      return Status::Corruption("unknown store format version in " + dir);
    }
    if (version < fmt::kFormatVersion) {  // opens unchanged; stamped so that an older build refuses the new bodies
      std::string v;
      fmt::PutLE(v, fmt::kFormatVersion, 4);
      MDB_val nv = ToVal(v);
      rc = mdb_put(txn, meta_db, &key, &nv, 0);
    }
  }
  if (rc != 0) {
    mdb_txn_abort(txn);
    return LmdbStatus(rc, "format stamp");
  }
  rc = mdb_txn_commit(txn);
  return LmdbStatus(rc, "commit open transaction");
}

Status DocumentStore::Impl::LoadState() {
  ReadTxn txn(env);
  if (!txn.status().ok()) return txn.status();
  auto read_u64 = [&](std::string_view name, int bytes, uint64_t& out) -> Status {
    MDB_val key = ToVal(name), val;
    int rc = mdb_get(txn.get(), meta_db, &key, &val);
    if (rc == MDB_NOTFOUND) return Status::Ok();
    if (rc != 0) return LmdbStatus(rc, "read meta");
    if (val.mv_size != size_t(bytes)) return Status::Corruption("meta value " + std::string(name));
    out = fmt::GetLE(static_cast<const char*>(val.mv_data), bytes);
    return Status::Ok();
  };
  uint64_t last = 0, next = 1;
  if (Status s = read_u64("last_etag", 8, last); !s.ok()) return s;
  if (Status s = read_u64("next_coll", 4, next); !s.ok()) return s;
  uint64_t purged = 0;
  if (Status s = read_u64("purged_max", 8, purged); !s.ok()) return s;
  purged_max.store(purged);
  if (Status s = read_u64("log_applied", 8, log_position.applied); !s.ok()) return s;
  if (Status s = read_u64("log_resume", 8, log_position.resume); !s.ok()) return s;
  if (Status s = read_u64("log_hash", 8, log_position.applied_hash); !s.ok()) return s;
  if (Status s = read_u64("log_history", 8, log_position.history); !s.ok()) return s;
  last_etag.store(last);
  next_collection = uint32_t(next);

  MDB_cursor* cur = nullptr;
  int rc = mdb_cursor_open(txn.get(), collections_db, &cur);
  if (rc != 0) return LmdbStatus(rc, "cursor");
  MDB_val k, v;
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    if (k.mv_size != 4 || v.mv_size < 16) {
      mdb_cursor_close(cur);
      return Status::Corruption("collections entry");
    }
    CollectionEntry e;
    e.number = fmt::GetBE32(static_cast<const char*>(k.mv_data));
    e.count = fmt::GetLE(static_cast<const char*>(v.mv_data), 8);
    e.tombstones = fmt::GetLE(static_cast<const char*>(v.mv_data) + 8, 8);
    std::string name(FromVal(v).substr(16));
    if (names_by_number.size() <= e.number) names_by_number.resize(e.number + 1);
    names_by_number[e.number] = name;
    collections.emplace(std::move(name), e);
  }
  mdb_cursor_close(cur);
  if (rc != MDB_NOTFOUND) return LmdbStatus(rc, "scan collections");
  return LoadDictionaries(txn.get());
}

Status DocumentStore::Impl::LoadDictionaries(MDB_txn* txn) {
  MDB_cursor* cur = nullptr;
  int rc = mdb_cursor_open(txn, dicts_db, &cur);
  if (rc != 0) return LmdbStatus(rc, "cursor");
  MDB_val k, v;
  std::unique_lock lock(dicts_mu);
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    if (k.mv_size != 4 || v.mv_size < 5) {
      mdb_cursor_close(cur);
      return Status::Corruption("dictionary entry");
    }
    const uint32_t id = fmt::GetBE32(static_cast<const char*>(k.mv_data));
    const uint32_t coll = fmt::GetBE32(static_cast<const char*>(v.mv_data));
    auto dict = body::Dictionary::Load(id, FromVal(v).substr(4), options.zstd_level);
    if (!dict) {
      mdb_cursor_close(cur);
      return Status::Corruption("dictionary " + std::to_string(id) + " does not load");
    }
    dicts[id] = dict;
    current_dict[coll] = dict;  // ids ascend: the last one wins
    next_dict = std::max(next_dict, id + 1);
  }
  mdb_cursor_close(cur);
  if (rc != MDB_NOTFOUND) return LmdbStatus(rc, "scan dictionaries");
  return Status::Ok();
}

std::shared_ptr<const body::Dictionary> DocumentStore::Impl::CurrentDictionary(uint32_t coll) const {
  std::shared_lock lock(dicts_mu);
  auto it = current_dict.find(coll);
  return it == current_dict.end() ? nullptr : it->second;
}

body::DictionaryLookup DocumentStore::Impl::Dictionaries() const {
  return [this](uint32_t id) -> std::shared_ptr<const body::Dictionary> {
    std::shared_lock lock(dicts_mu);
    auto it = dicts.find(id);
    return it == dicts.end() ? nullptr : it->second;
  };
}

Result<std::unique_ptr<DocumentStore>> DocumentStore::Open(const std::string& dir, StoreOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (Status s = impl->OpenEnv(dir); !s.ok()) return s;
  if (Status s = impl->LoadState(); !s.ok()) return s;
  Impl* raw = impl.get();
  impl->merger = std::thread([raw] { raw->MergerLoop(); });
  return std::unique_ptr<DocumentStore>(new DocumentStore(std::move(impl)));
}

std::optional<uint32_t> DocumentStore::Impl::FindCollection(std::string_view name) const {
  std::shared_lock lock(collections_mu);
  auto it = collections.find(name);
  if (it == collections.end()) return std::nullopt;
  return it->second.number;
}

std::string DocumentStore::Impl::CollectionName(uint32_t number) const {
  std::shared_lock lock(collections_mu);
  return number < names_by_number.size() ? names_by_number[number] : std::string();
}

void DocumentStore::Impl::DropMappedPages() const {
  if (data_map) DropResidentPages(data_map->first, data_map->second);
}

void DocumentStore::Impl::NoteMappedRead(uint64_t bytes) {
  if (options.drop_resident_every == 0) return;
  if (mapped_reads.fetch_add(bytes, std::memory_order_relaxed) + bytes < options.drop_resident_every) return;
  mapped_reads.store(0, std::memory_order_relaxed);
  // Other readers of the map (a GET, another batch) map what they touch
  // again, from the page cache.
  DropMappedPages();
}

Status DocumentStore::Impl::FindBodyApart(MDB_txn* txn, uint64_t etag, std::string_view& entry) const {
  const std::string key = fmt::BodyKey(etag);
  MDB_val k = ToVal(key), v;
  const int rc = mdb_get(txn, bodies_db, &k, &v);
  // Short (no allocation): a change batch over a format 1 or 2 store meets this once per document.
  if (rc == MDB_NOTFOUND) return Status::NotFound("no body");
  if (rc != 0) return LmdbStatus(rc, "read a body");
  entry = FromVal(v);
  return Status::Ok();
}

Status DocumentStore::Impl::ApplyBodyApart(std::string_view entry, fmt::DocView& view) {
  if (!fmt::ApplyBodyEntry(entry, view)) return Status::Corruption("the body at etag " + std::to_string(view.etag));
  return Status::Ok();
}

Status DocumentStore::Impl::ResolveBody(MDB_txn* txn, fmt::DocView& view) const {
  if (!(view.flags & fmt::kFlagBodyApart)) return Status::Ok();
  std::string_view entry;
  Status s = FindBodyApart(txn, view.etag, entry);
  if (s.code() == StatusCode::kNotFound)
    return Status::Corruption("the body of the document at etag " + std::to_string(view.etag) + " is missing");
  return s.ok() ? ApplyBodyApart(entry, view) : s;
}

Result<Document> DocumentStore::Get(std::string_view collection, std::string_view id) const {
  auto coll = impl_->FindCollection(collection);
  if (!coll) return Status::NotFound("document not found");
  ReadTxn txn(impl_->env);
  if (!txn.status().ok()) return txn.status();
  std::string key = fmt::DocKey(*coll, id);
  MDB_val k = ToVal(key), v;
  int rc = mdb_get(txn.get(), impl_->docs_db, &k, &v);
  if (rc == MDB_NOTFOUND) return Status::NotFound("document not found");
  if (rc != 0) return LmdbStatus(rc, "read document");
  fmt::DocView view;
  if (!fmt::DecodeDoc(FromVal(v), view)) return Status::Corruption("document value");
  if (view.flags & fmt::kFlagDeleted) return Status::NotFound("document not found");
  if ((view.flags & fmt::kFlagLongId) && view.long_id != id) return Status::NotFound("document not found");
  if (Status s = impl_->ResolveBody(txn.get(), view); !s.ok()) return s;
  Document doc;
  doc.etag = view.etag;
  if (Status s = impl_->Decode(view, doc.body); !s.ok()) return s;
  return doc;
}

Result<DocumentStore::DocumentPage> DocumentStore::ListDocuments(std::string_view collection, std::string_view after,
                                                                size_t limit) const {
  auto coll = impl_->FindCollection(collection);
  if (!coll) return Status::NotFound("no collection '" + std::string(collection) + "'");
  DocumentPage page;
  ReadTxn txn(impl_->env);
  if (!txn.status().ok()) return txn.status();
  MDB_cursor* cur = nullptr;
  int rc = mdb_cursor_open(txn.get(), impl_->docs_db, &cur);
  if (rc != 0) return LmdbStatus(rc, "cursor");
  struct CloseCursor {
    MDB_cursor* c;
    ~CloseCursor() { mdb_cursor_close(c); }
  } close{cur};
  // Keys are collection | id, except that an id over kMaxDirectIdBytes is
  // keyed by its first kLongIdPrefix bytes and a hash: every id after
  // `after` has a key at or after the one its truncation gives, and the
  // long ids sharing one prefix are sorted here by their full id.
  std::string start;
  fmt::PutBE32(start, *coll);
  start.append(after.substr(0, std::min(after.size(), fmt::kLongIdPrefix)));
  const size_t want = limit + 1;  // one more tells whether another page follows
  std::vector<DocumentPage::Entry> group;  // long ids of one shared key prefix
  std::string group_prefix;
  Status status;
  auto emit = [&](DocumentPage::Entry&& e) {
    if (std::string_view(e.id) > after && page.docs.size() < want) page.docs.push_back(std::move(e));
  };
  auto flush_group = [&] {
    std::sort(group.begin(), group.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    for (auto& e : group) emit(std::move(e));
    group.clear();
  };
  MDB_val k = ToVal(start), v;
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0 && page.docs.size() < want;
       rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    std::string_view key = FromVal(k);
    if (key.size() < 4 || fmt::GetBE32(key.data()) != *coll) break;
    fmt::DocView view;
    if (!fmt::DecodeDoc(FromVal(v), view)) return Status::Corruption("document value");
    const bool long_id = view.flags & fmt::kFlagLongId;
    const std::string_view prefix = key.substr(0, std::min(key.size(), 4 + fmt::kLongIdPrefix));
    if (!group.empty() && (!long_id || prefix != group_prefix)) flush_group();
    if (view.flags & fmt::kFlagDeleted) continue;
    DocumentPage::Entry e;
    e.id = long_id ? std::string(view.long_id) : std::string(key.substr(4));
    e.etag = view.etag;
    if (std::string_view(e.id) <= after) continue;  // before decompressing
    if (Status s = impl_->ResolveBody(txn.get(), view); !s.ok()) return s;
    if (Status s = impl_->Decode(view, e.body); !s.ok()) return s;
    if (long_id) {
      group_prefix.assign(prefix);
      group.push_back(std::move(e));
    } else {
      emit(std::move(e));
    }
  }
  if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "list documents");
  if (!group.empty()) flush_group();
  if (page.docs.size() > limit) {
    page.docs.resize(limit);
    page.more = true;
  }
  return page;
}

Result<std::vector<Change>> DocumentStore::ChangesSince(uint64_t since, size_t limit,
                                                        std::optional<std::string_view> collection) const {
  std::vector<Change> out;
  if (limit == 0) return out;
  std::optional<uint32_t> coll;
  if (collection) {
    coll = impl_->FindCollection(*collection);
    if (!coll) return out;
  }
  ReadTxn txn(impl_->env);
  if (!txn.status().ok()) return txn.status();
  MDB_cursor* cur = nullptr;
  int rc = mdb_cursor_open(txn.get(), coll ? impl_->coll_changes_db : impl_->changes_db, &cur);
  if (rc != 0) return LmdbStatus(rc, "cursor");
  std::string start = coll ? fmt::CollChangeKey(*coll, since + 1) : fmt::ChangeKey(since + 1);
  if (since == UINT64_MAX) {
    mdb_cursor_close(cur);
    return out;
  }
  MDB_val k = ToVal(start), v;
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0 && out.size() < limit;
       rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    std::string_view key = FromVal(k), val = FromVal(v);
    Change c;
    if (coll) {
      if (key.size() != 12 || fmt::GetBE32(key.data()) != *coll) break;
      if (val.empty()) { rc = MDB_CORRUPTED; break; }
      c.etag = fmt::GetBE64(key.data() + 4);
      c.collection = std::string(*collection);
      c.deleted = val[0] & fmt::kFlagDeleted;
      c.id.assign(val.substr(1));
    } else {
      if (key.size() != 8 || val.size() < 5) { rc = MDB_CORRUPTED; break; }
      c.etag = fmt::GetBE64(key.data());
      c.collection = impl_->CollectionName(uint32_t(fmt::GetLE(val.data(), 4)));
      c.deleted = val[4] & fmt::kFlagDeleted;
      c.id.assign(val.substr(5));
    }
    out.push_back(std::move(c));
  }
  mdb_cursor_close(cur);
  if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "read change feed");
  return out;
}

namespace {

class ChangeBatchImpl : public ChangeBatch {
 public:
  std::span<const DocChange> changes() const override { return items; }
  bool complete() const override { return complete_; }
  uint64_t snapshot_etag() const override { return snapshot; }

  std::unique_ptr<ReadTxn> txn;
  std::vector<DocChange> items;
  std::vector<std::string> buffers;  // decompressed bodies (reserved: never reallocates)
  bool complete_ = true;
  uint64_t snapshot = 0;
};

}  // namespace

Result<std::unique_ptr<ChangeBatch>> DocumentStore::ReadChangeBatch(std::string_view collection, uint64_t since,
                                                                    size_t max_docs, size_t max_bytes,
                                                                    std::span<const std::string> fields) const {
  const body::DictionaryLookup dicts = impl_->Dictionaries();
  auto batch = std::make_unique<ChangeBatchImpl>();
  batch->txn = std::make_unique<ReadTxn>(impl_->env);
  if (!batch->txn->status().ok()) return batch->txn->status();
  MDB_txn* txn = batch->txn->get();
  {
    MDB_val k = ToVal("last_etag"), v;
    int rc = mdb_get(txn, impl_->meta_db, &k, &v);
    if (rc == 0 && v.mv_size == 8) batch->snapshot = fmt::GetLE(static_cast<const char*>(v.mv_data), 8);
    else if (rc != MDB_NOTFOUND) return LmdbStatus(rc, "read last etag");
  }
  auto coll = impl_->FindCollection(collection);
  if (!coll || since == UINT64_MAX || max_docs == 0) return std::unique_ptr<ChangeBatch>(std::move(batch));
  batch->buffers.reserve(max_docs);

  // The changes first (etag order), then their bodies: a format-3 body
  // by its etag ("bodies" is in etag order, so a build reads it front to
  // back); an older one from its DocValue, in key order, so that a store
  // much larger than memory is read in ascending page order rather than at
  // random, and each page once however many of the batch's bodies it holds.
  MDB_cursor* cur = nullptr;
  int rc = mdb_cursor_open(txn, impl_->coll_changes_db, &cur);
  if (rc != 0) return LmdbStatus(rc, "cursor");
  std::string start = fmt::CollChangeKey(*coll, since + 1);
  MDB_val k = ToVal(start), v;
  Status status;
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    std::string_view key = FromVal(k), val = FromVal(v);
    if (key.size() != 12 || fmt::GetBE32(key.data()) != *coll) break;
    if (batch->items.size() >= max_docs) {
      batch->complete_ = false;
      break;
    }
    if (val.empty()) {
      status = Status::Corruption("change entry");
      break;
    }
    DocChange change;
    change.etag = fmt::GetBE64(key.data() + 4);
    change.deleted = val[0] & fmt::kFlagDeleted;
    change.id = val.substr(1);
    batch->items.push_back(change);
  }
  mdb_cursor_close(cur);
  if (!status.ok()) return status;
  if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "read change feed");
  // Locate every body: a format-3 one by its etag (its value's place in
  // the map; mdb_get does not read an overflow page), an older one by the
  // document's key. A projection its head answers (format 4) reads no body.
  struct Located {
    std::string key;  // a body kept in its DocValue: the document's key
    size_t item;
    fmt::DocView view;
    std::string_view apart;  // else (kept apart): its "bodies" value, not yet read
    std::string_view head;   // or its head's projection (in batch->buffers): no body read
  };
  // The heads, walked beside the batch (both in etag order): a lookup for a
  // document only once the walk has passed the previous head.
  Cursor heads(txn, impl_->heads_db);
  if (!heads.status().ok()) return heads.status();
  uint64_t head_etag = fields.empty() ? UINT64_MAX : 0;  // the walk's place (UINT64_MAX: done)
  MDB_val hk, hv;
  auto head_at = [&](uint64_t etag) -> Result<std::string_view> {
    if (head_etag < etag && head_etag != 0) {
      const int hrc = mdb_cursor_get(heads.get(), &hk, &hv, MDB_NEXT);
      if (hrc != 0 && hrc != MDB_NOTFOUND) return LmdbStatus(hrc, "read heads");
      head_etag = hrc == 0 && hk.mv_size == 8 ? fmt::GetBE64(static_cast<const char*>(hk.mv_data)) : UINT64_MAX;
    }
    if (head_etag < etag) {
      const std::string key = fmt::BodyKey(etag);
      hk = ToVal(key);
      const int hrc = mdb_cursor_get(heads.get(), &hk, &hv, MDB_SET_RANGE);
      if (hrc != 0 && hrc != MDB_NOTFOUND) return LmdbStatus(hrc, "read heads");
      head_etag = hrc == 0 && hk.mv_size == 8 ? fmt::GetBE64(static_cast<const char*>(hk.mv_data)) : UINT64_MAX;
    }
    return head_etag == etag ? FromVal(hv) : std::string_view();
  };
  std::vector<Located> docs, in_docs;
  for (size_t i = 0; i < batch->items.size(); ++i) {
    const DocChange& change = batch->items[i];
    if (change.deleted) continue;
    Located d{{}, i, {}, {}, {}};
    d.view.etag = change.etag;
    auto head = head_at(change.etag);
    if (!head.ok()) return head.status();
    if (!head->empty()) {
      batch->buffers.emplace_back();
      auto answered = body::HeadFields(*head, fields, batch->buffers.back());
      if (!answered.ok())
        return Status::Corruption("the head of the body at etag " + std::to_string(change.etag) + ": " +
                                  answered.status().ToString());
      if (*answered) {
        d.head = batch->buffers.back();
        docs.push_back(std::move(d));
        continue;
      }
      batch->buffers.pop_back();
    }
    Status s = impl_->FindBodyApart(txn, change.etag, d.apart);
    if (s.code() == StatusCode::kNotFound) {  // kept in its DocValue (format 1 or 2)
      in_docs.push_back(Located{fmt::DocKey(*coll, change.id), i, {}, {}, {}});
      continue;
    }
    if (!s.ok()) return s;
    docs.push_back(std::move(d));
  }
  std::sort(in_docs.begin(), in_docs.end(), [](const Located& a, const Located& b) { return a.key < b.key; });
  for (Located& d : in_docs) {
    MDB_val dkv = ToVal(d.key), dv;
    const int grc = mdb_get(txn, impl_->docs_db, &dkv, &dv);
    if (grc != 0 || !fmt::DecodeDoc(FromVal(dv), d.view) || d.view.etag != batch->items[d.item].etag ||
        (d.view.flags & (fmt::kFlagBodyApart | fmt::kFlagDeleted)))
      return grc != 0 && grc != MDB_NOTFOUND ? LmdbStatus(grc, "read document")
                                             : Status::Corruption("change feed entry without its document");
    docs.push_back(std::move(d));
  }
  // Points a body kept apart at its entry (reading its first byte).
  auto apply = [](Located& d) {
    return d.key.empty() && d.head.empty() ? Impl::ApplyBodyApart(d.apart, d.view) : Status::Ok();
  };
  // Reads a body (its fields, or all of it); `size` (if given) gets its
  // DecodedSize, the batch's measure, from the same read of its header.
  auto read = [&](const Located& d, uint64_t* size) -> Status {
    DocChange& change = batch->items[d.item];
    if (!d.head.empty()) {  // its head's projection
      change.json = d.head;
      if (size != nullptr) *size = d.head.size();
      return Status::Ok();
    }
    if (d.view.flags == 0) {
      change.json = d.view.body;  // raw: read in place
      if (size != nullptr) *size = d.view.body.size();
      return Status::Ok();
    }
    batch->buffers.emplace_back();
    if (Status st = body::DecodeFields(d.view.flags, d.view.body, dicts, fields, batch->buffers.back(), size);
        !st.ok())
      return st;
    change.json = batch->buffers.back();
    return Status::Ok();
  };
  // The batch is the longest prefix (etag order) within max_bytes (at
  // least one change), as if read one by one. When every body is kept
  // apart (format 3), `docs` is in etag order and the batch is read so,
  // each body before the next is touched, so that the map's pages can be
  // dropped as it goes (NoteMappedRead) without a page mapped twice.
  size_t keep = 0;
  uint64_t bytes = 0;
  if (in_docs.empty()) {
    for (size_t next = 0; keep < batch->items.size(); ++keep) {
      if (keep > 0 && bytes >= max_bytes) break;
      if (next == docs.size() || docs[next].item != keep) continue;  // a deletion
      Located& d = docs[next++];
      uint64_t size = 0;
      if (Status st = apply(d); !st.ok()) return st;
      if (Status st = read(d, &size); !st.ok()) return st;
      bytes += size;
      impl_->NoteMappedRead(d.view.body.size());
    }
  } else {
    // Sized first, then read in the order located (key order for the
    // DocValues), the cut known.
    std::vector<uint64_t> sizes(batch->items.size(), 0);
    for (Located& d : docs) {
      if (!d.head.empty()) {
        sizes[d.item] = d.head.size();
        continue;
      }
      if (Status st = apply(d); !st.ok()) return st;
      auto size = body::DecodedSize(d.view.flags, d.view.body, fields);
      if (!size.ok()) return size.status();
      sizes[d.item] = *size;
      impl_->NoteMappedRead(d.view.body.size());
    }
    for (; keep < batch->items.size(); ++keep) {
      if (keep > 0 && bytes >= max_bytes) break;
      bytes += sizes[keep];
    }
    for (const Located& d : docs) {
      if (d.item >= keep) continue;
      if (Status st = read(d, nullptr); !st.ok()) return st;
      impl_->NoteMappedRead(d.view.body.size());
    }
  }
  if (keep < batch->items.size()) {
    batch->items.resize(keep);
    batch->complete_ = false;
  }
  return std::unique_ptr<ChangeBatch>(std::move(batch));
}

Result<PurgeResult> DocumentStore::PurgeTombstones(uint64_t through, uint64_t clock_time, size_t batch,
                                                   uint64_t clock_keep_from) {
  PurgeResult total;
  for (bool first = true;; first = false) {
    PurgeResult one;
    PendingWrite p;
    p.purge = PurgeJob{through, std::max<size_t>(batch, 1), first ? clock_time : 0, first ? clock_keep_from : 0, &one};
    std::promise<WriteResult> promise;
    p.done = [&promise](WriteResult r) { promise.set_value(std::move(r)); };
    if (!impl_->Enqueue(p)) return Status::ShuttingDown("the store is closing");
    WriteResult r = promise.get_future().get();
    if (!r.status.ok()) return r.status;
    total.purged += one.purged;
    total.scanned_to = one.scanned_to;
    total.purged_max = one.purged_max;
    if (one.purged < batch || one.scanned_to >= through) return total;
  }
}

Result<uint64_t> DocumentStore::EtagAtTime(uint64_t t) const {
  ReadTxn txn(impl_->env);
  if (!txn.status().ok()) return txn.status();
  Cursor cursor(txn.get(), impl_->clock_db);
  if (Status s = cursor.status(); !s.ok()) return s;
  MDB_cursor* cur = cursor.get();
  std::string key;
  fmt::PutBE64(key, t + 1);
  MDB_val k = ToVal(key), v;
  // The last sample at or before t: the one before the first after it.
  int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  rc = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_PREV) : mdb_cursor_get(cur, &k, &v, MDB_LAST);
  uint64_t etag = 0;
  if (rc == 0 && v.mv_size == 8) etag = fmt::GetLE(static_cast<const char*>(v.mv_data), 8);
  if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "read the etag clock");
  return etag;
}

uint64_t DocumentStore::PurgedMax() const { return impl_->purged_max.load(std::memory_order_acquire); }

LogPosition DocumentStore::GetLogPosition() const {
  std::lock_guard lock(impl_->log_mu);
  return impl_->log_position;
}

void DocumentStore::ResetLogFence() { impl_->log_fenced.store(false, std::memory_order_release); }

namespace {

// A compacted copy of the environment written by LMDB into a pipe on a
// thread of its own, read from the other end.
class PipedCopy final : public DocumentStore::SnapshotCopy {
 public:
  ~PipedCopy() override {
    if (rfd_ >= 0) ::close(rfd_);  // a copy still writing fails with EPIPE and ends
    if (thread_.joinable()) thread_.join();
  }
  uint64_t etag() const override { return etag_; }
  uint64_t log_applied() const override { return log_applied_; }

  Result<size_t> Read(char* buf, size_t cap) override {
    if (pending_ < first_.size()) {
      const size_t n = std::min(cap, first_.size() - pending_);
      std::memcpy(buf, first_.data() + pending_, n);
      pending_ += n;
      return n;
    }
    // While the copy walks without writing (LMDB counts the free pages
    // first), its pages still pile up: drop them every 20 ms of waiting too.
    for (;;) {
      pollfd p{rfd_, POLLIN, 0};
      if (::poll(&p, 1, 20) != 0) break;
      UnmapWalkedPages();
    }
    ssize_t n;
    do n = ::read(rfd_, buf, cap);
    while (n < 0 && errno == EINTR);
    if (n < 0) return Status::IOError(std::string("reading the store copy: ") + std::strerror(errno));
    copied_ += uint64_t(n);
    if (n == 0 || copied_ - unmapped_at_ >= kUnmapEvery) {
      unmapped_at_ = copied_;
      UnmapWalkedPages();
    }
    if (n == 0) {
      if (thread_.joinable()) thread_.join();
      if (rc_ != 0) return LmdbStatus(rc_, "copy the store");
    }
    return size_t(n);
  }

  // LMDB's copy reads the store through the process's memory map, so every
  // page it walks would stay in the server's resident set (VmRSS rising by
  // the store's size, though it is page cache). Dropping the map's pages
  // every few MiB keeps the resident set flat: they stay in the page cache,
  // and the next reader of one maps it again with a minor fault.
  void UnmapWalkedPages() {
    if (store_ != nullptr) store_->DropMappedPages();
  }

  // Starts the copy; returns once its read snapshot is taken (its first
  // bytes have arrived), with the writers held off (commit_gate) until
  // then so that the snapshot holds exactly `etag`.
  Status Start(DocumentStore::Impl& store) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return Status::IOError(std::string("pipe: ") + std::strerror(errno));
    rfd_ = fds[0];
    const int wfd = fds[1];
    (void)::fcntl(wfd, F_SETPIPE_SZ, 1 << 20);
    std::lock_guard gate(store.commit_gate);
    etag_ = store.last_etag.load(std::memory_order_acquire);
    {
      std::lock_guard log_lock(store.log_mu);
      log_applied_ = store.log_position.applied;
    }
    MDB_env* env = store.env;
    store_ = &store;
    thread_ = std::thread([this, env, wfd] {
      // A reader that goes away makes the copy's writes fail with EPIPE,
      // not end the process (LMDB's own writer thread inherits the mask).
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &set, nullptr);
      rc_ = mdb_env_copyfd2(env, wfd, MDB_CP_COMPACT);
      ::close(wfd);
    });
    first_.resize(64 * 1024);
    ssize_t n;
    do n = ::read(rfd_, first_.data(), first_.size());
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
      thread_.join();
      return rc_ != 0 ? LmdbStatus(rc_, "copy the store") : Status::IOError("the store copy ended at once");
    }
    first_.resize(size_t(n));
    return Status::Ok();
  }

 private:
  int rfd_ = -1;
  std::thread thread_;
  int rc_ = 0;  // the copy's outcome, read after the join
  uint64_t etag_ = 0;
  uint64_t log_applied_ = 0;
  std::string first_;
  size_t pending_ = 0;
  // The copy walks the B-tree in key order, not file order: the resident
  // set grows faster than the copy's output. Measured on a 2 GB store:
  // dropping every 64 MiB left VmRSS +1.3 GiB at its peak, every 2 MiB +0.2.
  static constexpr uint64_t kUnmapEvery = uint64_t{2} << 20;
  const DocumentStore::Impl* store_ = nullptr;  // the store copied (outlives the copy, as its env does)
  uint64_t copied_ = 0, unmapped_at_ = 0;
};

}  // namespace

Result<std::unique_ptr<DocumentStore::SnapshotCopy>> DocumentStore::BeginSnapshotCopy() const {
  auto copy = std::make_unique<PipedCopy>();
  if (Status s = copy->Start(*impl_); !s.ok()) return s;
  return std::unique_ptr<SnapshotCopy>(std::move(copy));
}

Result<uint64_t> DocumentStore::CountChangesSince(std::string_view collection, uint64_t since, uint64_t cap) const {
  return BacklogSince(collection, since, cap, /*estimate=*/false);
}

Result<uint64_t> DocumentStore::BacklogSince(std::string_view collection, uint64_t since, uint64_t exact_up_to,
                                             bool estimate) const {
  auto coll = impl_->FindCollection(collection);
  if (!coll || since == UINT64_MAX) return uint64_t{0};
  ReadTxn txn(impl_->env);
  if (!txn.status().ok()) return txn.status();
  MDB_cursor* cur = nullptr;
  int rc = mdb_cursor_open(txn.get(), impl_->coll_changes_db, &cur);
  if (rc != 0) return LmdbStatus(rc, "cursor");
  auto ours = [&](const MDB_val& k) {
    return k.mv_size == 12 && fmt::GetBE32(static_cast<const char*>(k.mv_data)) == *coll;
  };
  auto etag_of = [](const MDB_val& k) { return fmt::GetBE64(static_cast<const char*>(k.mv_data) + 4); };
  // Exactly, up to exact_up_to entries.
  uint64_t n = 0, reached = 0;
  std::string key = fmt::CollChangeKey(*coll, since + 1);
  MDB_val k = ToVal(key), v;
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0 && ours(k) && n < exact_up_to;
       rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    ++n;
    reached = etag_of(k);
  }
  const std::optional<CollectionInfo> info = estimate && n == exact_up_to ? Collection(collection) : std::nullopt;
  if ((rc != 0 && rc != MDB_NOTFOUND) || !info) {
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND) return LmdbStatus(rc, "count changes");
    return n;
  }
  // Beyond: the collection's entries taken as evenly spread over its etags
  // (its first to its last), from the etag the exact count reached.
  uint64_t first = 0, last = 0;
  key = fmt::CollChangeKey(*coll, 0);
  k = ToVal(key);
  if (mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE) == 0 && ours(k)) first = etag_of(k);
  key = fmt::CollChangeKey(*coll + 1, 0);
  k = ToVal(key);
  rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  rc = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_PREV) : mdb_cursor_get(cur, &k, &v, MDB_LAST);
  if (rc == 0 && ours(k)) last = etag_of(k);
  mdb_cursor_close(cur);
  if (last <= first || reached >= last) return n;
  const double density = double(info->count + info->tombstones) / double(last - first + 1);
  return n + static_cast<uint64_t>(density * double(last - reached));
}

std::vector<CollectionInfo> DocumentStore::Collections() const {
  std::shared_lock lock(impl_->collections_mu);
  std::vector<CollectionInfo> out;
  out.reserve(impl_->collections.size());
  for (const auto& [name, entry] : impl_->collections) out.push_back({name, entry.count, entry.tombstones});
  return out;
}

std::optional<CollectionInfo> DocumentStore::Collection(std::string_view name) const {
  std::shared_lock lock(impl_->collections_mu);
  auto it = impl_->collections.find(name);
  if (it == impl_->collections.end()) return std::nullopt;
  return CollectionInfo{it->first, it->second.count, it->second.tombstones};
}

uint64_t DocumentStore::LastEtag() const { return impl_->last_etag.load(std::memory_order_acquire); }

uint64_t DocumentStore::AddCommitListener(CommitListener listener) { return impl_->listeners.Add(std::move(listener)); }

void DocumentStore::RemoveCommitListener(uint64_t handle) { impl_->listeners.Remove(handle); }

void DocumentStore::Impl::Publish(uint64_t etag) {
  last_etag.store(etag, std::memory_order_release);
  listeners.Notify(etag);
}

DocumentStore::Stats DocumentStore::GetStats() const {
  std::lock_guard lock(impl_->stats_mu);
  return impl_->stats;
}

WriteResult DocumentStore::Write(WriteRequest request) {
  std::promise<WriteResult> promise;
  auto future = promise.get_future();
  Submit(std::move(request), [&promise](WriteResult r) { promise.set_value(std::move(r)); });
  return future.get();
}

}  // namespace corvid::storage
