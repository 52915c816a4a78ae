// What the storage tests share: a temporary directory, opening a store in
// it, and building write requests.
#pragma once

#include <catch2/catch.hpp>
#include <lmdb.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "storage/document_store.h"

namespace corvid::storage::testing {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("corvid-store-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

inline std::unique_ptr<DocumentStore> OpenStore(const std::filesystem::path& dir, StoreOptions options = {}) {
  options.map_size = size_t{1} << 30;
  auto store = DocumentStore::Open(dir.string(), options);
  INFO(store.status().ToString());
  REQUIRE(store.ok());
  return std::move(store).value();
}
inline std::unique_ptr<DocumentStore> OpenStore(const TempDir& dir, StoreOptions options = {}) {
  return OpenStore(dir.path, options);
}

inline WriteOp Put(std::string coll, std::string id, std::string body) {
  WriteOp op;
  op.kind = WriteKind::kPut;
  op.collection = std::move(coll);
  op.id = std::move(id);
  op.body = std::move(body);
  return op;
}

inline WriteOp Del(std::string coll, std::string id) {
  WriteOp op;
  op.kind = WriteKind::kDelete;
  op.collection = std::move(coll);
  op.id = std::move(id);
  return op;
}

inline WriteResult Single(DocumentStore& store, WriteOp op) {
  WriteRequest req;
  req.ops.push_back(std::move(op));
  return store.Write(std::move(req));
}

inline WriteResult Bulk(DocumentStore& store, std::vector<WriteOp> ops) {
  WriteRequest req;
  req.single = false;
  req.ops = std::move(ops);
  return store.Write(std::move(req));
}

// The store's LMDB file opened directly (the store closed), for what the
// API cannot show: where a body is kept, and damage made on purpose.
struct RawEnv {
  MDB_env* env = nullptr;
  MDB_txn* txn = nullptr;
  RawEnv(const std::filesystem::path& dir, bool write) {
    REQUIRE(mdb_env_create(&env) == 0);
    mdb_env_set_maxdbs(env, 16);
    mdb_env_set_mapsize(env, size_t{1} << 30);
    REQUIRE(mdb_env_open(env, dir.c_str(), MDB_NOTLS | (write ? 0 : MDB_RDONLY), 0644) == 0);
    REQUIRE(mdb_txn_begin(env, nullptr, write ? 0 : MDB_RDONLY, &txn) == 0);
  }
  ~RawEnv() {
    if (txn) mdb_txn_abort(txn);
    mdb_env_close(env);
  }
  MDB_dbi Db(const char* name) {
    MDB_dbi dbi;
    REQUIRE(mdb_dbi_open(txn, name, 0, &dbi) == 0);
    return dbi;
  }
  void Commit() {
    REQUIRE(mdb_txn_commit(txn) == 0);
    txn = nullptr;
  }
  // key -> value of one database.
  std::map<std::string, std::string> All(const char* name) {
    std::map<std::string, std::string> out;
    MDB_cursor* cur;
    REQUIRE(mdb_cursor_open(txn, Db(name), &cur) == 0);
    MDB_val k, v;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
      out[std::string(static_cast<char*>(k.mv_data), k.mv_size)] = std::string(static_cast<char*>(v.mv_data), v.mv_size);
    mdb_cursor_close(cur);
    return out;
  }
};

}  // namespace corvid::storage::testing
