// The store's side of cluster mode: the log position recorded with the
// writes that applied it, and the fence a node-local failure raises.
#include <catch2/catch.hpp>

#include "tests/storage/store_test_util.h"

namespace corvid::storage {
namespace {

using testing::OpenStore;
using testing::Put;
using testing::TempDir;

WriteRequest AtLog(WriteOp op, uint64_t applied, uint64_t resume) {
  WriteRequest r;
  r.ops.push_back(std::move(op));
  r.log = LogPosition{applied, resume};
  return r;
}

}  // namespace

TEST_CASE("the log position is committed with the writes and survives a reopen", "[storage][log]") {
  TempDir dir;
  {
    auto store = OpenStore(dir);
    CHECK(store->GetLogPosition().applied == 0);
    CHECK(store->Write(AtLog(Put("c", "a", R"({"v":1})"), 5, 6)).status.ok());
    CHECK(store->GetLogPosition().applied == 5);
    // A precondition that fails is still the entry's outcome: the position moves.
    WriteOp cond = Put("c", "a", R"({"v":2})");
    cond.if_match = 999;
    CHECK(store->Write(AtLog(cond, 7, 3)).status.code() == StatusCode::kPreconditionFailed);
    CHECK(store->GetLogPosition().applied == 7);
    CHECK(store->GetLogPosition().resume == 3);
    // A request with no ops records only the position (an index entry).
    WriteRequest empty;
    empty.log = LogPosition{9, 10, 0xfeedface12345678, 0x0123456789abcdef};
    CHECK(store->Write(std::move(empty)).status.ok());
    CHECK(store->LastEtag() == 1);
  }
  auto store = OpenStore(dir);
  CHECK(store->GetLogPosition().applied == 9);
  CHECK(store->GetLogPosition().resume == 10);
  // The applied entry's fingerprint, compared with the log's at a start.
  CHECK(store->GetLogPosition().applied_hash == 0xfeedface12345678);
  // The digest of every entry up to it, compared with the peers' digests.
  CHECK(store->GetLogPosition().history == 0x0123456789abcdef);
  CHECK(store->LastEtag() == 1);
}

TEST_CASE("a node-local failure fences later log requests until the fence is reset", "[storage][log]") {
  TempDir dir;
  StoreOptions options;
  options.map_size = size_t{1} << 20;  // 1 MiB: a 2 MB body cannot fit
  auto opened = DocumentStore::Open(dir.path.string(), options);
  REQUIRE(opened.ok());
  auto& store = **opened;
  std::string big = "{\"v\":\"";
  uint32_t x = 1;
  for (int i = 0; i < 2000000; ++i) {  // incompressible: letters from an LCG
    x = x * 1664525u + 1013904223u;
    big.push_back(char('a' + (x >> 24) % 26));
  }
  big += "\"}";
  auto full = store.Write(AtLog(Put("c", "big", big), 1, 2));
  REQUIRE(full.status.code() == StatusCode::kNoSpace);
  // The next entry must not apply without the one before it.
  auto fenced = store.Write(AtLog(Put("c", "small", R"({"v":1})"), 2, 3));
  CHECK(fenced.status.code() == StatusCode::kUnavailable);
  CHECK(store.GetLogPosition().applied == 0);
  // Writes without a log position (a single server) are not fenced.
  WriteRequest plain;
  plain.ops.push_back(Put("c", "plain", R"({"v":1})"));
  CHECK(store.Write(std::move(plain)).status.ok());
  store.ResetLogFence();
  CHECK(store.Write(AtLog(Put("c", "small", R"({"v":1})"), 2, 3)).status.ok());
  CHECK(store.GetLogPosition().applied == 2);
}

}  // namespace corvid::storage
