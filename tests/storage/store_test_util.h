// What the storage tests share: a temporary directory, opening a store in
// it, and building write requests.
#pragma once

#include <catch2/catch.hpp>
#include <unistd.h>

#include <atomic>
#include <filesystem>
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

}  // namespace corvid::storage::testing
