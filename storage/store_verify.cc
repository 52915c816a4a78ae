// DocumentStore::Verify: `corvid verify`'s check of the store (format.h
// names every invariant it checks). LMDB keeps no checksum of its pages,
// so this is a structural check, as SQLite's integrity_check: every page
// reachable and well-formed (LMDB's own checks while walking), every value
// decodable, every body back to a JSON object, and the documents, the two
// change feeds and the collection counts in agreement.
#include <rapidjson/document.h>

#include <filesystem>
#include <map>

#include "common/lmdb_util.h"
#include "storage/document_store.h"
#include "storage/format.h"
#include "storage/store_impl.h"

namespace corvid::storage {

namespace fmt = format;

namespace {

// Damage lines for one part, listing the first kMaxListed.
class Damage {
 public:
  explicit Damage(VerifyReport& r) : r_(r) {}
  ~Damage() {
    if (count_ > VerifyReport::kMaxListed)
      r_.damaged.push_back("store: " + std::to_string(count_ - VerifyReport::kMaxListed) + " more problems not listed");
  }
  void operator()(std::string what) {
    if (++count_ <= VerifyReport::kMaxListed) r_.damaged.push_back("store: " + std::move(what));
  }
  uint64_t count() const { return count_; }

 private:
  VerifyReport& r_;
  uint64_t count_ = 0;
};

std::string Printable(std::string_view id) {
  std::string out;
  for (char c : id.substr(0, 80)) out.push_back(static_cast<unsigned char>(c) < 0x20 ? '?' : c);
  return out;
}

}  // namespace

Status DocumentStore::Verify(const std::string& dir, VerifyReport& report) {
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/data.mdb", ec)) {
    report.damaged.push_back("store: " + dir + "/data.mdb is missing");
    return Status::Ok();
  }
  Damage damage(report);
  Impl impl;
  int rc = mdb_env_create(&impl.env);
  if (rc != 0) return LmdbStatus(rc, "mdb_env_create");
  mdb_env_set_maxdbs(impl.env, 16);
  mdb_env_set_mapsize(impl.env, impl.options.map_size);
  // Read-only and without the lock file: the server is stopped.
  rc = mdb_env_open(impl.env, dir.c_str(), MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS | MDB_NORDAHEAD, 0644);
  if (rc != 0) {
    damage(LmdbStatus(rc, "open " + dir + "/data.mdb").ToString());
    return Status::Ok();
  }
  if (Status s = CheckLmdbFile(impl.env, dir); !s.ok()) {
    damage(s.ToString());
    return Status::Ok();
  }
  ReadTxn txn(impl.env);
  if (!txn.status().ok()) {
    damage(txn.status().ToString());
    return Status::Ok();
  }
  struct Named { const char* name; MDB_dbi* dbi; bool required; } dbs[] = {
      {"meta", &impl.meta_db, true}, {"collections", &impl.collections_db, true}, {"docs", &impl.docs_db, true},
      {"changes", &impl.changes_db, true}, {"coll_changes", &impl.coll_changes_db, true},
      {"dicts", &impl.dicts_db, false}, {"clock", &impl.clock_db, false}, {"bodies", &impl.bodies_db, false},
      {"heads", &impl.heads_db, false}};
  bool have_dicts = true, have_bodies = true, have_heads = true;
  for (auto& d : dbs) {
    rc = mdb_dbi_open(txn.get(), d.name, 0, d.dbi);
    if (rc == MDB_NOTFOUND && !d.required) {
      have_dicts = have_dicts && std::string_view(d.name) != "dicts";
      have_bodies = have_bodies && std::string_view(d.name) != "bodies";
      have_heads = have_heads && std::string_view(d.name) != "heads";
      continue;
    }
    if (rc != 0) {
      damage(LmdbStatus(rc, std::string("open database ") + d.name).ToString());
      return Status::Ok();
    }
  }
  // Walks one database; LMDB reports a page it cannot follow.
  auto walk = [&](MDB_dbi dbi, const char* name, const std::function<void(std::string_view, std::string_view)>& each) {
    MDB_cursor* cur = nullptr;
    int r = mdb_cursor_open(txn.get(), dbi, &cur);
    MDB_val k, v;
    if (r == 0)
      for (r = mdb_cursor_get(cur, &k, &v, MDB_FIRST); r == 0; r = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        each(FromVal(k), FromVal(v));
    if (cur) mdb_cursor_close(cur);
    if (r != MDB_NOTFOUND) damage(LmdbStatus(r, std::string("walk database ") + name).ToString());
  };

  // meta
  uint64_t last_etag = 0;
  walk(impl.meta_db, "meta", [&](std::string_view k, std::string_view v) {
    if (k == "format") {
      const uint64_t version = v.size() == 4 ? fmt::GetLE(v.data(), 4) : 0;
      if (version < 1 || version > fmt::kFormatVersion) damage("meta: unknown format version");
    } else if (k == "last_etag") {
      if (v.size() == 8) last_etag = fmt::GetLE(v.data(), 8);
      else damage("meta: last_etag is " + std::to_string(v.size()) + " bytes");
    }
  });

  // collections
  struct Tally { std::string name; uint64_t count = 0, tombstones = 0, seen_live = 0, seen_dead = 0; };
  std::map<uint32_t, Tally> colls;
  walk(impl.collections_db, "collections", [&](std::string_view k, std::string_view v) {
    if (k.size() != 4 || v.size() < 16) return damage("collections: a malformed entry");
    Tally& t = colls[fmt::GetBE32(k.data())];
    t.count = fmt::GetLE(v.data(), 8);
    t.tombstones = fmt::GetLE(v.data() + 8, 8);
    t.name = std::string(v.substr(16));
  });

  // dictionaries
  if (have_dicts)
    if (Status s = impl.LoadDictionaries(txn.get()); !s.ok()) damage(s.ToString());
  const body::DictionaryLookup dicts = impl.Dictionaries();

  // docs: each value decodes, each body is a JSON object.
  uint64_t docs = 0, bodies = 0, body_bytes = 0, apart = 0, headed = 0;
  std::string text;
  rapidjson::Document parsed;
  walk(impl.docs_db, "docs", [&](std::string_view k, std::string_view v) {
    ++docs;
    fmt::DocView view;
    if (k.size() < 4 || !fmt::DecodeDoc(v, view)) return damage("docs: a malformed entry");
    const uint32_t coll = fmt::GetBE32(k.data());
    auto it = colls.find(coll);
    const std::string_view id = view.long_id.empty() ? k.substr(4) : view.long_id;
    const std::string where = "document '" + Printable(id) + "'";
    if (it == colls.end()) return damage(where + " belongs to no collection (number " + std::to_string(coll) + ")");
    const std::string at = where + " in " + it->second.name;
    if (!view.long_id.empty() && fmt::DocKey(coll, view.long_id) != k) return damage(at + ": its key and id disagree");
    if (view.etag == 0 || view.etag > last_etag)
      damage(at + ": etag " + std::to_string(view.etag) + " beyond the last etag " + std::to_string(last_etag));
    if (view.flags & fmt::kFlagDeleted) {
      ++it->second.seen_dead;
      if (view.flags & fmt::kFlagBodyApart) damage(at + ": a tombstone with a body");
      return;
    }
    ++it->second.seen_live;
    if (view.flags & fmt::kFlagBodyApart) {
      ++apart;
      if (!have_bodies) return damage(at + ": its body is in \"bodies\", which the store does not have");
      if (Status s = impl.ResolveBody(txn.get(), view); !s.ok()) return damage(at + ": " + s.ToString());
    }
    Status s = body::DecodeWhole(view.flags, view.body, dicts, text);
    if (!s.ok()) return damage(at + ": its body does not decode (" + s.ToString() + ")");
    parsed.Parse<rapidjson::kParseValidateEncodingFlag>(text.data(), text.size());
    if (parsed.HasParseError() || !parsed.IsObject()) return damage(at + ": its body is not a JSON object");
    if (have_heads && (view.flags & fmt::kFlagStructured)) {  // its head (if it has one) is its text's
      const std::string key = fmt::BodyKey(view.etag);
      MDB_val hk = ToVal(key), hv;
      const int r = mdb_get(txn.get(), impl.heads_db, &hk, &hv);
      if (r == 0) {
        ++headed;
        if (FromVal(hv) != body::HeadOf(text)) damage(at + ": its head does not match its body");
      } else if (r != MDB_NOTFOUND) {
        damage(at + ": " + LmdbStatus(r, "read its head").ToString());
      }
    }
    ++bodies;
    body_bytes += text.size();
  });
  for (const auto& [number, t] : colls) {
    if (t.count != t.seen_live || t.tombstones != t.seen_dead)
      damage("collection " + t.name + " counts " + std::to_string(t.count) + " documents and " +
             std::to_string(t.tombstones) + " tombstones; the store holds " + std::to_string(t.seen_live) +
             " and " + std::to_string(t.seen_dead));
  }

  // bodies: well-formed, and each one a live document's (every document
  // flagged kFlagBodyApart found its own above, at its etag).
  uint64_t body_entries = 0;
  if (have_bodies)
    walk(impl.bodies_db, "bodies", [&](std::string_view k, std::string_view v) {
      ++body_entries;
      fmt::DocView view;
      if (k.size() != 8 || !fmt::ApplyBodyEntry(v, view)) damage("bodies: a malformed entry");
    });
  if (body_entries != apart)
    damage("bodies holds " + std::to_string(body_entries) + " entries for " + std::to_string(apart) +
           " documents whose body is kept there");
  // heads: each one a live structured body's (those were compared above).
  uint64_t head_entries = 0;
  if (have_heads)
    walk(impl.heads_db, "heads", [&](std::string_view k, std::string_view) {
      ++head_entries;
      if (k.size() != 8) damage("heads: a malformed entry");
    });
  if (head_entries != headed)
    damage("heads holds " + std::to_string(head_entries) + " entries, " + std::to_string(headed) +
           " of them a live document's");

  // The change feeds: one entry per document, naming its latest etag.
  auto check_change = [&](const char* feed, uint32_t coll, uint64_t etag, std::string_view rest) {
    if (rest.empty()) return damage(std::string(feed) + ": a malformed entry");
    const bool deleted = rest[0] & fmt::kFlagDeleted;
    const std::string_view id = rest.substr(1);
    const std::string key = fmt::DocKey(coll, id);
    MDB_val mk = ToVal(key), mv;
    const int r = mdb_get(txn.get(), impl.docs_db, &mk, &mv);
    fmt::DocView view;
    if (r != 0 || !fmt::DecodeDoc(FromVal(mv), view) || view.etag != etag ||
        bool(view.flags & fmt::kFlagDeleted) != deleted)
      damage(std::string(feed) + ": etag " + std::to_string(etag) + " names document '" + Printable(id) +
             "', which the store does not hold at that etag");
  };
  uint64_t changes = 0, coll_changes = 0;
  walk(impl.changes_db, "changes", [&](std::string_view k, std::string_view v) {
    ++changes;
    if (k.size() != 8 || v.size() < 5) return damage("changes: a malformed entry");
    check_change("changes", uint32_t(fmt::GetLE(v.data(), 4)), fmt::GetBE64(k.data()), v.substr(4));
  });
  walk(impl.coll_changes_db, "coll_changes", [&](std::string_view k, std::string_view v) {
    ++coll_changes;
    if (k.size() != 12) return damage("coll_changes: a malformed entry");
    check_change("coll_changes", fmt::GetBE32(k.data()), fmt::GetBE64(k.data() + 4), v);
  });
  if (changes != docs) damage("changes holds " + std::to_string(changes) + " entries for " + std::to_string(docs) + " documents");
  if (coll_changes != docs)
    damage("coll_changes holds " + std::to_string(coll_changes) + " entries for " + std::to_string(docs) + " documents");

  if (damage.count() == 0)
    report.sound.push_back("store: " + std::to_string(docs) + " documents and tombstones in " +
                           std::to_string(colls.size()) + " collections, " + std::to_string(bodies) + " bodies (" +
                           std::to_string(apart) + " kept by etag, " + std::to_string(headed) + " with heads, " +
                           std::to_string(body_bytes) + " bytes of JSON) decoded, change feeds agree, last etag " +
                           std::to_string(last_etag));
  return Status::Ok();
}

}  // namespace corvid::storage
