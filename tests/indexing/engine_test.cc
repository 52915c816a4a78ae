// Unit tests of the indexing engine with a real store and the map/reduce
// kind: lifecycle, the worker following the change feed, progress and
// errors, pause/resume/reset, persistence, and waits on progress.
#include <catch2/catch.hpp>

#include <fstream>

#include <rapidjson/document.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "indexing/error_log.h"
#include "indexing/index_engine.h"
#include "mapreduce/mapreduce_index.h"
#include "storage/document_store.h"

using namespace corvid;
using namespace std::chrono_literals;

namespace {

constexpr const char* kByMonth = R"json({"type":"mapreduce","collection":"users",
  "map":{"month":"substr(createdAt, 0, 7)","score":"score"},
  "groupBy":["month"],
  "reduce":{"total":"sum(score)","users":"count()"}})json";

struct Env {
  std::filesystem::path dir;
  std::unique_ptr<storage::DocumentStore> store;
  std::unique_ptr<indexing::IndexEngine> engine;

  Env() {
    static std::atomic<int> counter{0};
    dir = std::filesystem::temp_directory_path() /
          ("corvid-engine-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(dir);
    Open();
  }
  ~Env() {
    Close();
    std::filesystem::remove_all(dir);
  }
  void Open() {
    storage::StoreOptions so;
    so.map_size = size_t{1} << 30;
    store = std::move(storage::DocumentStore::Open((dir / "store").string(), so)).value();
    indexing::EngineOptions eo;
    eo.batch_max_docs = 7;  // many small batches
    engine = std::move(indexing::IndexEngine::Open((dir / "indexes").string(), *store, eo)).value();
  }
  void Close() {
    engine.reset();
    store.reset();
  }

  uint64_t Put(const std::string& coll, const std::string& id, const std::string& body) {
    storage::WriteRequest req;
    storage::WriteOp op;
    op.collection = coll;
    op.id = id;
    op.body = body;
    req.ops.push_back(std::move(op));
    auto r = store->Write(std::move(req));
    REQUIRE(r.status.ok());
    return r.last_etag;
  }
  uint64_t Delete(const std::string& coll, const std::string& id) {
    storage::WriteRequest req;
    storage::WriteOp op;
    op.kind = storage::WriteKind::kDelete;
    op.collection = coll;
    op.id = id;
    req.ops.push_back(std::move(op));
    auto r = store->Write(std::move(req));
    REQUIRE(r.status.ok());
    return r.last_etag;
  }

  // Waits (bounded) until the index has processed through `etag`.
  void WaitFor(const std::string& name, uint64_t etag) {
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = engine->Reader(name);
      REQUIRE(r.ok());
      if (r->indexed_etag >= etag) return;
      std::this_thread::sleep_for(2ms);
    }
    FAIL("index " << name << " did not reach etag " << etag);
  }

  // After a PUT that replaced the definition: until the replacement has
  // caught up the old definition answers; then the name switches.
  void WaitForDefinition(const std::string& name, std::string_view json) {
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      auto d = engine->Definition(name);
      REQUIRE(d.ok());
      if (*d == json) return;
      auto p = engine->Progress(name);
      REQUIRE(p.ok());
      if (!p->replacing) {
        // The replacement caught up between the two reads: the name has
        // switched, so the definition is the new one now.
        auto now = engine->Definition(name);
        REQUIRE(now.ok());
        REQUIRE(*now == json);
        return;
      }
      std::this_thread::sleep_for(2ms);  // the new definition builds beside the old one
    }
    FAIL("index " << name << " did not switch to its new definition");
  }

  // Pauses and resets the index; returns its progress right after Reset
  // returned (which it does once the state is dropped).
  indexing::IndexProgress ResetWhilePaused(const std::string& name) {
    REQUIRE(engine->Pause(name).ok());
    REQUIRE(engine->Reset(name).ok());
    auto p = engine->Progress(name);
    REQUIRE(p.ok());
    return *p;
  }

  rapidjson::Document Rows(const std::string& name, std::vector<std::pair<std::string, std::string>> params = {}) {
    auto r = engine->Reader(name);
    REQUIRE(r.ok());
    REQUIRE(r->mapreduce);
    auto result = r->mapreduce->Query(params);
    REQUIRE(result.ok());
    rapidjson::Document d;
    d.Parse(result->rows_json.c_str());
    REQUIRE(d.IsArray());
    return d;
  }
};

std::string UserDoc(const std::string& month, int score) {
  return R"({"createdAt":")" + month + R"(-15","score":)" + std::to_string(score) + "}";
}

}  // namespace

TEST_CASE("an index follows its collection through inserts, updates and deletes", "[indexing]") {
  Env env;
  env.Put("users", "0", UserDoc("2024-01", 5));  // before the index exists
  REQUIRE(env.engine->PutIndex("by_month", kByMonth).value() == indexing::PutOutcome::kCreated);
  for (int i = 1; i <= 20; ++i) env.Put("users", std::to_string(i), UserDoc(i % 2 ? "2024-01" : "2024-02", i));
  env.Put("other", "x", UserDoc("2024-01", 1000));  // another collection: ignored
  uint64_t last = env.Put("users", "1", UserDoc("2024-03", 100));  // moves from 01 to 03
  last = std::max(last, env.Delete("users", "2"));
  env.WaitFor("by_month", last);

  auto rows = env.Rows("by_month");
  REQUIRE(rows.Size() == 3);
  // 2024-01: docs 0 (5) and odd 3..19 (sum 99) ; 2024-02: even 4..20 (sum 108); 2024-03: doc 1 (100)
  CHECK(std::string(rows[0]["month"].GetString()) == "2024-01");
  CHECK(rows[0]["total"].GetInt64() == 5 + 99);
  CHECK(rows[0]["users"].GetInt64() == 10);
  CHECK(rows[1]["total"].GetInt64() == 108);
  CHECK(rows[1]["users"].GetInt64() == 9);
  CHECK(rows[2]["total"].GetInt64() == 100);

  auto p = env.engine->Progress("by_month");
  REQUIRE(p.ok());
  CHECK(p->state == indexing::IndexState::kIdle);
  CHECK(p->backlog == 0);
  CHECK(p->progress == 1.0);
  CHECK_FALSE(p->stale);
  CHECK(p->entries == 3);
  CHECK(p->last_indexed_etag >= last);
  CHECK(p->collection == "users");
  CHECK(p->type == indexing::IndexType::kMapReduce);
  CHECK(p->indexed_docs_total >= 21);
  CHECK(p->disk_bytes > 0);
}

TEST_CASE("definitions: create, unchanged, replace, delete, invalid", "[indexing]") {
  Env env;
  CHECK(env.engine->PutIndex("a", kByMonth).value() == indexing::PutOutcome::kCreated);
  // Same meaning, other key order and spacing: unchanged.
  const char* reordered = R"json({"collection":"users","type":"mapreduce","groupBy":["month"],
    "reduce":{"users":"count()","total":"sum(score)"},"map":{"score":"score","month":"substr(createdAt, 0, 7)"}})json";
  CHECK(env.engine->PutIndex("a", reordered).value() == indexing::PutOutcome::kUnchanged);

  uint64_t e = env.Put("users", "1", UserDoc("2024-05", 7));
  env.WaitFor("a", e);
  CHECK(env.Rows("a")[0]["total"].GetInt64() == 7);

  const char* by_year = R"json({"type":"mapreduce","collection":"users",
    "map":{"year":"substr(createdAt, 0, 4)","score":"score"},"groupBy":["year"],"reduce":{"best":"max(score)"}})json";
  CHECK(env.engine->PutIndex("a", by_year).value() == indexing::PutOutcome::kReplaced);
  env.WaitForDefinition("a", by_year);
  env.WaitFor("a", e);
  auto rows = env.Rows("a");
  REQUIRE(rows.Size() == 1);
  CHECK(std::string(rows[0]["year"].GetString()) == "2024");
  CHECK(rows[0]["best"].GetInt64() == 7);

  CHECK(env.engine->Names() == std::vector<std::string>{"a"});
  CHECK(env.engine->DeleteIndex("a").ok());
  CHECK(env.engine->DeleteIndex("a").code() == StatusCode::kNotFound);
  CHECK(env.engine->Reader("a").status().code() == StatusCode::kNotFound);
  CHECK_FALSE(std::filesystem::exists(env.dir / "indexes" / "a"));

  CHECK(env.engine->PutIndex("bad/name", kByMonth).status().code() == StatusCode::kInvalidArgument);
  CHECK(env.engine->PutIndex(".hidden", kByMonth).status().code() == StatusCode::kInvalidArgument);
  CHECK(env.engine->PutIndex("x", R"({"type":"nope","collection":"c"})").status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(env.engine->PutIndex("x", R"({"collection":"c"})").status().code() == StatusCode::kInvalidArgument);
  CHECK(env.engine->PutIndex("x", "[]").status().code() == StatusCode::kInvalidArgument);
  // A key given twice (which of the two counts would depend on the
  // reader), at any depth, for either kind; a collection no document can
  // be written to.
  auto message = [&](const std::string& json) {
    auto r = env.engine->PutIndex("x", json);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    return r.status().message();
  };
  CHECK_THAT(message(R"({"type":"search","collection":"c","fields":{"t":{}},"store":["t"],"store":"*"})"),
             Catch::Contains("store: the key appears twice"));
  CHECK_THAT(message(R"({"type":"search","collection":"c","fields":{"t":{"boost":2,"boost":3}}})"),
             Catch::Contains("fields.t.boost: the key appears twice"));
  CHECK_THAT(message(R"json({"type":"mapreduce","collection":"users","collection":"other","map":{"m":"substr(createdAt, 0, 7)"},"groupBy":["m"],"reduce":{"n":"count()"}})json"),
             Catch::Contains("collection: the key appears twice"));
  CHECK_THAT(message(R"({"type":"search","collection":")" + std::string(513, 'c') + R"(","fields":{"t":{}}})"),
             Catch::Contains("collection: the name must be 1 to 512 bytes"));
  CHECK(env.engine->PutIndex("x", R"({"type":"search","collection":")" + std::string(512, 'c') + R"(","fields":{"t":{}}})").ok());
  CHECK(env.engine->DeleteIndex("x").ok());
  CHECK(env.engine->Names().empty());
}

TEST_CASE("indexes and their progress survive a restart", "[indexing]") {
  Env env;
  REQUIRE(env.engine->PutIndex("m", kByMonth).ok());
  uint64_t e = 0;
  for (int i = 0; i < 30; ++i) e = env.Put("users", std::to_string(i), UserDoc("2023-12", 1));
  env.WaitFor("m", e);
  env.Close();
  env.Open();
  CHECK(env.engine->Names() == std::vector<std::string>{"m"});
  auto r = env.engine->Reader("m");
  REQUIRE(r.ok());
  CHECK(r->indexed_etag >= e);  // resumed from its durable etag, not from 0
  CHECK(env.Rows("m")[0]["users"].GetInt64() == 30);
  e = env.Put("users", "new", UserDoc("2023-12", 1));
  env.WaitFor("m", e);
  CHECK(env.Rows("m")[0]["users"].GetInt64() == 31);
}

// A backup lists the indexes, then copies each: an index redefined (its
// old version's files removed) or deleted in between must not fail it. The
// router fuzzer found the first as a 500 from GET /admin/backup.
TEST_CASE("index snapshots while indexes are redefined and deleted", "[indexing]") {
  Env env;
  const std::string by_year = R"json({"type":"mapreduce","collection":"users",
    "map":{"year":"substr(createdAt, 0, 4)","score":"score"},"groupBy":["year"],"reduce":{"best":"max(score)"}})json";
  REQUIRE(env.engine->PutIndex("keep", kByMonth).ok());
  for (int i = 0; i < 20; ++i) env.Put("users", std::to_string(i), UserDoc("2024-0" + std::to_string(1 + i % 9), i));
  std::atomic<bool> done{false};
  std::thread churn([&] {
    for (int i = 0; i < 200; ++i) {
      // An empty collection's replacement switches at once; these have 20
      // documents, so the switcher swaps them a moment later.
      (void)env.engine->PutIndex("r", i % 2 ? by_year : kByMonth);
      (void)env.engine->PutIndex("d", kByMonth);
      std::this_thread::sleep_for(1ms);
      (void)env.engine->DeleteIndex("d");
    }
    done = true;
  });
  int snapshots = 0;
  while (!done) {
    auto backups = env.engine->SnapshotIndexes();
    REQUIRE(backups.ok());
    bool kept = false;
    for (const auto& b : *backups) {
      kept = kept || b.name == "keep";
      CHECK((b.name == "keep" || b.name == "r" || b.name == "d"));
      CHECK_FALSE(b.state.files.empty());
    }
    CHECK(kept);
    ++snapshots;
  }
  churn.join();
  // The churn really redefined and deleted: "r" comes to answer with its
  // last definition (of 200), "d" is gone.
  env.WaitForDefinition("r", by_year);
  CHECK(env.engine->Reader("d").status().code() == StatusCode::kNotFound);
  CHECK(snapshots > 0);
}

TEST_CASE("pause holds the index back; resume catches up; reset rebuilds", "[indexing]") {
  Env env;
  REQUIRE(env.engine->PutIndex("m", kByMonth).ok());
  uint64_t e = env.Put("users", "a", UserDoc("2024-01", 1));
  env.WaitFor("m", e);
  REQUIRE(env.engine->Pause("m").ok());  // returns after any batch in flight
  for (int i = 0; i < 5; ++i) e = env.Put("users", std::string("p").append(std::to_string(i)), UserDoc("2024-01", 1));
  std::this_thread::sleep_for(50ms);
  auto p = env.engine->Progress("m");
  CHECK(p->state == indexing::IndexState::kPaused);
  CHECK(p->backlog == 5);
  CHECK(p->stale);
  CHECK(env.Rows("m")[0]["users"].GetInt64() == 1);

  REQUIRE(env.engine->Resume("m").ok());
  env.WaitFor("m", e);
  CHECK(env.Rows("m")[0]["users"].GetInt64() == 6);

  // Reset while paused: the state is dropped (nothing to read, etag 0)...
  auto before_reset = env.engine->Reader("m");
  REQUIRE(before_reset.ok());
  CHECK_FALSE(env.engine->ResetSince(*before_reset));
  CHECK(env.engine->AnswerEtag(*before_reset, 0) == before_reset->indexed_etag);
  CHECK(env.engine->AnswerEtag(*before_reset, before_reset->indexed_etag + 5) == before_reset->indexed_etag + 5);
  auto cleared = env.ResetWhilePaused("m");
  // ...which a reader taken before can tell (its etag no longer holds),
  // and one taken after cannot.
  CHECK(env.engine->ResetSince(*before_reset));
  // An answer read through that reader covers only its snapshot's etag
  // (here the cleared state's, 0), not the reader's.
  CHECK(before_reset->indexed_etag > 0);
  CHECK(env.engine->AnswerEtag(*before_reset, 0) == 0);
  auto after_reset = env.engine->Reader("m");
  REQUIRE(after_reset.ok());
  CHECK(after_reset->indexed_etag == 0);
  CHECK_FALSE(env.engine->ResetSince(*after_reset));
  CHECK(cleared.last_indexed_etag == 0);
  CHECK(cleared.entries == 0);
  CHECK(env.Rows("m").Size() == 0);
  // ...and after Resume it rebuilds from etag 0 to the same answer.
  REQUIRE(env.engine->Resume("m").ok());
  env.WaitFor("m", e);
  CHECK(env.Rows("m")[0]["users"].GetInt64() == 6);
  CHECK(env.engine->Pause("zzz").code() == StatusCode::kNotFound);
  // A replaced or deleted index counts as reset for its old readers.
  auto old_reader = env.engine->Reader("m");
  REQUIRE(old_reader.ok());
  const std::string spaced = std::string("{ ").append(kByMonth + 1);
  REQUIRE(env.engine->PutIndex("m", spaced).ok());
  CHECK_FALSE(env.engine->ResetSince(*old_reader));  // the same JSON: unchanged
  std::string by_month_max(kByMonth);
  by_month_max.replace(by_month_max.find("count()"), 7, "max(score)");
  REQUIRE(env.engine->PutIndex("m", by_month_max).ok());
  env.WaitForDefinition("m", by_month_max);
  CHECK(env.engine->ResetSince(*old_reader));
  auto new_reader = env.engine->Reader("m");
  REQUIRE(new_reader.ok());
  REQUIRE(env.engine->DeleteIndex("m").ok());
  CHECK(env.engine->ResetSince(*new_reader));
}

TEST_CASE("a paused index stays paused through a redefinition until Resume", "[indexing]") {
  Env env;
  REQUIRE(env.engine->PutIndex("m", kByMonth).ok());
  uint64_t e = env.Put("users", "a", UserDoc("2024-01", 1));
  env.WaitFor("m", e);
  REQUIRE(env.engine->Pause("m").ok());
  e = env.Put("users", "b", UserDoc("2024-01", 2));
  std::string by_month_max(kByMonth);
  by_month_max.replace(by_month_max.find("count()"), 7, "max(score)");
  REQUIRE(env.engine->PutIndex("m", by_month_max).value() == indexing::PutOutcome::kReplaced);
  // Both versions hold still: the replacement neither indexes nor switches.
  std::this_thread::sleep_for(200ms);
  auto p = env.engine->Progress("m");
  REQUIRE(p.ok());
  CHECK(p->state == indexing::IndexState::kPaused);
  REQUIRE(p->replacing);
  CHECK(p->replacing->state == indexing::IndexState::kPaused);
  CHECK(p->replacing->last_indexed_etag == 0);
  CHECK(env.engine->Definition("m").value() == kByMonth);
  CHECK(env.Rows("m")[0]["users"].GetInt64() == 1);
  // Resume: the replacement builds, switches, and is not paused.
  REQUIRE(env.engine->Resume("m").ok());
  env.WaitForDefinition("m", by_month_max);
  env.WaitFor("m", e);
  auto after = env.engine->Progress("m");
  REQUIRE(after.ok());
  CHECK(after->state != indexing::IndexState::kPaused);
  CHECK(env.Rows("m")[0]["users"].GetDouble() == 2);
}

TEST_CASE("documents that fail to map are recorded as index errors", "[indexing]") {
  Env env;
  REQUIRE(env.engine->PutIndex("m", kByMonth).ok());
  env.Put("users", "ok", UserDoc("2024-01", 3));
  uint64_t e = env.Put("users", "bad", R"({"createdAt":"2024-01-02","score":"lots"})");
  env.WaitFor("m", e);
  auto p = env.engine->Progress("m");
  REQUIRE(p.ok());
  CHECK(p->error_count >= 1);
  REQUIRE_FALSE(p->recent_errors.empty());
  CHECK(p->recent_errors.back().id == "bad");
  CHECK(p->recent_errors.back().etag == e);
  CHECK_FALSE(p->recent_errors.back().message.empty());
  CHECK(env.Rows("m")[0]["total"].GetInt64() == 3);

  // Errors survive a restart (the document is not re-indexed to find them again).
  const uint64_t count = p->error_count;
  env.Close();
  env.Open();
  auto again = env.engine->Progress("m");
  REQUIRE(again.ok());
  CHECK(again->error_count == count);
  REQUIRE_FALSE(again->recent_errors.empty());
  CHECK(again->recent_errors.back().id == "bad");
  CHECK(again->recent_errors.back().message == p->recent_errors.back().message);
  // A reset forgets them, and rebuilding finds the bad document again.
  auto cleared = env.ResetWhilePaused("m");
  CHECK(cleared.last_indexed_etag == 0);
  CHECK(cleared.error_count == 0);
  CHECK(cleared.recent_errors.empty());
  REQUIRE(env.engine->Resume("m").ok());
  env.WaitFor("m", e);
  CHECK(env.engine->Progress("m")->error_count == count);
  // A later batch's errors are added to the recent ones, each once.
  const uint64_t e2 = env.Put("users", "bad2", R"({"createdAt":"2024-01-03","score":"more"})");
  env.WaitFor("m", e2);
  auto later = env.engine->Progress("m");
  REQUIRE(later.ok());
  CHECK(later->error_count == count + 1);
  REQUIRE(later->recent_errors.size() == count + 1);
  CHECK(later->recent_errors.back().id == "bad2");
  CHECK(later->recent_errors[later->recent_errors.size() - 2].id == "bad");
}

TEST_CASE("the error log keeps a batch run again once", "[indexing]") {
  Env env;
  const auto path = env.dir / "errors-test.log";
  const auto now = std::chrono::system_clock::now();
  using indexing::ErrorLog;
  using indexing::RecordedError;
  const std::vector<RecordedError> batch = {
      {5, "a", "bad value", now}, {5, "a", "another bad value", now}, {7, "b", "bad json", now}};
  {
    ErrorLog log(path);
    log.Append(batch);
    CHECK(log.count() == 3);  // two errors of one document version are both kept
    log.Append(batch);        // the batch ran again (its commit failed, or the process died)
    CHECK(log.count() == 3);
    log.Append(std::vector<RecordedError>{{9, "c", "bad json", now}});
    CHECK(log.count() == 4);
  }
  ErrorLog reloaded(path);
  CHECK(reloaded.count() == 4);
  REQUIRE(reloaded.recent().size() == 4);
  CHECK(reloaded.recent().back().id == "c");
  reloaded.Append(std::vector<RecordedError>{{9, "c", "bad json", now}});  // re-run after a restart
  CHECK(reloaded.count() == 4);
  reloaded.Clear();
  reloaded.Append(batch);  // a reset starts over
  CHECK(reloaded.count() == 3);
}

TEST_CASE("an error log whose last line a crash tore keeps the errors appended after it", "[indexing]") {
  Env env;
  const auto path = env.dir / "torn-errors.log";
  const auto now = std::chrono::system_clock::now();
  {
    std::ofstream out(path, std::ios::binary);
    out << R"({"etag":5,"id":"a","message":"m","at":1})" << "\n" << R"({"etag":6,"id":"b)";  // died mid-append
  }
  {
    indexing::ErrorLog log(path);
    CHECK(log.count() == 1);
    log.Append(std::vector<indexing::RecordedError>{{6, "b", "bad json", now}});  // the batch ran again
    CHECK(log.count() == 2);
  }
  indexing::ErrorLog reloaded(path);
  CHECK(reloaded.count() == 2);
  REQUIRE(reloaded.recent().size() == 2);
  CHECK(reloaded.recent().back().id == "b");
}

TEST_CASE("progress listeners hear every batch", "[indexing]") {
  Env env;
  REQUIRE(env.engine->PutIndex("m", kByMonth).ok());
  std::atomic<uint64_t> heard{0};
  uint64_t h = env.engine->AddProgressListener([&](const std::string& name, uint64_t etag) {
    if (name == "m") heard = std::max(heard.load(), etag);
  });
  uint64_t e = env.Put("users", "1", UserDoc("2024-01", 1));
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (heard.load() < e && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  CHECK(heard.load() >= e);
  env.engine->RemoveProgressListener(h);
  // A write to another collection still advances the index's etag.
  uint64_t e2 = env.Put("elsewhere", "1", "{}");
  env.WaitFor("m", e2);
  auto r = env.engine->Reader("m");
  CHECK_FALSE(env.engine->IsStale(*r, r->indexed_etag));
}
