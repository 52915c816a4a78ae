// What the two LMDB users (the store, the map/reduce state) share: the
// Status an LMDB error code means, and the check every environment gets
// right after mdb_env_open. Users link LMDB.
#pragma once

#include <lmdb.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace corvid {

// `what`: what was being done, for the message. Damage LMDB notices is
// Corruption; a full disk or map is NoSpace (507 for a write).
inline Status LmdbStatus(int rc, std::string_view what) {
  if (rc == 0) return Status::Ok();
  std::string msg(what);
  msg += ": ";
  msg += mdb_strerror(rc);
  if (rc == MDB_NOTFOUND) return Status::NotFound(std::move(msg));
  if (rc == MDB_CORRUPTED || rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_PAGE_NOTFOUND)
    return Status::Corruption(std::move(msg));
  if (rc == ENOSPC || rc == EDQUOT || rc == MDB_MAP_FULL) return Status::NoSpace(std::move(msg));
  return Status::IOError(std::move(msg));
}

// Bytes as LMDB takes them, and back (a view into LMDB's map: valid while
// its transaction is open).
inline MDB_val ToVal(std::string_view s) { return MDB_val{s.size(), const_cast<char*>(s.data())}; }
inline std::string_view FromVal(const MDB_val& v) { return {static_cast<const char*>(v.mv_data), v.mv_size}; }

// LMDB maps its file and trusts it: a page past the end of a truncated
// data.mdb is a SIGBUS on first touch, not an error code. So before
// anything is read, the file must hold every page its newest meta page
// names. (A torn or foreign meta page LMDB refuses by itself: MDB_INVALID.)

inline Status CheckLmdbFile(MDB_env* env, const std::string& dir) {
  const std::string path = dir + "/data.mdb";
  MDB_envinfo info;
  MDB_stat st;
  if (mdb_env_info(env, &info) != 0 || mdb_env_stat(env, &st) != 0)
    return Status::Corruption(path + ": cannot read its meta page");
  struct stat sb;
  if (::stat(path.c_str(), &sb) != 0) return Status::IOError(path + ": cannot stat");
  const uint64_t need = (uint64_t(info.me_last_pgno) + 1) * st.ms_psize;
  if (uint64_t(sb.st_size) < need)
    return Status::Corruption(path + " is " + std::to_string(sb.st_size) + " bytes but its pages run to " +
                              std::to_string(need) + " (truncated)");
  return Status::Ok();
}

}  // namespace corvid
