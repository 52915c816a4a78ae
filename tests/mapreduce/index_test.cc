// MapReduceIndex by hand-checked examples: row JSON, every reducer, query
// parameters and their errors, reopen, definition change, Clear, errors.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <filesystem>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "mapreduce/mapreduce_index.h"
#include "tests/mapreduce/test_util.h"

using namespace corvid;
using namespace corvid::mapreduce;

namespace {

const char* kDef = R"J({"type":"mapreduce","collection":"users",
  "map":{"month":"substr(createdAt, 0, 7)","score":"score","kind":"kind"},
  "groupBy":["month","kind"],
  "reduce":{"total":"sum(score)","users":"count()","best":"max(score)","worst":"min(score)","mean":"avg(score)"}})J";

std::string Q(const MapReduceIndex& idx, std::vector<std::pair<std::string, std::string>> params,
              uint64_t* total = nullptr) {
  auto r = idx.Query(params);
  if (!r.ok()) return "error: " + r.status().message();
  if (total) *total = r->total;
  return r->rows_json;
}

}  // namespace

TEST_CASE("index: rows, reducers and queries", "[mapreduce]") {
  TempDir dir;
  auto def = Definition::Compile(kDef);
  REQUIRE(def.ok());
  auto opened = MapReduceIndex::Open(dir.path(), *def);
  REQUIRE(opened.ok());
  auto& idx = **opened;
  CHECK(idx.LastAppliedEtag() == 0);

  Batch b;
  b.Put(1, "u1", R"J({"createdAt":"2024-01-05","score":10,"kind":"a"})J");
  b.Put(2, "u2", R"J({"createdAt":"2024-01-20","score":30,"kind":"a"})J");
  b.Put(3, "u3", R"J({"createdAt":"2024-01-21","score":2.5,"kind":"b"})J");
  b.Put(4, "u4", R"J({"createdAt":"2024-02-01","score":"high","kind":"a"})J");
  b.Put(5, "u5", R"J({"createdAt":"2024-02-02","kind":"a"})J");
  b.Put(6, "u6", R"J({"createdAt":null,"score":1,"kind":"a"})J");
  b.Put(7, "u7", R"J({"createdAt":"2024-03-01","score":1,"kind":true})J");
  b.Put(8, "u8", R"J({"createdAt":"2024-03-01","score":1,)J");
  std::vector<IndexError> errors;
  REQUIRE(idx.ApplyBatch(b.changes(), 8, errors).ok());
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].id == "u4");
  CHECK(errors[0].etag == 4);
  CHECK(errors[0].message == "reduce.total: sum needs a number, got string (value left out)");
  CHECK(errors[1].id == "u8");
  CHECK(idx.LastAppliedEtag() == 8);
  CHECK(idx.RowCount() == 4);
  CHECK(idx.DiskBytes() > 0);

  uint64_t total = 0;
  CHECK(Q(idx, {}, &total) ==
        R"J([{"month":"2024-01","kind":"a","total":40,"users":2,"best":30,"worst":10,"mean":20.0},)J"
        R"J({"month":"2024-01","kind":"b","total":2.5,"users":1,"best":2.5,"worst":2.5,"mean":2.5},)J"
        R"J({"month":"2024-02","kind":"a","total":0,"users":2,"best":null,"worst":null,"mean":null},)J"
        R"J({"month":"2024-03","kind":true,"total":1,"users":1,"best":1,"worst":1,"mean":1.0}])J");
  CHECK(total == 4);
  CHECK(Q(idx, {{"groupLevel", "1"}}) ==
        R"J([{"month":"2024-01","total":42.5,"users":3,"best":30,"worst":2.5,"mean":14.166666666666666},)J"
        R"J({"month":"2024-02","total":0,"users":2,"best":null,"worst":null,"mean":null},)J"
        R"J({"month":"2024-03","total":1,"users":1,"best":1,"worst":1,"mean":1.0}])J");
  CHECK(Q(idx, {{"groupLevel", "0"}}) ==
        R"J([{"total":43.5,"users":6,"best":30,"worst":1,"mean":10.875}])J");
  CHECK(Q(idx, {{"month", "2024-01"}, {"kind", "b"}}) ==
        R"J([{"month":"2024-01","kind":"b","total":2.5,"users":1,"best":2.5,"worst":2.5,"mean":2.5}])J");
  CHECK(Q(idx, {{"kind", "true"}, {"groupLevel", "1"}}) ==
        R"J([{"month":"2024-03","total":1,"users":1,"best":1,"worst":1,"mean":1.0}])J");
  CHECK(Q(idx, {{"month.gt", "2024-01"}, {"month.lte", "2024-02"}, {"groupLevel", "1"}, {"minEtag", "3"}}) ==
        R"J([{"month":"2024-02","total":0,"users":2,"best":null,"worst":null,"mean":null}])J");
  CHECK(Q(idx, {{"sort", "-users,month"}, {"limit", "2"}, {"offset", "1"}, {"groupLevel", "1"}}, &total) ==
        R"J([{"month":"2024-02","total":0,"users":2,"best":null,"worst":null,"mean":null},)J"
        R"J({"month":"2024-03","total":1,"users":1,"best":1,"worst":1,"mean":1.0}])J");
  CHECK(total == 3);
  CHECK(Q(idx, {{"offset", "10"}}) == "[]");
  CHECK(Q(idx, {{"limit", "0"}}, &total) == "[]");
  CHECK(total == 4);

  CHECK(Q(idx, {{"nope", "1"}}) == "error: unknown parameter 'nope'");
  CHECK(Q(idx, {{"month.between", "1"}}) == "error: unknown parameter 'month.between'");
  CHECK(Q(idx, {{"total.gt", "1"}}) == "error: 'total.gt': filters apply to group fields only");
  CHECK(Q(idx, {{"sort", "-nope"}}) == "error: sort: unknown field 'nope'");
  CHECK(Q(idx, {{"sort", "kind"}, {"groupLevel", "1"}}) == "error: sort: 'kind' is not a field at groupLevel 1");
  CHECK(Q(idx, {{"limit", "-1"}}) == "error: limit: must be a non-negative integer");
  CHECK(Q(idx, {{"groupLevel", "x"}}) == "error: groupLevel: must be a non-negative integer");

  // Update moves u2 to February, delete u1 (the January min): min recomputed.
  Batch b2;
  b2.Put(9, "u2", R"J({"createdAt":"2024-02-10","score":7,"kind":"a"})J");
  b2.Del(10, "u1");
  errors.clear();
  REQUIRE(idx.ApplyBatch(b2.changes(), 10, errors).ok());
  CHECK(errors.empty());
  CHECK(Q(idx, {{"kind", "a"}}) ==
        R"J([{"month":"2024-02","kind":"a","total":7,"users":3,"best":7,"worst":7,"mean":7.0}])J");
  // Replaying the same batch changes nothing.
  REQUIRE(idx.ApplyBatch(b2.changes(), 10, errors).ok());
  CHECK(Q(idx, {{"kind", "a"}}) ==
        R"J([{"month":"2024-02","kind":"a","total":7,"users":3,"best":7,"worst":7,"mean":7.0}])J");
  auto snap = idx.Query({});
  REQUIRE(snap.ok());
  CHECK(snap->snapshot_etag == 10);
}

TEST_CASE("index: reopen, definition change, Clear", "[mapreduce]") {
  TempDir dir;
  std::string before;
  {
    auto def = Definition::Compile(kDef);
    REQUIRE(def.ok());
    auto idx = MapReduceIndex::Open(dir.path(), *def);
    REQUIRE(idx.ok());
    Batch b;
    b.Put(5, "a", R"J({"createdAt":"2024-01-05","score":10,"kind":"a"})J");
    b.Put(6, "b", R"J({"createdAt":"2024-01-06","score":-3,"kind":"a"})J");
    std::vector<IndexError> errors;
    REQUIRE((*idx)->ApplyBatch(b.changes(), 7, errors).ok());
    before = Q(**idx, {});
  }
  {
    auto def = Definition::Compile(kDef);
    auto idx = MapReduceIndex::Open(dir.path(), *def);
    REQUIRE(idx.ok());
    CHECK((*idx)->LastAppliedEtag() == 7);
    CHECK(Q(**idx, {}) == before);
    // Deleting the max after reopen finds the next one.
    Batch b;
    b.Del(8, "a");
    std::vector<IndexError> errors;
    REQUIRE((*idx)->ApplyBatch(b.changes(), 8, errors).ok());
    CHECK(Q(**idx, {}) ==
          R"J([{"month":"2024-01","kind":"a","total":-3,"users":1,"best":-3,"worst":-3,"mean":-3.0}])J");
    REQUIRE((*idx)->Clear().ok());
    CHECK((*idx)->LastAppliedEtag() == 0);
    CHECK((*idx)->RowCount() == 0);
    CHECK(Q(**idx, {}) == "[]");
    REQUIRE((*idx)->ApplyBatch(b.changes(), 9, errors).ok());
  }
  {
    // A different definition wipes the state.
    std::string other = kDef;
    other.replace(other.find("sum(score)"), 10, "sum(score * 2)");
    auto def = Definition::Compile(other);
    REQUIRE(def.ok());
    auto idx = MapReduceIndex::Open(dir.path(), *def);
    REQUIRE(idx.ok());
    CHECK((*idx)->LastAppliedEtag() == 0);
    CHECK((*idx)->RowCount() == 0);
  }
}

TEST_CASE("index: global row, integer sums exact beyond int64", "[mapreduce]") {
  TempDir dir;
  auto def = Definition::Compile(R"J({"type":"mapreduce","collection":"c","map":{"v":"v"},"groupBy":[],
    "reduce":{"s":"sum(v)","n":"count()","lo":"min(v)","hi":"max(v)"}})J");
  REQUIRE(def.ok());
  auto idx = MapReduceIndex::Open(dir.path(), *def);
  REQUIRE(idx.ok());
  Batch b;
  b.Put(1, "a", R"J({"v":9223372036854775807})J");
  b.Put(2, "b", R"J({"v":9223372036854775807})J");
  b.Put(3, "c", R"J({"v":9007199254740993})J");
  std::vector<IndexError> errors;
  REQUIRE((*idx)->ApplyBatch(b.changes(), 3, errors).ok());
  CHECK(Q(**idx, {}) ==
        R"J([{"s":18455751272964292608.0,"n":3,"lo":9007199254740993,"hi":9223372036854775807}])J");
  Batch d;
  d.Del(4, "a");
  d.Del(5, "b");
  REQUIRE((*idx)->ApplyBatch(d.changes(), 5, errors).ok());
  CHECK(Q(**idx, {}) == R"J([{"s":9007199254740993,"n":1,"lo":9007199254740993,"hi":9007199254740993}])J");
  d.Del(6, "c");
  REQUIRE((*idx)->ApplyBatch(d.changes(), 6, errors).ok());
  CHECK(Q(**idx, {}) == "[]");
}

TEST_CASE("index: double sums after updates and deletes equal a fresh sum", "[mapreduce]") {
  auto def = Definition::Compile(R"J({"type":"mapreduce","collection":"c","map":{"g":"g","v":"v"},"groupBy":["g"],
    "reduce":{"s":"sum(v)","m":"avg(v)"}})J");
  REQUIRE(def.ok());
  std::vector<IndexError> errors;
  // Cancellation: a large value added and removed leaves the small one exactly.
  {
    TempDir dir;
    auto idx = MapReduceIndex::Open(dir.path(), *def);
    REQUIRE(idx.ok());
    Batch b;
    b.Put(1, "big", R"J({"g":1,"v":1e17})J");
    b.Put(2, "small", R"J({"g":1,"v":1.5})J");
    REQUIRE((*idx)->ApplyBatch(b.changes(), 2, errors).ok());
    Batch d;
    d.Del(3, "big");
    REQUIRE((*idx)->ApplyBatch(d.changes(), 3, errors).ok());
    CHECK(Q(**idx, {}) == R"J([{"g":1,"s":1.5,"m":1.5}])J");
  }
  // Random decimals moved between groups batch after batch, then compared
  // with an index built in one batch from what is left.
  std::mt19937 rng(7);
  std::map<std::string, std::string> docs;
  TempDir inc_dir, fresh_dir;
  auto inc = MapReduceIndex::Open(inc_dir.path(), *def);
  REQUIRE(inc.ok());
  uint64_t etag = 0;
  for (int round = 0; round < 40; ++round) {
    Batch b;
    for (int i = 0; i < 25; ++i) {
      const std::string id = std::string("d").append(std::to_string(rng() % 60));  // not "d" + ...: GCC 12 -Wrestrict false positive
      ++etag;
      if (rng() % 5 == 0) {
        b.Del(etag, id);
        docs.erase(id);
        continue;
      }
      const double v = static_cast<double>(static_cast<int64_t>(rng() % 2000000) - 1000000) / 100.0 *
                       (rng() % 3 == 0 ? 1e6 : 1.0);
      char json[96];
      std::snprintf(json, sizeof json, R"J({"g":%u,"v":%.17g})J", static_cast<unsigned>(rng() % 4), v);
      b.Put(etag, id, json);
      docs[id] = json;
    }
    REQUIRE((*inc)->ApplyBatch(b.changes(), etag, errors).ok());
  }
  auto fresh = MapReduceIndex::Open(fresh_dir.path(), *def);
  REQUIRE(fresh.ok());
  Batch all;
  uint64_t e = 0;
  for (const auto& [id, json] : docs) all.Put(++e, id, json);
  REQUIRE((*fresh)->ApplyBatch(all.changes(), e, errors).ok());
  CHECK(Q(**inc, {}) == Q(**fresh, {}));
}

TEST_CASE("index: a batch's errors reach the BeforeCommit hook before it commits", "[mapreduce]") {
  TempDir dir;
  auto def = Definition::Compile(R"J({"type":"mapreduce","collection":"c","map":{"v":"v"},"groupBy":[],
    "reduce":{"s":"sum(v)"}})J");
  REQUIRE(def.ok());
  auto idx = MapReduceIndex::Open(dir.path(), *def);
  REQUIRE(idx.ok());
  std::vector<IndexError> hooked;
  int calls = 0;
  uint64_t applied_at_hook = 99;
  (*idx)->SetBeforeCommit([&](std::span<const IndexError> errors) {
    ++calls;
    hooked.assign(errors.begin(), errors.end());
    applied_at_hook = (*idx)->LastAppliedEtag();
  });
  Batch b;
  b.Put(1, "ok", R"J({"v":1})J");
  b.Put(2, "bad", R"J({"v":"lots"})J");
  std::vector<IndexError> errors;
  REQUIRE((*idx)->ApplyBatch(b.changes(), 2, errors).ok());
  CHECK(calls == 1);
  REQUIRE(hooked.size() == 1);
  CHECK(hooked[0].id == "bad");
  CHECK(applied_at_hook == 0);  // not committed yet when the errors were handed over
  CHECK((*idx)->LastAppliedEtag() == 2);
  Batch good;
  good.Put(3, "ok2", R"J({"v":2})J");
  REQUIRE((*idx)->ApplyBatch(good.changes(), 3, errors).ok());
  CHECK(calls == 1);  // a batch without errors does not call it
}

TEST_CASE("index: queries see whole batches while the writer runs", "[mapreduce]") {
  TempDir dir;
  auto def = Definition::Compile(R"J({"type":"mapreduce","collection":"c","map":{"v":"v"},"groupBy":[],
    "reduce":{"n":"count()","s":"sum(v)"}})J");
  REQUIRE(def.ok());
  auto idx = MapReduceIndex::Open(dir.path(), *def);
  REQUIRE(idx.ok());
  std::atomic<bool> done{false};
  std::atomic<int> bad{0}, reads{0};
  std::thread reader([&] {
    while (!done.load()) {
      auto r = (*idx)->Query({});
      if (!r.ok()) { ++bad; continue; }
      ++reads;
      // Each batch adds 50 documents of v=1 with etags 1..: n == s == snapshot.
      std::string want = r->snapshot_etag == 0 ? "[]"
                          : "[{\"n\":" + std::to_string(r->snapshot_etag) + ",\"s\":" +
                                std::to_string(r->snapshot_etag) + "}]";
      if (r->rows_json != want || r->snapshot_etag % 50 != 0) ++bad;
    }
  });
  uint64_t etag = 0;
  for (int b = 0; b < 40; ++b) {
    Batch batch;
    for (int k = 0; k < 50; ++k) {
      ++etag;
      batch.Put(etag, std::string("d").append(std::to_string(etag)), R"J({"v":1})J");
    }
    std::vector<IndexError> errors;
    REQUIRE((*idx)->ApplyBatch(batch.changes(), etag, errors).ok());
  }
  done = true;
  reader.join();
  CHECK(bad.load() == 0);
  CHECK(reads.load() > 0);
}
