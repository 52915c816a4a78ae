// store_stat: how a document store uses its LMDB file (issue 26, "measure
// LMDB's overflow and leaf use"): per database its entries, branch, leaf
// and overflow pages; the file's free pages (freed by earlier transactions,
// reused by later ones); for "docs" (and "bodies"), how many bodies each
// encoding holds and their stored sizes, against the JSON they decode to.
//   store_stat DATA_DIR/store
#include <lmdb.h>

#include <cstdio>
#include <map>
#include <string>

#include "storage/body_format.h"
#include "storage/format.h"

namespace fmt = corvid::storage::format;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: store_stat STORE_DIR\n");
    return 2;
  }
  MDB_env* env = nullptr;
  mdb_env_create(&env);
  mdb_env_set_maxdbs(env, 16);
  mdb_env_set_mapsize(env, size_t{256} << 30);
  if (int rc = mdb_env_open(env, argv[1], MDB_RDONLY | MDB_NOLOCK, 0644); rc != 0) {
    std::fprintf(stderr, "open %s: %s\n", argv[1], mdb_strerror(rc));
    return 1;
  }
  MDB_txn* txn = nullptr;
  mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
  MDB_stat envst;
  mdb_env_stat(env, &envst);
  MDB_envinfo info;
  mdb_env_info(env, &info);
  std::printf("page size %u, pages used %zu (%.1f MiB)\n", envst.ms_psize, size_t(info.me_last_pgno + 1),
              double(info.me_last_pgno + 1) * envst.ms_psize / 1048576.0);
  // The free list (LMDB's database 0): each value is a list of page
  // numbers, its first word their count.
  size_t free_pages = 0;
  {
    MDB_cursor* fc = nullptr;
    MDB_val fk, fv;
    if (mdb_cursor_open(txn, 0, &fc) == 0) {
      for (int rc = mdb_cursor_get(fc, &fk, &fv, MDB_FIRST); rc == 0; rc = mdb_cursor_get(fc, &fk, &fv, MDB_NEXT))
        if (fv.mv_size >= sizeof(size_t)) free_pages += *static_cast<const size_t*>(fv.mv_data);
      mdb_cursor_close(fc);
    }
  }
  std::printf("free pages %zu (%.1f MiB): the file less these is in use\n", free_pages,
              double(free_pages) * envst.ms_psize / 1048576.0);
  const char* names[] = {"meta", "collections", "docs", "bodies", "changes", "coll_changes", "dicts", "clock"};
  MDB_dbi docs = 0, dicts = 0, bodies = 0;
  for (const char* n : names) {
    MDB_dbi dbi;
    if (mdb_dbi_open(txn, n, 0, &dbi) != 0) continue;
    MDB_stat st;
    mdb_stat(txn, dbi, &st);
    std::printf("%-13s entries %10zu  depth %u  branch %8zu  leaf %9zu  overflow %9zu pages (%.1f MiB)\n", n,
                size_t(st.ms_entries), st.ms_depth, size_t(st.ms_branch_pages), size_t(st.ms_leaf_pages),
                size_t(st.ms_overflow_pages),
                double(st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages) * st.ms_psize / 1048576.0);
    if (std::string(n) == "docs") docs = dbi;
    if (std::string(n) == "dicts") dicts = dbi;
    if (std::string(n) == "bodies") bodies = dbi;
  }
  // Bodies by encoding.
  struct Tally {
    size_t count = 0, stored = 0, text = 0;
  };
  std::map<std::string, Tally> by;
  MDB_cursor* cur = nullptr;
  mdb_cursor_open(txn, docs, &cur);
  MDB_val k, v;
  for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    fmt::DocView view;
    if (!fmt::DecodeDoc(std::string_view(static_cast<const char*>(v.mv_data), v.mv_size), view)) continue;
    if (view.flags & fmt::kFlagBodyApart) {  // format 3: the body is in "bodies" at its etag
      const std::string bk = fmt::BodyKey(view.etag);
      MDB_val bkv{bk.size(), const_cast<char*>(bk.data())}, bv;
      if (bodies == 0 || mdb_get(txn, bodies, &bkv, &bv) != 0 ||
          !fmt::ApplyBodyEntry(std::string_view(static_cast<const char*>(bv.mv_data), bv.mv_size), view))
        continue;
    }
    std::string kind = view.flags & fmt::kFlagStructured ? "structured"
                       : view.flags & fmt::kFlagDict     ? "zstd+dictionary"
                       : view.flags & fmt::kFlagZstd     ? "zstd"
                                                         : "raw";
    Tally& t = by[kind];
    ++t.count;
    t.stored += view.body.size();
    auto size = corvid::storage::body::DecodedSize(view.flags, view.body, {});
    t.text += size.ok() ? *size : 0;
  }
  mdb_cursor_close(cur);
  for (const auto& [kind, t] : by)
    std::printf("bodies %-16s %10zu  stored %8.1f MiB  text %8.1f MiB  ratio %.3f  avg stored %zu B\n", kind.c_str(),
                t.count, t.stored / 1048576.0, t.text / 1048576.0, t.text ? double(t.stored) / double(t.text) : 0.0,
                t.count ? t.stored / t.count : 0);
  if (dicts != 0) {
    mdb_cursor_open(txn, dicts, &cur);
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
      std::printf("dictionary %u: collection %u, %zu bytes\n", fmt::GetBE32(static_cast<const char*>(k.mv_data)),
                  fmt::GetBE32(static_cast<const char*>(v.mv_data)), v.mv_size - 4);
    mdb_cursor_close(cur);
  }
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return 0;
}
