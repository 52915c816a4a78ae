// Unit tests of the document store: etag order, tombstones, the change feed,
// compression, long ids, preconditions, reopening, and the transaction
// merger under concurrent writers with failing members.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "common/verify_report.h"
#include "storage/body_format.h"
#include "storage/document_store.h"
#include "storage/format.h"
#include "tests/storage/store_test_util.h"

using namespace corvid;
using namespace corvid::storage;

namespace {

using testing::Bulk;
using testing::Del;
using testing::OpenStore;
using testing::Put;
using testing::RawEnv;
using testing::Single;
using testing::TempDir;

std::vector<Change> AllChanges(DocumentStore& store, std::optional<std::string_view> coll = {}) {
  auto changes = store.ChangesSince(0, 1000000, coll);
  REQUIRE(changes.ok());
  return *changes;
}

}  // namespace

TEST_CASE("put, get, replace and delete assign strictly increasing etags", "[storage]") {
  TempDir dir;
  auto store = OpenStore(dir);
  CHECK(store->LastEtag() == 0);

  auto r1 = Single(*store, Put("users", "a", R"({"n":1})"));
  REQUIRE(r1.status.ok());
  CHECK(r1.created);
  CHECK(r1.first_etag == 1);
  CHECK(r1.last_etag == 1);

  auto r2 = Single(*store, Put("users", "a", R"({"n":2})"));
  REQUIRE(r2.status.ok());
  CHECK_FALSE(r2.created);
  CHECK(r2.last_etag == 2);

  auto doc = store->Get("users", "a");
  REQUIRE(doc.ok());
  CHECK(doc->body == R"({"n":2})");
  CHECK(doc->etag == 2);
  CHECK(store->Get("users", "b").status().code() == StatusCode::kNotFound);
  CHECK(store->Get("nope", "a").status().code() == StatusCode::kNotFound);

  auto r3 = Single(*store, Del("users", "a"));
  REQUIRE(r3.status.ok());
  CHECK(r3.last_etag == 3);
  CHECK(store->Get("users", "a").status().code() == StatusCode::kNotFound);
  CHECK(Single(*store, Del("users", "a")).status.code() == StatusCode::kNotFound);
  CHECK(Single(*store, Del("other", "a")).status.code() == StatusCode::kNotFound);
  CHECK(store->LastEtag() == 3);

  // Re-creating a deleted document counts as created.
  auto r4 = Single(*store, Put("users", "a", "{}"));
  CHECK(r4.created);
  CHECK(r4.last_etag == 4);
}

TEST_CASE("the change feed keeps each document's latest change, tombstones included", "[storage]") {
  TempDir dir;
  auto store = OpenStore(dir);
  REQUIRE(Single(*store, Put("a", "1", "{}")).status.ok());  // 1
  REQUIRE(Single(*store, Put("b", "1", "{}")).status.ok());  // 2
  REQUIRE(Single(*store, Put("a", "2", "{}")).status.ok());  // 3
  REQUIRE(Single(*store, Put("a", "1", "{}")).status.ok());  // 4: compacts 1
  REQUIRE(Single(*store, Del("a", "2")).status.ok());        // 5: tombstone, compacts 3

  auto all = AllChanges(*store);
  REQUIRE(all.size() == 3);
  CHECK((all[0].etag == 2 && all[0].collection == "b" && all[0].id == "1" && !all[0].deleted));
  CHECK((all[1].etag == 4 && all[1].collection == "a" && all[1].id == "1" && !all[1].deleted));
  CHECK((all[2].etag == 5 && all[2].collection == "a" && all[2].id == "2" && all[2].deleted));

  auto only_a = AllChanges(*store, "a");
  REQUIRE(only_a.size() == 2);
  CHECK(only_a[0].etag == 4);
  CHECK(only_a[1].etag == 5);
  CHECK(only_a[1].deleted);

  auto since4 = store->ChangesSince(4, 10);
  REQUIRE(since4.ok());
  REQUIRE(since4->size() == 1);
  CHECK((*since4)[0].etag == 5);
  auto limited = store->ChangesSince(0, 2);
  REQUIRE(limited.ok());
  CHECK(limited->size() == 2);
  CHECK(AllChanges(*store, "missing").empty());
}

TEST_CASE("collections report live document counts", "[storage]") {
  TempDir dir;
  auto store = OpenStore(dir);
  REQUIRE(Bulk(*store, {Put("z", "1", "{}"), Put("z", "2", "{}"), Put("m", "1", "{}")}).status.ok());
  REQUIRE(Single(*store, Del("z", "1")).status.ok());
  REQUIRE(Single(*store, Put("z", "2", "{}")).status.ok());  // replace: count unchanged
  auto colls = store->Collections();
  REQUIRE(colls.size() == 2);
  CHECK((colls[0].name == "m" && colls[0].count == 1));
  CHECK((colls[1].name == "z" && colls[1].count == 1));
}

TEST_CASE("large bodies round-trip through compression; small and incompressible ones stay raw", "[storage]") {
  TempDir dir;
  StoreOptions options;
  options.compress_threshold = 64;
  auto store = OpenStore(dir, options);
  std::string compressible = R"({"text":")" + std::string(100000, 'x') + R"("})";
  std::mt19937 rng(7);
  std::string random_text = R"({"text":")";
  for (int i = 0; i < 5000; ++i) random_text.push_back(char('a' + rng() % 26));
  random_text += R"("})";
  REQUIRE(Single(*store, Put("c", "big", compressible)).status.ok());
  REQUIRE(Single(*store, Put("c", "rnd", random_text)).status.ok());
  REQUIRE(Single(*store, Put("c", "small", R"({"a":1})")).status.ok());
  CHECK(store->Get("c", "big")->body == compressible);
  CHECK(store->Get("c", "rnd")->body == random_text);
  CHECK(store->Get("c", "small")->body == R"({"a":1})");
}

TEST_CASE("ids up to 512 bytes, including ids that share a long prefix", "[storage]") {
  TempDir dir;
  auto store = OpenStore(dir);
  std::string prefix(505, 'p');
  std::string id1 = prefix + "1234567", id2 = prefix + "1234568";
  REQUIRE(id1.size() == 512);
  REQUIRE(Single(*store, Put("c", id1, R"({"v":1})")).status.ok());
  REQUIRE(Single(*store, Put("c", id2, R"({"v":2})")).status.ok());
  CHECK(store->Get("c", id1)->body == R"({"v":1})");
  CHECK(store->Get("c", id2)->body == R"({"v":2})");
  CHECK(store->Get("c", prefix + "1234569").status().code() == StatusCode::kNotFound);
  auto changes = AllChanges(*store);
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].id == id1);
  CHECK(changes[1].id == id2);
  CHECK(Single(*store, Put("c", std::string(513, 'x'), "{}")).status.code() == StatusCode::kInvalidArgument);
  // Collection names may be 512 bytes too (beyond LMDB's key limit).
  std::string long_coll(512, 'k');
  REQUIRE(Single(*store, Put(long_coll, id1, R"({"v":3})")).status.ok());
  CHECK(store->Get(long_coll, id1)->body == R"({"v":3})");
  CHECK(AllChanges(*store, long_coll).size() == 1);
  CHECK(Single(*store, Put("c", "", "{}")).status.code() == StatusCode::kInvalidArgument);
  CHECK(Single(*store, Put("c", "bad\xff", "{}")).status.code() == StatusCode::kInvalidArgument);
}

TEST_CASE("If-Match and If-None-Match preconditions", "[storage]") {
  TempDir dir;
  auto store = OpenStore(dir);
  auto created = Single(*store, Put("c", "d", R"({"v":1})"));
  REQUIRE(created.status.ok());

  WriteOp wrong = Put("c", "d", R"({"v":2})");
  wrong.if_match = created.last_etag + 100;
  CHECK(Single(*store, wrong).status.code() == StatusCode::kPreconditionFailed);
  CHECK(store->LastEtag() == created.last_etag);  // a failed write consumes no etag

  WriteOp right = Put("c", "d", R"({"v":2})");
  right.if_match = created.last_etag;
  auto replaced = Single(*store, right);
  REQUIRE(replaced.status.ok());
  CHECK(store->Get("c", "d")->body == R"({"v":2})");

  WriteOp absent = Put("c", "nope", "{}");
  absent.if_match = 1;
  CHECK(Single(*store, absent).status.code() == StatusCode::kPreconditionFailed);
  WriteOp absent_any = Put("c", "nope", "{}");
  absent_any.if_match_any = true;
  CHECK(Single(*store, absent_any).status.code() == StatusCode::kPreconditionFailed);
  WriteOp absent_coll = Put("never", "x", "{}");
  absent_coll.if_match = 1;
  CHECK(Single(*store, absent_coll).status.code() == StatusCode::kPreconditionFailed);
  CHECK(store->Collections().size() == 1);  // no collection created by a failed write

  WriteOp create_only = Put("c", "d", "{}");
  create_only.if_none_match_any = true;
  CHECK(Single(*store, create_only).status.code() == StatusCode::kPreconditionFailed);
  WriteOp create_new = Put("c", "e", "{}");
  create_new.if_none_match_any = true;
  CHECK(Single(*store, create_new).status.ok());

  WriteOp del = Del("c", "d");
  del.if_match = replaced.last_etag - 1;
  CHECK(Single(*store, del).status.code() == StatusCode::kPreconditionFailed);
  del.if_match = replaced.last_etag;
  CHECK(Single(*store, del).status.ok());
  CHECK(store->LastEtag() == replaced.last_etag + 2);
}

TEST_CASE("bulk writes get consecutive etags; deletes of absent ids record tombstones", "[storage]") {
  TempDir dir;
  auto store = OpenStore(dir);
  auto r = Bulk(*store, {Put("c", "1", R"({"v":1})"), Put("c", "2", "{}"), Del("c", "ghost"), Put("c", "1", R"({"v":2})")});
  REQUIRE(r.status.ok());
  CHECK(r.first_etag == 1);
  CHECK(r.last_etag == 4);
  CHECK(store->Get("c", "1")->body == R"({"v":2})");
  CHECK(store->Get("c", "ghost").status().code() == StatusCode::kNotFound);
  auto changes = AllChanges(*store);
  REQUIRE(changes.size() == 3);  // 1's first change was compacted by its second
  CHECK((changes[0].id == "2" && changes[1].id == "ghost" && changes[1].deleted && changes[2].id == "1"));
  CHECK(store->Collections()[0].count == 2);
}

TEST_CASE("everything written is there after reopening", "[storage]") {
  TempDir dir;
  {
    auto store = OpenStore(dir);
    REQUIRE(Bulk(*store, {Put("a", "1", R"({"x":1})"), Put("b", "2", R"({"y":2})")}).status.ok());
    REQUIRE(Single(*store, Del("a", "1")).status.ok());
  }
  auto store = OpenStore(dir);
  CHECK(store->LastEtag() == 3);
  CHECK(store->Get("b", "2")->body == R"({"y":2})");
  CHECK(store->Get("a", "1").status().code() == StatusCode::kNotFound);
  auto colls = store->Collections();
  REQUIRE(colls.size() == 2);
  CHECK(colls[0].count == 0);
  CHECK(colls[1].count == 1);
  // New collections after reopening get fresh numbers (no aliasing).
  REQUIRE(Single(*store, Put("c", "2", R"({"z":3})")).status.ok());
  CHECK(store->Get("b", "2")->body == R"({"y":2})");
  CHECK(store->Get("c", "2")->body == R"({"z":3})");
  CHECK(AllChanges(*store, "c").size() == 1);
  CHECK(store->LastEtag() == 4);
}

TEST_CASE("the merger groups concurrent writers; a failing member fails alone", "[storage][merger]") {
  TempDir dir;
  auto store = OpenStore(dir);
  REQUIRE(Single(*store, Put("c", "guarded", "{}")).status.ok());

  constexpr int kThreads = 8, kPerThread = 200;
  std::atomic<int> failures_seen{0}, failures_expected{0}, unexpected_errors{0};
  std::mutex mu;
  std::vector<uint64_t> etags;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t> mine;
      std::vector<std::future<WriteResult>> pending;
      for (int i = 0; i < kPerThread; ++i) {
        WriteRequest req;
        if (i % 10 == 3) {
          // Always fails: the guarded document's etag is 1.
          WriteOp op = Put("c", "guarded", R"({"bad":true})");
          op.if_match = 999999;
          req.ops.push_back(op);
          ++failures_expected;
        } else {
          req.ops.push_back(Put("c", std::to_string(t) + "-" + std::to_string(i), R"({"i":)" + std::to_string(i) + "}"));
        }
        auto promise = std::make_shared<std::promise<WriteResult>>();
        pending.push_back(promise->get_future());
        store->Submit(std::move(req), [promise](WriteResult r) { promise->set_value(std::move(r)); });
      }
      for (auto& f : pending) {  // no Catch assertions here: Catch is not thread-safe
        WriteResult r = f.get();
        if (r.status.code() == StatusCode::kPreconditionFailed) {
          ++failures_seen;
        } else if (r.status.ok()) {
          mine.push_back(r.last_etag);
        } else {
          ++unexpected_errors;
        }
      }
      std::lock_guard lock(mu);
      etags.insert(etags.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();

  const int writes = kThreads * kPerThread - failures_expected.load();
  CHECK(unexpected_errors.load() == 0);
  CHECK(failures_seen.load() == failures_expected.load());
  REQUIRE(int(etags.size()) == writes);
  std::set<uint64_t> distinct(etags.begin(), etags.end());
  CHECK(int(distinct.size()) == writes);                  // every write its own etag
  CHECK(*distinct.rbegin() == uint64_t(writes) + 1);      // no gaps, no failed write consumed one
  CHECK(store->LastEtag() == uint64_t(writes) + 1);
  CHECK(store->Get("c", "guarded")->body == "{}");
  CHECK(store->Get("c", "3-199")->body == R"({"i":199})");
  CHECK(store->Collections()[0].count == uint64_t(writes) + 1);
  auto stats = store->GetStats();
  CHECK(stats.commits < stats.requests);  // group commit actually grouped
}

TEST_CASE("a batch whose every member fails leaves the last etag alone", "[storage][merger]") {
  TempDir dir;
  auto store = OpenStore(dir);
  REQUIRE(Single(*store, Put("c", "a", "{}")).status.ok());
  WriteOp op = Put("c", "a", "{}");
  op.if_match = 42;
  CHECK(Single(*store, op).status.code() == StatusCode::kPreconditionFailed);
  CHECK(store->LastEtag() == 1);
  CHECK(Single(*store, Put("c", "b", "{}")).last_etag == 2);
}

TEST_CASE("listeners are woken by commits, with the etag already published", "[storage]") {
  TempDir dir;
  auto store = OpenStore(dir);
  std::mutex mu;
  std::condition_variable cv;
  uint64_t heard = 0, last_seen = 0;
  uint64_t handle = store->AddCommitListener([&](uint64_t etag) {
    std::lock_guard lock(mu);
    heard = etag;
    last_seen = store->LastEtag();  // LastEtag() is at least the etag heard
    cv.notify_all();
  });
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (void)Single(*store, Put("c", "x", "{}"));
  });
  {
    std::unique_lock lock(mu);
    CHECK(cv.wait_for(lock, std::chrono::seconds(10), [&] { return heard == 1; }));
    CHECK(last_seen >= 1);
  }
  writer.join();
  store->RemoveCommitListener(handle);
  (void)Single(*store, Put("c", "y", "{}"));
  std::lock_guard lock(mu);
  CHECK(heard == 1);
  CHECK(store->LastEtag() == 2);
}

TEST_CASE("a change batch reads its documents in key order and keeps etag order and the byte limit", "[storage]") {
  TempDir dir;
  StoreOptions options;
  options.compress_threshold = 64;
  auto store = OpenStore(dir, options);
  // Ids written in reverse key order, some compressed, some deleted later.
  std::vector<WriteOp> ops;
  for (int i = 0; i < 200; ++i) {
    const std::string id = "k" + std::to_string(1000 - i);
    ops.push_back(Put("c", id, R"({"id":")" + id + R"(","pad":")" + std::string(i % 3 == 0 ? 300 : 5, 'p') + R"("})"));
  }
  REQUIRE(Bulk(*store, ops).status.ok());
  REQUIRE(Single(*store, Del("c", "k990")).status.ok());
  auto batch = store->ReadChangeBatch("c", 0, 1000, 1 << 20);
  REQUIRE(batch.ok());
  auto changes = (*batch)->changes();
  REQUIRE(changes.size() == 200);
  for (size_t i = 1; i < changes.size(); ++i) CHECK(changes[i - 1].etag < changes[i].etag);
  for (const auto& c : changes) {
    if (c.deleted) {
      CHECK(c.id == "k990");
      continue;
    }
    CHECK(c.json.find(R"({"id":")" + std::string(c.id) + "\"") == 0);  // each body is its own document's
  }
  // The byte limit cuts an etag prefix: the change that reaches it is the last one.
  size_t total = 0, expect = 0;
  for (const auto& c : changes) {
    ++expect;
    total += c.json.size();
    if (total >= 5000) break;
  }
  auto cut = store->ReadChangeBatch("c", 0, 1000, 5000);
  REQUIRE(cut.ok());
  CHECK((*cut)->changes().size() == expect);
  CHECK_FALSE((*cut)->complete());
  CHECK((*cut)->changes().back().etag == changes[expect - 1].etag);
}

TEST_CASE("the backlog is exact up to its cap and estimated from the etags beyond", "[storage]") {
  TempDir dir;
  auto store = OpenStore(dir, StoreOptions{});
  std::vector<WriteOp> ops;
  for (int i = 0; i < 300; ++i) {
    ops.push_back(Put("a", "a" + std::to_string(i), "{}"));
    if (i % 3 == 0) ops.push_back(Put("b", "b" + std::to_string(i), "{}"));  // other collections' etags interleave
  }
  REQUIRE(Bulk(*store, ops).status.ok());
  uint64_t exact = 0;  // from the change feed itself
  for (const auto& c : AllChanges(*store, "a")) exact += c.etag > 50;
  CHECK(store->CountChangesSince("a", 50).value() == exact);
  CHECK(store->BacklogSince("a", 50, 1000).value() == exact);  // under the cap: exact
  const uint64_t estimate = store->BacklogSince("a", 50, 40).value();
  CHECK(estimate >= exact * 9 / 10);
  CHECK(estimate <= exact * 11 / 10);
  CHECK(store->BacklogSince("a", 400, 40).value() == 0);
  CHECK(store->BacklogSince("zzz", 0, 40).value() == 0);
}

TEST_CASE("change batches carry bodies, respect limits and count the backlog", "[storage]") {
  TempDir dir;
  StoreOptions options;
  options.compress_threshold = 64;
  auto store = OpenStore(dir, options);
  std::string big = R"({"t":")" + std::string(5000, 'q') + R"("})";
  REQUIRE(Bulk(*store, {Put("a", "1", R"({"v":1})"), Put("b", "x", "{}"), Put("a", "2", big),
                        Put("a", "3", R"({"v":3})")}).status.ok());  // etags 1..4
  REQUIRE(Single(*store, Del("a", "1")).status.ok());               // 5

  auto all = store->ReadChangeBatch("a", 0, 100, 1 << 20);
  REQUIRE(all.ok());
  auto changes = (*all)->changes();
  REQUIRE(changes.size() == 3);
  CHECK((changes[0].etag == 3 && changes[0].id == "2" && changes[0].json == big));  // decompressed
  CHECK((changes[1].etag == 4 && changes[1].json == R"({"v":3})"));
  CHECK((changes[2].etag == 5 && changes[2].deleted && changes[2].json.empty()));
  CHECK((*all)->complete());
  CHECK((*all)->snapshot_etag() == 5);

  auto limited = store->ReadChangeBatch("a", 0, 2, 1 << 20);
  REQUIRE(limited.ok());
  CHECK((*limited)->changes().size() == 2);
  CHECK_FALSE((*limited)->complete());
  auto by_bytes = store->ReadChangeBatch("a", 0, 100, 10);  // at least one change
  REQUIRE(by_bytes.ok());
  CHECK((*by_bytes)->changes().size() == 1);
  CHECK_FALSE((*by_bytes)->complete());
  auto rest = store->ReadChangeBatch("a", 4, 100, 1 << 20);
  REQUIRE(rest.ok());
  CHECK((*rest)->changes().size() == 1);
  CHECK((*rest)->complete());
  auto none = store->ReadChangeBatch("zzz", 0, 100, 1 << 20);
  REQUIRE(none.ok());
  CHECK((*none)->changes().empty());
  CHECK((*none)->complete());

  CHECK(store->CountChangesSince("a", 0).value() == 3);
  CHECK(store->CountChangesSince("a", 3).value() == 2);
  CHECK(store->CountChangesSince("a", 5).value() == 0);
  CHECK(store->CountChangesSince("b", 0).value() == 1);
  CHECK(store->CountChangesSince("zzz", 0).value() == 0);

  auto colls = store->Collections();
  CHECK((colls[0].name == "a" && colls[0].count == 2 && colls[0].tombstones == 1));
  REQUIRE(Single(*store, Put("a", "1", "{}")).status.ok());  // resurrect
  CHECK(store->Collections()[0].tombstones == 0);
  auto a = store->Collection("a");
  REQUIRE(a);
  CHECK((a->name == "a" && a->count == 3 && a->tombstones == 0));
  CHECK_FALSE(store->Collection("zzz"));
}

namespace {

bool Mentions(const std::vector<std::string>& lines, std::string_view what) {
  for (const auto& l : lines)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("bodies are kept by etag: rewrites and deletes leave none behind, and a missing one is Corruption",
          "[storage]") {
  namespace fmt = corvid::storage::format;
  TempDir dir;
  StoreOptions options;
  options.compress_threshold = 64;
  std::map<std::string, std::string> live;
  {
    auto store = OpenStore(dir, options);
    std::vector<WriteOp> ops;
    for (int i = 0; i < 50; ++i) {
      const std::string id = "d" + std::to_string(i);
      live[id] = R"({"id":")" + id + R"(","pad":")" + std::string(i % 2 ? 200 : 3, 'x') + R"("})";
      ops.push_back(Put("c", id, live[id]));
    }
    REQUIRE(Bulk(*store, ops).status.ok());
    live["d3"] = R"({"id":"d3","rewritten":true})";
    REQUIRE(Single(*store, Put("c", "d3", live["d3"])).status.ok());
    REQUIRE(Single(*store, Del("c", "d4")).status.ok());
    live.erase("d4");
    const std::string long_id(505, 'L');  // over kMaxDirectIdBytes: kept in its DocValue
    live[long_id] = R"({"long":1})";
    REQUIRE(Single(*store, Put("c", long_id, live[long_id])).status.ok());
  }
  // On disk: every live document's DocValue is its header alone, and its
  // body is the "bodies" entry at its etag; there is no other.
  uint64_t etag_d7 = 0;
  {
    RawEnv raw(dir.path, false);
    const auto docs = raw.All("docs"), bodies = raw.All("bodies");
    size_t apart = 0;
    for (const auto& [key, value] : docs) {
      fmt::DocView view;
      REQUIRE(fmt::DecodeDoc(value, view));
      CHECK(view.body.empty());
      if (view.flags & fmt::kFlagDeleted) {
        CHECK_FALSE(view.flags & fmt::kFlagBodyApart);
        CHECK(bodies.count(fmt::BodyKey(view.etag)) == 0);
        continue;
      }
      REQUIRE(view.flags & fmt::kFlagBodyApart);
      CHECK(bodies.count(fmt::BodyKey(view.etag)) == 1);
      ++apart;
      if (key.size() == 6 && key.substr(4) == "d7") etag_d7 = view.etag;
    }
    CHECK(apart == live.size());
    CHECK(bodies.size() == live.size());
    REQUIRE(etag_d7 != 0);
  }
  VerifyReport sound;
  REQUIRE(DocumentStore::Verify((dir.path).string(), sound).ok());
  CHECK(sound.damaged.empty());
  {
    auto store = OpenStore(dir, options);
    for (const auto& [id, body] : live) {
      auto doc = store->Get("c", id);
      REQUIRE(doc.ok());
      CHECK(doc->body == body);
    }
    auto batch = store->ReadChangeBatch("c", 0, 1000, size_t{1} << 20);
    REQUIRE(batch.ok());
    size_t bodies = 0;
    for (const auto& c : (*batch)->changes()) {
      if (c.deleted) continue;
      CHECK(c.json == live.at(std::string(c.id)));
      ++bodies;
    }
    CHECK(bodies == live.size());
  }

  // d7's body removed behind the store's back: verify names it, reads say Corruption.
  {
    RawEnv raw(dir.path, true);
    const std::string bk = fmt::BodyKey(etag_d7);
    MDB_val k{bk.size(), const_cast<char*>(bk.data())};
    REQUIRE(mdb_del(raw.txn, raw.Db("bodies"), &k, nullptr) == 0);
    raw.Commit();
  }
  VerifyReport missing;
  REQUIRE(DocumentStore::Verify((dir.path).string(), missing).ok());
  CHECK(Mentions(missing.damaged, "'d7'"));
  {
    auto store = OpenStore(dir, options);
    auto doc = store->Get("c", "d7");
    CHECK(doc.status().code() == StatusCode::kCorruption);
    CHECK(store->Get("c", "d9").ok());
    auto batch = store->ReadChangeBatch("c", 0, 1000, size_t{1} << 20);
    CHECK(batch.status().code() == StatusCode::kCorruption);
  }

  // A body no document names: verify counts it.
  {
    RawEnv raw(dir.path, true);
    const std::string bk = fmt::BodyKey(etag_d7), value = std::string(1, '\0') + live["d7"];
    MDB_val k{bk.size(), const_cast<char*>(bk.data())}, v{value.size(), const_cast<char*>(value.data())};
    REQUIRE(mdb_put(raw.txn, raw.Db("bodies"), &k, &v, 0) == 0);  // d7 whole again
    const std::string stray = fmt::BodyKey(1u << 30);
    MDB_val sk{stray.size(), const_cast<char*>(stray.data())};
    REQUIRE(mdb_put(raw.txn, raw.Db("bodies"), &sk, &v, 0) == 0);
    raw.Commit();
  }
  VerifyReport stray;
  REQUIRE(DocumentStore::Verify((dir.path).string(), stray).ok());
  CHECK(Mentions(stray.damaged, "bodies holds"));
  CHECK_FALSE(Mentions(stray.damaged, "'d7'"));
}

namespace {

// The projections a change batch gives for `fields`, by document id.
std::map<std::string, std::string> Projections(DocumentStore& store, const std::vector<std::string>& fields) {
  auto batch = store.ReadChangeBatch("c", 0, 1000, size_t{64} << 20, fields);
  REQUIRE(batch.ok());
  std::map<std::string, std::string> out;
  for (const auto& c : (*batch)->changes())
    if (!c.deleted) out[std::string(c.id)] = std::string(c.json);
  return out;
}

}  // namespace

TEST_CASE("heads: large bodies keep one, rewrites and deletes remove it, batches read it as the body would be",
          "[storage]") {
  namespace fmt = corvid::storage::format;
  TempDir dir;
  StoreOptions options;
  // A large document: a few leading fields (the head), then ~40 KB of
  // padding fields; `dotted` puts a key "score.x" after the head, so the
  // head cannot answer a reader of "score" (that reader also wants it).
  auto large = [](int i, bool dotted) {
    std::string s = R"({"id":"d)" + std::to_string(i) + R"(","score":)" + std::to_string(i) + R"(,"n\u0061me":"n)" +
                    std::to_string(i) + R"(","tags":[1,2,{"a":"}"}])";
    for (int p = 0; p < 40; ++p) s += R"(,"p)" + std::to_string(p) + R"(":")" + std::string(1000, char('a' + p % 26)) + '"';
    if (dotted) s += R"(,"score.x":7)";
    return s + "}";
  };
  std::map<std::string, std::string> live;
  {
    auto store = OpenStore(dir, options);
    std::vector<WriteOp> ops;
    for (int i = 0; i < 30; ++i) {
      const std::string id = "d" + std::to_string(i);
      live[id] = i % 3 == 2 ? R"({"id":")" + id + R"(","score":1})" : large(i, i == 4);
      ops.push_back(Put("c", id, live[id]));
    }
    REQUIRE(Bulk(*store, ops).status.ok());
    live["d0"] = large(100, false);  // rewritten large
    REQUIRE(Single(*store, Put("c", "d0", live["d0"])).status.ok());
    live["d1"] = R"({"id":"d1","score":2})";  // rewritten small
    REQUIRE(Single(*store, Put("c", "d1", live["d1"])).status.ok());
    live["d2"] = large(102, false);  // small rewritten large
    REQUIRE(Single(*store, Put("c", "d2", live["d2"])).status.ok());
    REQUIRE(Single(*store, Del("c", "d3")).status.ok());
    live.erase("d3");
  }
  size_t large_live = 0;
  for (const auto& [id, text] : live) large_live += text.size() >= 16384;
  {
    RawEnv raw(dir.path, false);
    const auto heads = raw.All("heads");
    CHECK(heads.size() == large_live);
    for (const auto& [key, head] : heads) CHECK(head.size() <= corvid::storage::body::kHeadMaxBytes);
  }
  VerifyReport sound;
  REQUIRE(DocumentStore::Verify((dir.path).string(), sound).ok());
  CHECK(sound.damaged.empty());
  CHECK(Mentions(sound.sound, std::to_string(large_live) + " with heads"));

  // What batches give from the heads is what they give from the bodies.
  const std::vector<std::vector<std::string>> readers = {
      {"score"}, {"id", "name"}, {"name", "score"}, {"tags"}, {"p3"}, {"id", "p39"}, {"missing"}, {"id", "score"}};
  std::vector<std::map<std::string, std::string>> from_heads;
  {
    auto store = OpenStore(dir, options);
    for (const auto& fields : readers) from_heads.push_back(Projections(*store, fields));
  }
  {
    RawEnv raw(dir.path, true);
    REQUIRE(mdb_drop(raw.txn, raw.Db("heads"), 0) == 0);  // emptied: bodies written before heads
    raw.Commit();
  }
  {
    auto store = OpenStore(dir, options);
    for (size_t r = 0; r < readers.size(); ++r) {
      INFO("reader " << r);
      const auto from_bodies = Projections(*store, readers[r]);
      CHECK(from_bodies.size() == live.size());
      CHECK(from_heads[r] == from_bodies);
    }
    CHECK(from_heads[2].at("d7") == R"({"score":7,"n\u0061me":"n7"})");
    CHECK(from_heads[0].at("d4") == R"({"score":4,"score.x":7})");  // from its body
    // New writes keep heads again.
    live["d5"] = large(105, false);
    REQUIRE(Single(*store, Put("c", "d5", live["d5"])).status.ok());
  }
  std::string head_d5;
  uint64_t etag_d5 = 0;
  {
    RawEnv raw(dir.path, false);
    const auto heads = raw.All("heads");
    REQUIRE(heads.size() == 1);
    etag_d5 = fmt::GetBE64(heads.begin()->first.data());
    head_d5 = heads.begin()->second;
  }
  // A batch its head answers does not read the body: with the body gone
  // (behind the store's back) it still reads; one that needs the body says
  // Corruption.
  {
    RawEnv raw(dir.path, true);
    const std::string key = fmt::BodyKey(etag_d5);
    MDB_val k{key.size(), const_cast<char*>(key.data())}, v;
    REQUIRE(mdb_get(raw.txn, raw.Db("bodies"), &k, &v) == 0);
    const std::string saved(static_cast<char*>(v.mv_data), v.mv_size);
    REQUIRE(mdb_del(raw.txn, raw.Db("bodies"), &k, nullptr) == 0);
    raw.Commit();
    {
      auto store = OpenStore(dir, options);
      const auto projected = Projections(*store, {"name", "score"});
      CHECK(projected.at("d5") == R"({"score":105,"n\u0061me":"n105"})");
      auto needs_body = store->ReadChangeBatch("c", 0, 1000, size_t{64} << 20, std::vector<std::string>{"p3"});
      CHECK(needs_body.status().code() == StatusCode::kCorruption);
    }
    RawEnv back(dir.path, true);
    MDB_val sv{saved.size(), const_cast<char*>(saved.data())};
    REQUIRE(mdb_put(back.txn, back.Db("bodies"), &k, &sv, 0) == 0);
    back.Commit();
  }
  // A damaged head: a batch that would read it says Corruption, verify
  // names its document; a whole-document batch does not read it.
  {
    RawEnv raw(dir.path, true);
    std::string bad = head_d5;
    bad[bad.size() / 2] ^= 0x20;
    const std::string key = fmt::BodyKey(etag_d5);
    MDB_val k{key.size(), const_cast<char*>(key.data())}, v{bad.size(), bad.data()};
    REQUIRE(mdb_put(raw.txn, raw.Db("heads"), &k, &v, 0) == 0);
    raw.Commit();
  }
  {
    auto store = OpenStore(dir, options);
    auto batch = store->ReadChangeBatch("c", 0, 1000, size_t{64} << 20, std::vector<std::string>{"score"});
    CHECK(batch.status().code() == StatusCode::kCorruption);
    CHECK(store->ReadChangeBatch("c", 0, 1000, size_t{64} << 20).ok());
  }
  VerifyReport damaged;
  REQUIRE(DocumentStore::Verify((dir.path).string(), damaged).ok());
  CHECK(Mentions(damaged.damaged, "'d5'"));
  // A head no document has: verify counts it.
  {
    RawEnv raw(dir.path, true);
    const std::string key = fmt::BodyKey(etag_d5), stray = fmt::BodyKey(1u << 30);
    MDB_val k{key.size(), const_cast<char*>(key.data())}, v{head_d5.size(), head_d5.data()};
    REQUIRE(mdb_put(raw.txn, raw.Db("heads"), &k, &v, 0) == 0);
    MDB_val sk{stray.size(), const_cast<char*>(stray.data())};
    REQUIRE(mdb_put(raw.txn, raw.Db("heads"), &sk, &v, 0) == 0);
    raw.Commit();
  }
  VerifyReport stray;
  REQUIRE(DocumentStore::Verify((dir.path).string(), stray).ok());
  CHECK(Mentions(stray.damaged, "heads holds"));
  CHECK_FALSE(Mentions(stray.damaged, "'d5'"));
}
