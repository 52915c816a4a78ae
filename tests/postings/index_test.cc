// SearchIndex lifecycle and request features: definition validation,
// updates/deletes, reopen, corrupt files, merges (also with batches applied
// while a background merge runs), sort, facets, stored fields, highlights,
// filters and request errors.
#include <xxhash.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <span>
#include <thread>

#include "common/utf8.h"
#include "postings/definition.h"
#include "postings/file_util.h"
#include "postings/manifest.h"
#include "postings/search_index.h"
#include "postings/snapshot.h"
#include "tests/postings/test_util.h"

namespace corvid::postings {
namespace {

using testing::ParseHits;
using testing::Store;
using testing::TempDir;

constexpr const char* kDef = R"({"type": "search", "collection": "articles",
  "fields": {"title": {"analyzer": "standard", "boost": 2.0}, "body": {"analyzer": "english"},
             "tags": {"analyzer": "keyword", "facet": true}, "score": {"type": "number"},
             "createdAt": {"type": "date"}, "author.name": {}},
  "store": ["title", "score"]})";

std::shared_ptr<const SearchDefinition> Def(const char* json = kDef) {
  auto d = SearchDefinition::Compile(json);
  REQUIRE(d.ok());
  return *d;
}

std::string Err(const std::string& json) {
  auto d = SearchDefinition::Compile(json);
  if (d.ok()) return "ok";
  CHECK(d.status().code() == StatusCode::kInvalidArgument);
  return d.status().message();
}

TEST_CASE("definition validation names the field", "[postings]") {
  CHECK(Err(kDef) == "ok");
  CHECK_THAT(Err("[]"), Catch::Contains("definition: must be a JSON object"));
  CHECK_THAT(Err("{"), Catch::Contains("invalid JSON"));
  CHECK_THAT(Err(R"({"type":"mapreduce","collection":"a","fields":{"x":{}}})"), Catch::Contains("type: must be \"search\""));
  CHECK_THAT(Err(R"({"type":"search","fields":{"x":{}}})"), Catch::Contains("collection: must be"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a"})"), Catch::Contains("fields: must be a non-empty object"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"body":{"analyzer":"englsh"}}})"),
             Catch::Contains("fields.body.analyzer: unknown analyzer 'englsh'"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"t":{"boost":0}}})"), Catch::Contains("fields.t.boost: must be a number > 0"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"t":{"boost":"2"}}})"), Catch::Contains("fields.t.boost"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"t":{"boost":1e31}}})"), Catch::Contains("fields.t.boost: must be a number > 0 and <= 1e30"));
  CHECK(Err(R"({"type":"search","collection":"a","fields":{"t":{"boost":1e30}}})") == "ok");
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"t":{}},"store":["t","a..b"]})"),
             Catch::Contains("store: a dotted path must not have empty components ('a..b')"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"t":{"type":"blob"}}})"), Catch::Contains("fields.t.type: unknown type 'blob'"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"t":{"type":"number","facet":true}}})"), Catch::Contains("fields.t: a number field takes no"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"t":{"facet":1}}})"), Catch::Contains("fields.t.facet: must be true or false"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"t":{"colour":1}}})"), Catch::Contains("fields.t.colour: unknown option"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"a..b":{}}})"), Catch::Contains("fields.a..b: a dotted path must not have empty"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"t":3}})"), Catch::Contains("fields.t: must be an object"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"t":{}},"store":5})"), Catch::Contains("store: must be"));
  CHECK_THAT(Err(R"({"type":"search","collection":"a","fields":{"t":{}},"extra":1})"), Catch::Contains("extra: unknown key"));
  CHECK(Err(R"({"type":"search","collection":"a","fields":{"t":{}},"store":"*"})") == "ok");
  CHECK(Def()->Fingerprint() != Def(R"({"type":"search","collection":"a","fields":{"t":{}}})")->Fingerprint());
}

// A definition's fingerprint names its segments on disk: when it changes,
// every existing index of that definition rebuilds. It must change when
// the terms an analyzer stores change (its revision: "folding" is at 2,
// ø → o and friends), and must not change otherwise. Pinned values: a
// change here is a deliberate rebuild of users' indexes.
TEST_CASE("definition fingerprints: pinned, and an analyzer revision changes them", "[postings]") {
  const auto standard = Def(R"({"type":"search","collection":"a","fields":{"t":{}}})");
  const auto folding = Def(R"({"type":"search","collection":"a","fields":{"t":{"analyzer":"folding"}}})");
  CHECK(standard->Fingerprint() == 16432280050948639561ull);
  CHECK(standard->Fingerprint() == Fnv1a64("search|a|t:0:standard:1.000000:0;"));  // revision 1 adds nothing
  CHECK(folding->Fingerprint() == 15574743535756568409ull);
  CHECK(folding->Fingerprint() != Fnv1a64("search|a|t:0:folding:1.000000:0;"));  // what revision 1 had
  // keyword 2 indexes "" (it made no term of it); a dotted path reads keys
  // holding dots: both rebuild the indexes they describe.
  CHECK(Def(R"({"type":"search","collection":"a","fields":{"t":{"analyzer":"keyword"}}})")->Fingerprint() !=
        Fnv1a64("search|a|t:0:keyword:1.000000:0;"));
  CHECK(Def(R"({"type":"search","collection":"a","fields":{"a.b":{}}})")->Fingerprint() !=
        Fnv1a64("search|a|a.b:0:standard:1.000000:0;"));
  CHECK(Def(R"({"type":"search","collection":"a","fields":{"ab":{}}})")->Fingerprint() ==
        Fnv1a64("search|a|ab:0:standard:1.000000:0;"));
  // A number field holds integers beyond 2^53 exactly: its older segments,
  // which held doubles, rebuild. A date field's do not.
  CHECK(Def(R"({"type":"search","collection":"a","fields":{"n":{"type":"number"}}})")->Fingerprint() !=
        Fnv1a64("search|a|n:1::1.000000:0;"));
  CHECK(Def(R"({"type":"search","collection":"a","fields":{"n":{"type":"date"}}})")->Fingerprint() ==
        Fnv1a64("search|a|n:2::1.000000:0;"));
  // Stored paths keep the digits of integers beyond 64 bits: segments that
  // stored their doubles rebuild. "*" is not copied into segments.
  CHECK(Def(R"({"type":"search","collection":"a","fields":{"t":{}},"store":["t"]})")->Fingerprint() ==
        Fnv1a64("search|a|t:0:standard:1.000000:0;t,digits2;"));
  CHECK(Def(R"({"type":"search","collection":"a","fields":{"t":{}},"store":"*"})")->Fingerprint() ==
        Fnv1a64("search|a|t:0:standard:1.000000:0;*"));
}

TEST_CASE("ISO-8601 dates", "[postings]") {
  CHECK(*ParseIsoDate("1970-01-01") == 0);
  CHECK(*ParseIsoDate("1970-01-02T00:00:00Z") == 86400000.0);
  CHECK(*ParseIsoDate("1970-01-01T01:00:00+01:00") == 0);
  CHECK(*ParseIsoDate("2024-03-17T10:20:30.5Z") == *ParseIsoDate("2024-03-17T10:20:30Z") + 500);
  CHECK(*ParseIsoDate("2024") == *ParseIsoDate("2024-01-01"));
  CHECK(*ParseIsoDate("2000-02-29") > 0);
  CHECK(!ParseIsoDate("2001-02-29"));
  CHECK(!ParseIsoDate("2024-13-01"));
  CHECK(!ParseIsoDate("2024-01-01T25:00"));
  CHECK(!ParseIsoDate("yesterday"));
  CHECK(!ParseIsoDate("2024-01-01Tx"));
  // Hour-only date-times (what date_trunc('hour', d) makes).
  CHECK(*ParseIsoDate("2024-03-17T10") == *ParseIsoDate("2024-03-17T10:00:00Z"));
  CHECK(*ParseIsoDate("2024-03-17T10+01:00") == *ParseIsoDate("2024-03-17T09:00:00Z"));
  // The end of the period the text names (a fraction of a second: a point).
  const std::pair<const char*, const char*> ends[] = {
      {"2024", "2025-01-01"},
      {"2024-12", "2025-01-01"},
      {"2024-02", "2024-03-01"},
      {"2024-02-29", "2024-03-01"},
      {"2024-03-17T10+01:00", "2024-03-17T10:00:00Z"},
      {"2024-03-17T10:20", "2024-03-17T10:21:00Z"},
      {"2024-03-17T10:20:30Z", "2024-03-17T10:20:31Z"},
      {"2024-03-17T10:20:30.250Z", "2024-03-17T10:20:30.250Z"}};
  for (const auto& [text, end] : ends) {
    INFO(text);
    double next = 0;
    REQUIRE(ParseIsoDate(text, &next));
    CHECK(next == *ParseIsoDate(end));
  }
}

struct Fixture {
  TempDir dir;
  Store store;
  std::unique_ptr<SearchIndex> idx;
  std::shared_ptr<const SearchDefinition> def = Def();
  Fixture() { Reopen(); }
  void Reopen() {
    idx.reset();
    auto r = SearchIndex::Open(dir.path(), def);
    REQUIRE(r.ok());
    idx = std::move(r).value();
  }
  // Runs r; an error fails the test.
  SearchResult Run(const SearchRequest& r) {
    auto res = idx->Search(r);
    REQUIRE(res.ok());
    return *std::move(res);
  }
  SearchResult Q(const std::string& q, size_t limit = 100) {
    SearchRequest r;
    r.q = q;
    r.limit = limit;
    return Run(r);
  }
  std::vector<std::string> Ids(const std::string& q) {
    std::vector<std::string> out;
    for (auto& h : ParseHits(Q(q).hits_json)) out.push_back(h.id);
    std::sort(out.begin(), out.end());
    return out;
  }
};

TEST_CASE("MANIFEST: a version no build wrote is damage unless its checksum is sound", "[postings]") {
  Bitmap deleted(roaring_bitmap_create());
  const ManifestEntry entries[] = {{7, 100, deleted.get()}};
  const std::string m = EncodeManifest(42, 1000, 8, entries);
  REQUIRE(DecodeManifest(m).ok());
  auto with_version = [&](uint32_t version, bool resum) {
    std::string other = m;
    std::memcpy(other.data() + 8, &version, 4);
    if (resum) {
      const uint64_t sum = XXH3_64bits(other.data(), other.size() - 8);
      std::memcpy(other.data() + other.size() - 8, &sum, 8);
    }
    auto d = DecodeManifest(other);
    REQUIRE(!d.ok());
    return d.status();
  };
  CHECK(IsOutdated(with_version(1, false)));  // the version before, whose checksum was another
  CHECK(IsOutdated(with_version(3, true)));   // a newer build's, sound
  for (uint32_t flipped : {3u, 0u, 2u ^ 0x100u}) {  // one flipped bit
    const Status st = with_version(flipped, false);
    CHECK(!IsOutdated(st));
    CHECK(st.message().find("checksum mismatch") != std::string::npos);
  }
}

TEST_CASE("index updates, deletes, reopen", "[postings]") {
  Fixture fx;
  CHECK(fx.idx->LastAppliedEtag() == 0);
  fx.store.Put("1", R"({"title": "The quick brown fox", "body": "jumps over the lazy dogs", "tags": ["animal", "fast"], "score": 5, "createdAt": "2024-01-02"})");
  fx.store.Put("2", R"({"title": "Lazy afternoon", "body": "a dog sleeping", "tags": "animal", "score": 7.5, "createdAt": "2023-06-01T12:00:00Z"})");
  fx.store.Put("3", R"({"title": "Nothing here", "author": {"name": "Zoë Quick"}, "score": "oops", "body": [{"x": "fox"}, "sleeping"]})");
  std::vector<IndexError> errors;
  REQUIRE(fx.store.Flush(*fx.idx, &errors).ok());
  REQUIRE(errors.size() == 2);
  // An object where text is expected is skipped with an error; the array's
  // other values are indexed.
  CHECK(errors[0].message == "fields.body: an object, not text; value skipped");
  CHECK_THAT(errors[1].message, Catch::Contains("fields.score: not a number"));
  CHECK(fx.idx->LastAppliedEtag() == 3);
  CHECK(fx.idx->LiveDocuments() == 3);
  CHECK(fx.Ids("quick") == std::vector<std::string>{"1", "3"});
  CHECK(fx.Ids("dog") == std::vector<std::string>{"1", "2"});  // english stems dogs -> dog
  CHECK(fx.Ids("body:sleep") == std::vector<std::string>{"2", "3"});
  CHECK(fx.Ids("body:fox").empty());
  CHECK(fx.Ids("body:dogs") == std::vector<std::string>{"1", "2"});
  CHECK(fx.Ids("title:dogs").empty());
  CHECK(fx.Ids("tags:animal") == std::vector<std::string>{"1", "2"});
  CHECK(fx.Ids("score:[5 TO 7.5]") == std::vector<std::string>{"1", "2"});
  CHECK(fx.Ids("score:{5 TO 7.5]") == std::vector<std::string>{"2"});
  CHECK(fx.Ids("createdAt:[2024-01-01 TO *]") == std::vector<std::string>{"1"});
  CHECK(fx.Ids("author.name:zoe").empty());
  CHECK(fx.Ids("author.name:zoë") == std::vector<std::string>{"3"});
  CHECK(fx.Q("*").total == 3);
  CHECK(fx.Q("-quick").total == 1);

  // Update and delete in one batch; an id twice in a batch: last wins.
  fx.store.Put("1", R"({"title": "Slow green turtle"})");
  fx.store.Delete("2");
  fx.store.Put("4", R"({"title": "first version"})");
  fx.store.Put("4", R"({"title": "second version"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  CHECK(fx.idx->LiveDocuments() == 3);
  CHECK(fx.Ids("quick") == std::vector<std::string>{"3"});
  CHECK(fx.Ids("turtle") == std::vector<std::string>{"1"});
  CHECK(fx.Ids("dog").empty());
  CHECK(fx.Ids("first").empty());
  CHECK(fx.Ids("second") == std::vector<std::string>{"4"});
  CHECK(fx.Q("*").total == 3);
  // Replaying a batch is harmless.
  std::vector<IndexError> e2;
  DocChange c{100, "4", false, R"({"title": "second version"})"};
  REQUIRE(fx.idx->ApplyBatch(std::span(&c, 1), 100, e2).ok());
  REQUIRE(fx.idx->ApplyBatch(std::span(&c, 1), 100, e2).ok());
  CHECK(fx.Q("second").total == 1);
  auto before = fx.Q("turtle OR second OR quick");
  fx.Reopen();
  CHECK(fx.idx->LastAppliedEtag() == 100);
  CHECK(fx.idx->LiveDocuments() == 3);
  auto after = fx.Q("turtle OR second OR quick");
  CHECK(after.hits_json == before.hits_json);
  CHECK(fx.idx->DiskBytes() > 0);

  SECTION("Clear") {
    REQUIRE(fx.idx->Clear().ok());
    CHECK(fx.idx->LastAppliedEtag() == 0);
    CHECK(fx.Q("*").total == 0);
    fx.Reopen();
    CHECK(fx.Q("*").total == 0);
  }
  SECTION("a corrupt manifest rebuilds") {
    fx.idx.reset();
    std::fstream f(fx.dir.path() + "/MANIFEST", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    f.put('\x7f');
    f.close();
    fx.Reopen();
    CHECK(fx.idx->LastAppliedEtag() == 0);
    CHECK(fx.Q("*").total == 0);
  }
  SECTION("a corrupt segment rebuilds") {
    fx.idx.reset();
    for (auto& e : std::filesystem::directory_iterator(fx.dir.path())) {
      if (e.path().filename().string().rfind("seg-", 0) != 0) continue;
      std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(100);
      f.put('\x01');
    }
    fx.Reopen();
    CHECK(fx.idx->LastAppliedEtag() == 0);
    CHECK(fx.idx->LiveDocuments() == 0);
    CHECK(fx.idx->DamageFoundAtOpen().find("checksum mismatch") != std::string::npos);
  }
  SECTION("another definition rebuilds, and that is not damage") {
    fx.idx.reset();
    fx.def = Def(R"({"type":"search","collection":"articles","fields":{"title":{}}})");
    fx.Reopen();
    CHECK(fx.idx->LastAppliedEtag() == 0);
    CHECK(fx.idx->DamageFoundAtOpen().empty());
  }
  SECTION("a missing segment file rebuilds") {
    fx.idx.reset();
    for (auto& e : std::filesystem::directory_iterator(fx.dir.path()))
      if (e.path().filename().string().rfind("seg-", 0) == 0) std::filesystem::remove(e.path());
    fx.Reopen();
    CHECK(fx.idx->LastAppliedEtag() == 0);
    CHECK(!fx.idx->DamageFoundAtOpen().empty());
  }
  SECTION("stray files are removed") {
    fx.idx.reset();
    std::ofstream(fx.dir.path() + "/seg-00000000000000ff.cvs") << "junk";
    std::ofstream(fx.dir.path() + "/MANIFEST.tmp") << "junk";
    fx.Reopen();
    CHECK(fx.idx->LastAppliedEtag() == 100);
    CHECK(!std::filesystem::exists(fx.dir.path() + "/seg-00000000000000ff.cvs"));
    CHECK(!std::filesystem::exists(fx.dir.path() + "/MANIFEST.tmp"));
  }
}

TEST_CASE("merges bound the segment count and keep results", "[postings]") {
  Fixture fx;
  for (int b = 0; b < 60; ++b) {
    for (int i = 0; i < 30; ++i) {
      int id = (b * 30 + i) % 1200;  // later batches update earlier docs
      fx.store.Put(std::to_string(id), R"({"title": "w)" + std::to_string(id % 13) + " common\", \"score\": " + std::to_string(id) + "}");
    }
    if (b % 7 == 3)
      for (int i = 0; i < 40; ++i) fx.store.Delete(std::to_string((b * 17 + i) % 1200));
    REQUIRE(fx.store.Flush(*fx.idx).ok());
  }
  WaitForMerges(*fx.idx);
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(fx.dir.path()))
    files += e.path().filename().string().rfind("seg-", 0) == 0;
  CHECK(files <= 20);
  CHECK(fx.idx->LiveDocuments() == fx.store.docs.size());
  CHECK(fx.Q("common").total == fx.store.docs.size());
  size_t w3 = 0;
  for (auto& [id, j] : fx.store.docs) w3 += std::stoi(id) % 13 == 3;
  CHECK(fx.Q("w3").total == w3);
  fx.Reopen();
  CHECK(fx.Q("w3").total == w3);
  CHECK(fx.idx->LiveDocuments() == fx.store.docs.size());
}

size_t SegmentFiles(const std::string& dir) {
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) files += e.path().filename().string().rfind("seg-", 0) == 0;
  return files;
}

// What a reader sees: the totals and hits (ids and scores) of a few queries.
std::string Results(SearchIndex& idx) {
  std::string out;
  for (const char* q : {"*", "common", "w3", "w1 OR w5 OR w12", "\"w4 common\"", "title:w1*", "score:[100 TO 900]",
                        "common -w2"}) {
    SearchRequest r;
    r.q = q;
    r.limit = 50;
    auto res = idx.Search(r);
    REQUIRE(res.ok());
    out += std::string(q) + " " + std::to_string(res->total) + " " + res->hits_json + "\n";
  }
  return out + "live " + std::to_string(idx.LiveDocuments()) + "\n";
}

std::string DocJson(int id, int version) {
  return R"({"title": "w)" + std::to_string((id + version) % 13) + " common w" + std::to_string(id % 5 + 1) +
         R"(", "body": "version )" + std::to_string(version) + "\", \"score\": " + std::to_string(id) + "}";
}

// The same documents indexed from scratch in one batch.
std::string FreshResults(const testing::Store& store, const std::shared_ptr<const SearchDefinition>& def) {
  TempDir dir;
  auto idx = std::move(SearchIndex::Open(dir.path(), def)).value();
  testing::Store one;
  for (const auto& [id, json] : store.docs) one.Put(id, json);
  REQUIRE(one.Flush(*idx).ok());
  return Results(*idx);
}

// Holds the first merge that gets to its commit until Release(); later
// merges go through. Waited() returns once the first one is held.
class FirstMergeHeld {
 public:
  FirstMergeHeld() {
    SetMergeCommitHookForTesting([this] {
      std::unique_lock<std::mutex> l(mu_);
      if (merging_) return;
      merging_ = true;
      cv_.notify_all();
      cv_.wait(l, [&] { return release_; });
    });
  }
  ~FirstMergeHeld() {
    Release();
    SetMergeCommitHookForTesting(nullptr);
  }
  bool Waited() {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(60), [&] { return merging_; });
  }
  void Release() {
    {
      std::lock_guard<std::mutex> l(mu_);
      release_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool merging_ = false, release_ = false;
};

TEST_CASE("batches applied during a merge: its deletes and updates survive the commit", "[postings]") {
  Fixture fx;
  // The first merge stops before its commit until the batches below are in.
  FirstMergeHeld held;
  // Ten segments of 100 documents: one level, so they merge.
  for (int b = 0; b < 10; ++b) {
    for (int i = 0; i < 100; ++i) fx.store.Put(std::to_string(b * 100 + i), DocJson(b * 100 + i, 0));
    REQUIRE(fx.store.Flush(*fx.idx).ok());
  }
  REQUIRE(held.Waited());
  // The merge is built and waiting: update and delete documents of its
  // sources (ApplyBatch does not wait for it), one source entirely.
  for (int i = 0; i < 1000; i += 3) fx.store.Put(std::to_string(i), DocJson(i, 1));
  for (int i = 1; i < 1000; i += 7) fx.store.Delete(std::to_string(i));
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  for (int i = 500; i < 600; ++i) fx.store.Delete(std::to_string(i));
  for (int i = 1000; i < 1050; ++i) fx.store.Put(std::to_string(i), DocJson(i, 0));
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  const std::string expected = FreshResults(fx.store, fx.def);
  CHECK(Results(*fx.idx) == expected);
  held.Release();
  WaitForMerges(*fx.idx);
  CHECK(SegmentFiles(fx.dir.path()) < 5);  // the merge committed
  CHECK(Results(*fx.idx) == expected);
  // Later batches find the merged documents (ids_ moved them).
  for (int i = 0; i < 1000; i += 2) fx.store.Put(std::to_string(i), DocJson(i, 2));
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  WaitForMerges(*fx.idx);
  const std::string expected2 = FreshResults(fx.store, fx.def);
  CHECK(Results(*fx.idx) == expected2);
  fx.Reopen();
  CHECK(Results(*fx.idx) == expected2);
}

TEST_CASE("a merge whose inputs' files are gone reads them through the queries' mappings", "[postings]") {
  // A merge maps its inputs again to read them ahead; the worker may have
  // unlinked one meanwhile (a segment whose every document was deleted).
  Fixture fx;
  FirstMergeHeld held;
  auto flush_ten = [&](int from) {
    for (int b = 0; b < 10; ++b) {
      for (int i = 0; i < 100; ++i) fx.store.Put(std::to_string(from + b * 100 + i), DocJson(from + b * 100 + i, 0));
      REQUIRE(fx.store.Flush(*fx.idx).ok());
    }
  };
  flush_ten(0);
  REQUIRE(held.Waited());
  // The first merge waits to commit: ten more segments, whose files go.
  std::set<std::string> before;
  for (auto& e : std::filesystem::directory_iterator(fx.dir.path())) before.insert(e.path().filename().string());
  flush_ten(1000);
  size_t unlinked = 0;
  for (auto& e : std::filesystem::directory_iterator(fx.dir.path())) {
    const std::string name = e.path().filename().string();
    if (name.rfind("seg-", 0) == 0 && !before.count(name)) unlinked += std::filesystem::remove(e.path());
  }
  REQUIRE(unlinked == 10);
  const std::string expected = FreshResults(fx.store, fx.def);
  CHECK(Results(*fx.idx) == expected);  // the mappings keep their pages
  held.Release();
  WaitForMerges(*fx.idx);
  CHECK(SegmentFiles(fx.dir.path()) <= 2);  // the ten were merged, from their old mappings
  CHECK(Results(*fx.idx) == expected);
  fx.Reopen();  // the manifest names none of the unlinked files
  CHECK(Results(*fx.idx) == expected);
}

TEST_CASE("many small batches with updates and deletes while merges run", "[postings]") {
  Fixture fx;
  std::mt19937 rng(42);
  for (int b = 0; b < 400; ++b) {
    for (int i = 0; i < 25; ++i) {
      const int id = static_cast<int>(rng() % 3000);
      if (rng() % 5 == 0)
        fx.store.Delete(std::to_string(id));
      else
        fx.store.Put(std::to_string(id), DocJson(id, b));
    }
    REQUIRE(fx.store.Flush(*fx.idx).ok());
  }
  const std::string expected = FreshResults(fx.store, fx.def);
  CHECK(Results(*fx.idx) == expected);  // merges may still be running: snapshots are whole
  WaitForMerges(*fx.idx);
  CHECK(SegmentFiles(fx.dir.path()) <= 20);
  CHECK(Results(*fx.idx) == expected);
  fx.Reopen();
  CHECK(Results(*fx.idx) == expected);
  SECTION("Clear during merges") {
    for (int b = 0; b < 30; ++b) {
      for (int i = 0; i < 25; ++i) fx.store.Put(std::to_string(b * 25 + i), DocJson(b, 3));
      REQUIRE(fx.store.Flush(*fx.idx).ok());
    }
    REQUIRE(fx.idx->Clear().ok());
    CHECK(fx.idx->LiveDocuments() == 0);
    WaitForMerges(*fx.idx);
    CHECK(fx.Q("*").total == 0);
    CHECK(SegmentFiles(fx.dir.path()) == 0);
  }
}

TEST_CASE("highlight fragments end between words, or at a character in text without spaces", "[postings]") {
  Fixture fx;
  std::string spaced, cjk;
  for (int i = 0; i < 20; ++i) spaced += "filler words ";
  spaced += "needle";
  for (int i = 0; i < 20; ++i) spaced += " more text";
  for (int i = 0; i < 40; ++i) cjk += "\xE6\x97\xA5\xE6\x9C\xAC";  // 日本, no spaces
  cjk += " needle ";
  for (int i = 0; i < 40; ++i) cjk += "\xE6\x97\xA5\xE6\x9C\xAC";
  fx.store.Put("spaced", R"({"body": ")" + spaced + R"("})");
  fx.store.Put("cjk", R"({"body": ")" + cjk + R"("})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  SearchRequest r;
  r.q = "needle";
  r.highlight = {"body"};
  r.fetch_document = fx.store.Fetcher();
  auto res = fx.Run(r);
  auto hits = ParseHits(res.hits_json);
  REQUIRE(hits.size() == 2);
  for (const auto& h : hits) {
    INFO(h.id);
    REQUIRE(h.highlights.size() == 1);
    const std::string& f = h.highlights[0];
    CHECK(IsValidUtf8(f));
    const std::string ellipsis = "\xE2\x80\xA6";
    REQUIRE(f.starts_with(ellipsis));
    REQUIRE(f.ends_with(ellipsis));
    const std::string inner = f.substr(ellipsis.size(), f.size() - 2 * ellipsis.size());
    if (h.id == "spaced") {
      // Whole words on both sides: the text around the match is cut at spaces.
      CHECK((inner.starts_with("filler ") || inner.starts_with("words ")));
      CHECK((inner.ends_with(" more") || inner.ends_with(" text")));
      CHECK_THAT(inner, Catch::Contains(" <em>needle</em> "));
    } else {
      // No space within reach: cut between characters, with context kept.
      CHECK_THAT(inner, Catch::Contains("\xE6\x9C\xAC <em>needle</em> \xE6\x97\xA5"));
      CHECK(inner.size() > 100);
    }
  }
}

TEST_CASE("highlights mark a phrase's words only where the phrase matches", "[postings]") {
  Fixture fx;
  // body uses the english analyzer: dogs -> dog.
  fx.store.Put("phrase", R"({"body": "The lazy dogs sleep; a dog barks."})");
  fx.store.Put("apart", R"({"body": "A lazy cat and a dog; rust never sleeps."})");
  fx.store.Put("slop", R"({"body": "quick brown fox and then fox jumps quick"})");
  fx.store.Put("once", R"({"body": "one dog only"})");
  fx.store.Put("twice", R"({"body": "dog and dog"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  auto highlights = [&](const std::string& q) {
    SearchRequest r;
    r.q = q;
    r.highlight = {"body"};
    r.fetch_document = fx.store.Fetcher();
    std::map<std::string, std::string> out;
    for (const auto& h : ParseHits(fx.Run(r).hits_json)) out[h.id] = h.highlights.empty() ? "" : h.highlights[0];
    return out;
  };
  auto h = highlights("\"lazy dog\" OR rust");
  REQUIRE(h.size() == 2);
  CHECK(h["phrase"] == "The <em>lazy</em> <em>dogs</em> sleep; a dog barks.");
  CHECK(h["apart"] == "A lazy cat and a dog; <em>rust</em> never sleeps.");  // matched by rust only
  // Slop 1: "quick brown fox" matches; the later "fox ... quick" is in
  // the wrong order and too far apart, so those words are not marked.
  h = highlights("\"quick fox\"~1");
  CHECK(h["slop"] == "<em>quick</em> brown <em>fox</em> and then fox jumps quick");
  // A repeated word takes a position per repetition, as the search does:
  // one "dog" is not "dog dog"~1.
  h = highlights("\"dog dog\"~1 OR only");
  CHECK(h["once"] == "one dog <em>only</em>");
  CHECK(h["twice"] == "<em>dog</em> and <em>dog</em>");
  // A term marks wherever it occurs; the phrase's words only in the phrase.
  h = highlights("\"lazy dog\" barks");
  CHECK(h["phrase"] == "The <em>lazy</em> <em>dogs</em> sleep; a dog <em>barks</em>.");
}

TEST_CASE("sort, facets, fields, highlights, filter", "[postings]") {
  Fixture fx;
  fx.store.Put("a", R"({"title": "red apple", "body": "An apple a day keeps the doctor away. Apples are red.", "tags": ["fruit", "red"], "score": 3})");
  fx.store.Put("b", R"({"title": "green apple", "body": "Green apples are sour.", "tags": ["fruit", "green"], "score": 9})");
  fx.store.Put("c", R"({"title": "red car", "body": "A fast red car.", "tags": ["car", "red"], "score": 1})");
  fx.store.Put("d", R"({"title": "blue sky", "tags": "sky"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  SearchRequest r;
  r.q = "apple OR red OR car";
  r.sort = "-score";
  r.facets = {"tags"};
  r.fetch_document = fx.store.Fetcher();
  auto res = fx.Run(r);
  auto hits = ParseHits(res.hits_json);
  REQUIRE(hits.size() == 3);
  CHECK(hits[0].id == "b");
  CHECK(hits[1].id == "a");
  CHECK(hits[2].id == "c");
  CHECK(res.facets_json == R"({"tags":{"fruit":2,"red":2,"car":1,"green":1}})");
  CHECK_THAT(res.hits_json, Catch::Contains(R"("fields":{"title":"green apple","score":9})"));
  {
    // A field named twice counts (and highlights) once.
    SearchRequest twice = r;
    twice.facets = {"tags", "tags"};
    twice.highlight = {"title", "title"};
    auto res2 = fx.Run(twice);
    CHECK(res2.facets_json == res.facets_json);
    CHECK_THAT(res2.hits_json, Catch::Contains(R"("highlights":{"title":["green <em>apple</em>"]})"));
  }
  r.sort = "tags";
  res = fx.Run(r);
  hits = ParseHits(res.hits_json);
  CHECK(hits[0].id == "c");  // "car" < "fruit"
  r.sort = "";
  r.fields = std::vector<std::string>{"tags"};
  r.highlight = {"body"};
  r.q = "apple";
  res = fx.Run(r);
  hits = ParseHits(res.hits_json);
  REQUIRE(hits.size() == 2);
  for (auto& h : hits) {
    REQUIRE(!h.highlights.empty());
    CHECK_THAT(h.highlights[0], Catch::Contains("<em>"));
  }
  CHECK_THAT(res.hits_json, Catch::Contains("<em>apple</em>"));
  CHECK_THAT(res.hits_json, Catch::Contains("<em>Apples</em>"));
  CHECK_THAT(res.hits_json, Catch::Contains(R"("fields":{"tags":["fruit")"));
  // Filter restricts without scoring.
  SearchRequest f;
  f.q = "apple";
  f.limit = 10;
  auto plain = fx.idx->Search(f);
  f.filter = "score:[5 TO *]";
  auto filtered = fx.idx->Search(f);
  REQUIRE(filtered.ok());
  CHECK(filtered->total == 1);
  auto ph = ParseHits(plain->hits_json), fh = ParseHits(filtered->hits_json);
  for (auto& h : ph)
    if (h.id == "b") CHECK(h.score == fh[0].score);
  // offset/limit
  SearchRequest o;
  o.q = "*";
  o.offset = 1;
  o.limit = 2;
  o.sort = "score";
  auto oo = fx.idx->Search(o);
  hits = ParseHits(oo->hits_json);
  REQUIRE(hits.size() == 2);
  CHECK(hits[0].id == "a");
  CHECK(hits[1].id == "b");
  CHECK(oo->total == 4);
}

// Runs `check` on fx's index, which has had `batches` batches; then adds
// one-document batches (title "y") up to ten segments, one level, so they
// merge; runs it after the merge and again after a reopen.
void CheckThroughMergeAndReopen(Fixture& fx, int batches, const std::function<void()>& check) {
  check();
  for (int b = batches; b < 10; ++b) {
    std::string id = "filler";
    id += std::to_string(b);  // not "f" + string: GCC 12 warns (-Wrestrict) on that
    fx.store.Put(id, R"({"title": "y"})");
    REQUIRE(fx.store.Flush(*fx.idx).ok());
  }
  WaitForMerges(*fx.idx);
  CHECK(SegmentFiles(fx.dir.path()) < 10);
  check();
  fx.Reopen();
  check();
}

TEST_CASE("an empty keyword value is a value: faceted, matched, sorted, kept by merges", "[postings]") {
  Fixture fx;
  fx.store.Put("a", R"({"title": "x", "tags": ""})");
  fx.store.Put("b", R"({"title": "x", "tags": ["", "red"]})");
  fx.store.Put("c", R"({"title": "x", "tags": "red"})");
  fx.store.Put("d", R"({"title": "x"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  auto check = [&] {
    CHECK(fx.Ids("tags:\"\"") == std::vector<std::string>{"a", "b", "e"});
    CHECK(fx.Ids("tags:*") == std::vector<std::string>{"a", "b", "c", "e"});  // every document with a value
    SearchRequest r;
    r.q = "title:x";
    r.facets = {"tags"};
    r.sort = "tags";
    auto res = fx.Run(r);
    CHECK(res.facets_json == R"({"tags":{"":3,"red":2}})");
    std::vector<std::string> order;
    for (auto& h : ParseHits(res.hits_json)) order.push_back(h.id);
    CHECK(order == std::vector<std::string>{"a", "b", "e", "c", "d"});  // "" sorts first; no value last
    r.q = "tags:\"\"";
    r.sort = "";
    r.highlight = {"tags"};
    CHECK_THAT(fx.Run(r).hits_json, !Catch::Contains("<em>"));  // nothing to mark in ""
  };
  fx.store.Put("e", R"({"title": "x", "tags": [""]})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  CheckThroughMergeAndReopen(fx, 2, check);
}

TEST_CASE("prefix, fuzzy and range words are normalized as the field's terms", "[postings]") {
  Fixture fx;
  fx.def = Def(R"({"type": "search", "collection": "c",
    "fields": {"f": {"analyzer": "folding"}, "t": {"analyzer": "standard"}, "k": {"analyzer": "keyword"}}})");
  fx.Reopen();
  fx.store.Put("a", R"({"f": "Éléphant rose", "t": "Bravo Delta", "k": "Bravo"})");
  fx.store.Put("b", R"({"f": "elephant gris", "t": "charlie", "k": "charlie"})");
  fx.store.Put("c", R"({"f": "zèbre", "t": "echo", "k": "echo"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  auto ids = [&](const std::string& q) {
    std::set<std::string> out;
    for (auto& h : ParseHits(fx.Q(q).hits_json)) out.insert(h.id);
    return out;
  };
  // A folding field folds the accents of prefix and fuzzy words too.
  CHECK(ids("f:éléph*") == std::set<std::string>{"a", "b"});
  CHECK(ids("f:ÉLÉPH*") == std::set<std::string>{"a", "b"});
  CHECK(ids("f:éléphnt~1") == std::set<std::string>{"a", "b"});
  CHECK(ids("f:zèb*") == std::set<std::string>{"c"});
  // A standard field keeps accents, and case-folds.
  CHECK(ids("t:BRA*") == std::set<std::string>{"a"});
  // Text range bounds are case-folded like the terms; keyword ones are not.
  CHECK(ids("t:[B TO D]") == std::set<std::string>{"a", "b"});
  CHECK(ids("t:[b TO d]") == std::set<std::string>{"a", "b"});
  CHECK(ids("k:[B TO D]") == std::set<std::string>{"a"});
  // Wildcard words too, each run between wildcards whole.
  CHECK(ids("f:ÉL?PH*T") == std::set<std::string>{"a", "b"});
  CHECK(ids("f:*È?RE") == std::set<std::string>{"c"});
  CHECK(ids("t:BR?VO") == std::set<std::string>{"a"});
  CHECK(ids("k:BR?VO") == std::set<std::string>{});
  CHECK(ids("k:Br?vo") == std::set<std::string>{"a"});
}

// '*' and '?' are Lucene's wildcards; escaped, they are characters, and
// a pattern's escaped characters match only themselves. Terms a wildcard
// expands to are highlighted as a prefix's are.
TEST_CASE("wildcard words match terms whole; escaped wildcards are characters", "[postings]") {
  Fixture fx;
  fx.def = Def(R"({"type": "search", "collection": "c", "store": ["t"],
    "fields": {"t": {"analyzer": "standard"}, "k": {"analyzer": "keyword"}}})");
  fx.Reopen();
  fx.store.Put("star", R"({"k": "c*t", "t": "the quick fox"})");
  fx.store.Put("qmark", R"({"k": "c?t", "t": "a quack"})");
  fx.store.Put("cat", R"({"k": "cat", "t": "quickly"})");
  fx.store.Put("coat", R"({"k": "coat", "t": "a queue"})");
  fx.store.Put("back", R"({"k": "c\\t", "t": "quick, quick"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  using V = std::vector<std::string>;
  CHECK(fx.Ids("k:c?t") == V{"back", "cat", "qmark", "star"});
  CHECK(fx.Ids("k:c*t") == V{"back", "cat", "coat", "qmark", "star"});
  CHECK(fx.Ids("k:c\\*t") == V{"star"});   // a term
  CHECK(fx.Ids("k:c\\*?") == V{"star"});   // 'c', '*', any one
  CHECK(fx.Ids("k:c\\?*") == V{"qmark"});  // the prefix "c?"
  CHECK(fx.Ids("k:*\\**") == V{"star"});   // holds a '*'
  CHECK(fx.Ids("k:?\\\\?") == V{"back"});  // any one, '\\', any one
  CHECK(fx.Ids("k:\\*") == V{});
  CHECK(fx.Ids("t:qu?ck") == V{"back", "qmark", "star"});
  CHECK(fx.Ids("t:q*k*") == V{"back", "cat", "qmark", "star"});
  CHECK(fx.Ids("t:*e") == V{"coat", "star"});  // "queue", "the"
  SearchRequest r;
  r.q = "t:q?ick*";
  r.highlight = {"t"};
  r.fetch_document = fx.store.Fetcher();
  const std::string hits = fx.Run(r).hits_json;
  CHECK_THAT(hits, Catch::Contains("the <em>quick</em> fox"));
  CHECK_THAT(hits, Catch::Contains("<em>quickly</em>"));
  CHECK_THAT(hits, Catch::Contains("<em>quick</em>, <em>quick</em>"));
  CHECK_THAT(hits, !Catch::Contains("quack</em>"));
}

TEST_CASE("multi-valued sort keys: smallest ascending, largest descending", "[postings]") {
  Fixture fx;
  fx.store.Put("a", R"({"title": "x", "score": [21, 47], "tags": ["b", "y"], "createdAt": ["2020-01-01", "2024-06-01"]})");
  fx.store.Put("b", R"({"title": "x", "score": 30, "tags": "m", "createdAt": "2022-01-01"})");
  fx.store.Put("c", R"({"title": "x", "score": [25, 40], "tags": ["c", "n"], "createdAt": ["2021-01-01", "2023-01-01"]})");
  fx.store.Put("d", R"({"title": "x"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  auto order = [&](const std::string& sort) {
    SearchRequest r;
    r.q = "title:x";
    r.sort = sort;
    auto res = fx.Run(r);
    std::string out;
    for (auto& h : ParseHits(res.hits_json)) out += h.id;
    return out;
  };
  CHECK(order("score") == "acbd");   // 21, 25, 30; missing last
  CHECK(order("-score") == "acbd");  // 47, 40, 30
  CHECK(order("tags") == "acbd");    // b, c, m
  CHECK(order("-tags") == "acbd");   // y, n, m
  CHECK(order("createdAt") == "acbd");
  CHECK(order("-createdAt") == "acbd");
  fx.store.Put("a", R"({"title": "x", "score": [21, 39], "tags": ["b", "l"], "createdAt": ["2020-01-01", "2021-06-01"]})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  CHECK(order("-score") == "cabd");  // 40, 39, 30
  CHECK(order("-tags") == "cbad");   // n, m, l
  CHECK(order("-createdAt") == "cbad");
}

// JSON integers are exact up to 64 bits, as Elasticsearch's `long`: 2^53
// and 2^53 + 1 are one double, and neither an equality, a range nor a sort
// may confuse them. Other numbers are doubles (1e300 is a value too).
TEST_CASE("integers beyond 2^53 are exact in matches, ranges and sorts, also after merges", "[postings]") {
  Fixture fx;
  fx.store.Put("e53", R"({"title": "x", "score": 9007199254740992})");            // 2^53
  fx.store.Put("d53", R"({"title": "x", "score": 9007199254740993})");            // 2^53 + 1: the same double
  fx.store.Put("c53", R"({"title": "x", "score": 9007199254740995})");            // rounds up to 2^53 + 4
  fx.store.Put("b53", R"({"title": "x", "score": 9007199254740996})");            // 2^53 + 4
  fx.store.Put("umax", R"({"title": "x", "score": [18446744073709551615, 5]})");  // 2^64 - 1 rounds up to 2^64
  fx.store.Put("imin", R"({"title": "x", "score": -9223372036854775807})");       // 2^63 - 1 below zero
  fx.store.Put("big", R"({"title": "x", "score": 1e300})");
  fx.store.Put("half", R"({"title": "x", "score": 2.5})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  using V = std::vector<std::string>;
  auto order = [&](const std::string& sort) {
    SearchRequest r;
    r.q = "title:x";
    r.sort = sort;
    std::string out;
    for (auto& h : ParseHits(fx.Run(r).hits_json)) out += h.id + " ";
    return out;
  };
  auto check = [&] {
    CHECK(fx.Ids("score:9007199254740992") == V{"e53"});
    CHECK(fx.Ids("score:9007199254740993") == V{"d53"});
    CHECK(fx.Ids("score:9007199254740994") == V{});
    CHECK(fx.Ids("score:9007199254740995") == V{"c53"});
    CHECK(fx.Ids("score:[9007199254740993 TO 9007199254740995]") == V{"c53", "d53"});
    CHECK(fx.Ids("score:{9007199254740992 TO 9007199254740996}") == V{"c53", "d53"});
    CHECK(fx.Ids("score:[9007199254740993 TO *]") == V{"b53", "big", "c53", "d53", "umax"});
    CHECK(fx.Ids("score:18446744073709551615") == V{"umax"});
    CHECK(fx.Ids("score:18446744073709551614") == V{});
    CHECK(fx.Ids("score:{18446744073709551615 TO *]") == V{"big"});
    CHECK(fx.Ids("score:-9223372036854775807") == V{"imin"});
    CHECK(fx.Ids("score:[* TO -9223372036854775808]") == V{});
    CHECK(fx.Ids("score:[2.5 TO 5]") == V{"half", "umax"});
    CHECK(fx.Ids("score:1e300") == V{"big"});
    CHECK(order("score") == "imin half umax e53 d53 c53 b53 big ");  // ties would sort by id
    CHECK(order("-score") == "big umax b53 c53 d53 e53 half imin ");
  };
  CheckThroughMergeAndReopen(fx, 1, check);  // merges carry the residuals
}

TEST_CASE("stored fields keep the digits of integers beyond 64 bits, also after merges", "[postings]") {
  // API.md: an integer too large for uint64 keeps its digits. Stored
  // fields wrote the double (1.2345678901234568e29).
  Fixture fx;
  fx.store.Put("a", R"({"title": "x", "score": 123456789012345678901234567890, "n": {"big": -98765432109876543210}})");
  fx.store.Put("b", R"({"title": "x", "score": [18446744073709551616, 1, 2.50, 18446744073709551615]})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  auto fields = [&](std::optional<std::vector<std::string>> paths) {
    SearchRequest r;
    r.q = "title:x";
    r.fields = std::move(paths);
    r.fetch_document = fx.store.Fetcher();
    return fx.Run(r).hits_json;
  };
  auto check = [&] {
    using V = std::vector<std::string>;
    const std::string stored = fields(std::nullopt);  // the segment's record as it is
    CHECK_THAT(stored, Catch::Contains(R"("fields":{"title":"x","score":123456789012345678901234567890})"));
    CHECK_THAT(stored, Catch::Contains(R"("fields":{"title":"x","score":[18446744073709551616,1,2.5,18446744073709551615]})"));
    const std::string picked = fields(V{"score"});  // some of the record's paths: parsed and picked
    CHECK_THAT(picked, Catch::Contains(R"("fields":{"score":123456789012345678901234567890})"));
    CHECK_THAT(picked, Catch::Contains(R"("fields":{"score":[18446744073709551616,1,2.5,18446744073709551615]})"));
    const std::string read = fields(V{"n.big", "score"});  // a path not stored: from the document
    CHECK_THAT(read, Catch::Contains(R"("fields":{"n.big":-98765432109876543210,"score":123456789012345678901234567890})"));
  };
  CheckThroughMergeAndReopen(fx, 1, check);
}

TEST_CASE("date values and bounds stand for their whole period", "[postings]") {
  Fixture fx;
  fx.store.Put("may1", R"({"title": "x", "createdAt": "2023-05-01T00:00:00Z"})");
  fx.store.Put("may1noon", R"({"title": "x", "createdAt": "2023-05-01T12:00:00Z"})");
  fx.store.Put("may31", R"({"title": "x", "createdAt": "2023-05-31T10:00:00Z"})");
  fx.store.Put("jun1", R"({"title": "x", "createdAt": "2023-06-01"})");
  fx.store.Put("point", R"({"title": "x", "createdAt": "2023-05-31T10:00:00.250Z"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  using V = std::vector<std::string>;
  CHECK(fx.Ids("createdAt:[2023-05-01 TO 2023-05-31]") == V{"may1", "may1noon", "may31", "point"});
  CHECK(fx.Ids("createdAt:{2023-05-01 TO 2023-05-31}") == V{});
  CHECK(fx.Ids("createdAt:{2023-05-01 TO 2023-06-01]") == V{"jun1", "may31", "point"});
  CHECK(fx.Ids("createdAt:[2023-05 TO 2023-05]") == V{"may1", "may1noon", "may31", "point"});
  CHECK(fx.Ids("createdAt:{2023-04 TO 2023-06}") == V{"may1", "may1noon", "may31", "point"});
  CHECK(fx.Ids("createdAt:2023-05-01") == V{"may1", "may1noon"});
  CHECK(fx.Ids("createdAt:2023") == V{"jun1", "may1", "may1noon", "may31", "point"});
  CHECK(fx.Ids("createdAt:\"2023-05-31T10\"") == V{"may31", "point"});
  CHECK(fx.Ids("createdAt:\"2023-05-31T10:00:00Z\"") == V{"may31", "point"});
  CHECK(fx.Ids("createdAt:\"2023-05-31T10:00:00.000Z\"") == V{"may31"});
  CHECK(fx.Ids("createdAt:[* TO \"2023-05-31T10:00:00.000Z\"]") == V{"may1", "may1noon", "may31"});
  CHECK(fx.Ids("createdAt:[\"2023-05-01T12:00:00Z\" TO *}") == V{"jun1", "may1noon", "may31", "point"});
  CHECK(fx.Ids("createdAt:{\"2023-05-01T12:00:00Z\" TO *}") == V{"jun1", "may31", "point"});
}

TEST_CASE("a sloppy phrase gives each repetition of a word its own position", "[postings]") {
  Fixture fx;
  fx.store.Put("one", R"({"title": "dog"})");
  fx.store.Put("two", R"({"title": "dog cat"})");
  fx.store.Put("three", R"({"title": "dog cat dog"})");
  fx.store.Put("four", R"({"title": "dog dog"})");
  fx.store.Put("five", R"({"title": "cat dog bird bird dog"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  using V = std::vector<std::string>;
  CHECK(fx.Ids("title:\"dog dog\"") == V{"four"});
  CHECK(fx.Ids("title:\"dog dog\"~1") == V{"four", "three"});
  CHECK(fx.Ids("title:\"dog dog\"~3") == V{"five", "four", "three"});
  CHECK(fx.Ids("title:\"dog dog cat\"~2") == V{"three"});
  CHECK(fx.Ids("title:\"dog cat dog\"~1") == V{"three"});
  CHECK(fx.Ids("title:\"dog dog dog\"~5") == V{});
}

TEST_CASE("a builder kept for a backlog is given back when the index is idle", "[postings]") {
  // 1.6M distinct terms: a dictionary of more than the 64 MB an idle index
  // keeps, less than the 256 MB it keeps while batches follow each other.
  Fixture fx;
  std::string json;
  for (int d = 0; d < 100; ++d) {
    json = R"({"body": ")";
    for (int w = 0; w < 16000; ++w) json.append("t").append(std::to_string(d * 16000 + w)).append(" ");
    json.append(R"("})");
    fx.store.Put(std::string("d").append(std::to_string(d)), json);
  }
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  CHECK(fx.idx->MemoryBytes() > (uint64_t{64} << 20));
  fx.idx->Idle();
  CHECK(fx.idx->MemoryBytes() < (uint64_t{64} << 20));
  // The next batch starts a builder afresh; both batches answer.
  fx.store.Put("e", R"({"body": "t7 fresh"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  CHECK(fx.Ids("body:t7") == std::vector<std::string>{"d0", "e"});
  CHECK(fx.Ids("body:t1599999") == std::vector<std::string>{"d99"});
}

TEST_CASE("a batch's errors reach the BeforeCommit hook before it commits", "[postings]") {
  Fixture fx;
  std::vector<IndexError> hooked;
  int calls = 0;
  uint64_t applied_at_hook = 99;
  fx.idx->SetBeforeCommit([&](std::span<const IndexError> errors) {
    ++calls;
    hooked.assign(errors.begin(), errors.end());
    applied_at_hook = fx.idx->LastAppliedEtag();
  });
  fx.store.Put("ok", R"({"title": "x", "score": 1})");
  fx.store.Put("bad", R"({"title": "x", "score": "lots"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  CHECK(calls == 1);
  REQUIRE(hooked.size() == 1);
  CHECK(hooked[0].id == "bad");
  CHECK(applied_at_hook == 0);  // not committed yet when the errors were handed over
  CHECK(fx.idx->LastAppliedEtag() == 2);
  fx.store.Put("ok2", R"({"title": "y"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  CHECK(calls == 1);  // a batch without errors does not call it
}

TEST_CASE("stored fields at paths through arrays of objects", "[postings]") {
  Fixture fx;
  fx.store.Put("a", R"({"title": "x", "author": [{"name": "Blue door"}, {"name": "fox to"}], "score": 4})");
  fx.store.Put("b", R"({"title": "x", "author": {"name": "Ann"}, "meta": [{"y": [1, 2]}, {"y": 3}, {"z": 0}]})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  SearchRequest r;
  r.q = "title:x";
  r.sort = "-score";
  r.fields = std::vector<std::string>{"author.name", "meta.y", "meta.none"};
  r.fetch_document = fx.store.Fetcher();
  auto res = fx.Run(r);
  CHECK_THAT(res.hits_json, Catch::Contains(R"("fields":{"author.name":["Blue door","fox to"]})"));
  CHECK_THAT(res.hits_json, Catch::Contains(R"("fields":{"author.name":"Ann","meta.y":[1,2,3]})"));
  // The field is searchable at the same path.
  CHECK(fx.Ids("author.name:fox") == std::vector<std::string>{"a"});
}

TEST_CASE("stored fields are kept in the segments, as indexed", "[postings]") {
  Fixture fx;
  fx.def = Def(R"({"type": "search", "collection": "c", "fields": {"title": {}, "score": {"type": "number"}},
    "store": ["title", "author.name", "meta.y", "score", "title"]})");
  fx.Reopen();
  fx.store.Put("a", R"({"title": "x", "author": [{"name": "Blue door"}, {"name": "fox to"}], "score": 4})");
  fx.store.Put("b", R"({"title": "x", "author": {"name": "Ann"}, "meta": [{"y": [1, 2]}, {"y": 3}, {"z": 0}]})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  // The store now holds newer versions the index has not seen: a hit's
  // fields are the version the index matched, as Elasticsearch's are.
  fx.store.docs["a"] = R"({"title": "changed", "score": 5})";
  fx.store.docs.erase("b");
  int fetches = 0;
  auto fetcher = [&](std::string_view id) {
    ++fetches;
    return fx.store.Fetcher()(id);
  };
  auto fields = [&](std::optional<std::vector<std::string>> asked) {
    SearchRequest r;
    r.q = "title:x";
    r.sort = "-score";
    r.fields = std::move(asked);
    r.fetch_document = fetcher;
    return fx.Run(r).hits_json;
  };
  auto check = [&] {
    fetches = 0;
    // Every stored path, once, in the definition's order (its repeated
    // "title" dropped).
    CHECK(
        fields(std::nullopt) ==
        R"([{"id":"a","score":0.0,"fields":{"title":"x","author.name":["Blue door","fox to"],"score":4},"sort":[4,"a"]},)"
        R"({"id":"b","score":0.0,"fields":{"title":"x","author.name":"Ann","meta.y":[1,2,3]},"sort":[null,"b"]}])");
    // Some of them, in the order asked.
    CHECK(fields(std::vector<std::string>{"meta.y", "score", "meta.y"}) ==
          R"([{"id":"a","score":0.0,"fields":{"score":4},"sort":[4,"a"]},)"
          R"({"id":"b","score":0.0,"fields":{"meta.y":[1,2,3]},"sort":[null,"b"]}])");
    CHECK(fetches == 0);
    // A path the definition does not store reads the document store.
    CHECK(fields(std::vector<std::string>{"title", "meta"}) ==
          R"([{"id":"a","score":0.0,"fields":{"title":"changed"},"sort":[4,"a"]},)"
          R"({"id":"b","score":0.0,"fields":{},"sort":[null,"b"]}])");  // b is gone: no fields
    CHECK(fetches == 2);
  };
  CheckThroughMergeAndReopen(fx, 1, check);
}

TEST_CASE("store: \"*\", or a list holding \"*\", returns the whole document", "[postings]") {
  for (const char* store : {R"("*")", R"(["*"])", R"(["t", "*"])", R"(["t"])"}) {
    INFO(store);
    Fixture fx;
    fx.def = Def(
        (R"({"type": "search", "collection": "c", "fields": {"t": {}}, "store": )" + std::string(store) + "}").c_str());
    fx.Reopen();
    // The whole document comes back as stored: whitespace and every
    // number's spelling included (1.0 stays 1.0; 1e400 would not parse).
    fx.store.Put("a", R"({"t": "x", "n": [1.0, {"m": 2}, 1.7976931348623158e308]})");
    REQUIRE(fx.store.Flush(*fx.idx).ok());
    SearchRequest r;
    r.q = "x";
    r.fetch_document = fx.store.Fetcher();
    const bool whole = std::string_view(store) != R"(["t"])";
    CHECK_THAT(fx.Run(r).hits_json,
               Catch::Contains(whole ? R"("fields":{"t": "x", "n": [1.0, {"m": 2}, 1.7976931348623158e308]})"
                                     : R"("fields":{"t":"x"})"));
  }
}

TEST_CASE("a key with dots is that path, as Elasticsearch reads documents", "[postings]") {
  Fixture fx;
  fx.store.Put("a", R"({"title": "x", "author.name": "Blue door", "score": 3})");
  fx.store.Put("b", R"({"title": "x", "author": {"name": "Ann"}, "author.name": "Bob", "score": 2})");
  fx.store.Put("c", R"({"title": "x", "author": [{"name": "Cy"}, {"name.first": "Di"}], "score": 1})");
  fx.store.Put("d", R"({"title": "x", "author.names": "Ed", "authors": {"name": "Flo"}})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  CHECK(fx.Ids("author.name:door") == std::vector<std::string>{"a"});
  CHECK(fx.Ids("author.name:ann") == std::vector<std::string>{"b"});
  CHECK(fx.Ids("author.name:bob") == std::vector<std::string>{"b"});
  CHECK(fx.Ids("author.name:cy") == std::vector<std::string>{"c"});
  CHECK(fx.Ids("author.name:di").empty());  // "name.first" is another path
  CHECK(fx.Ids("author.name:ed OR author.name:flo").empty());
  SearchRequest r;
  r.q = "title:x";
  r.sort = "-score";
  r.fields = std::vector<std::string>{"author.name"};
  r.fetch_document = fx.store.Fetcher();
  const std::string json = fx.Run(r).hits_json;
  CHECK_THAT(json, Catch::Contains(R"({"id":"a","score":0.0,"fields":{"author.name":"Blue door"},"sort":[3,"a"]})"));
  // Both, in document order.
  CHECK_THAT(json, Catch::Contains(R"({"id":"b","score":0.0,"fields":{"author.name":["Ann","Bob"]},"sort":[2,"b"]})"));
  CHECK_THAT(json, Catch::Contains(R"({"id":"c","score":0.0,"fields":{"author.name":["Cy"]},"sort":[1,"c"]})"));
  CHECK_THAT(json, Catch::Contains(R"({"id":"d","score":0.0,"fields":{},"sort":[null,"d"]})"));
}

TEST_CASE("request errors", "[postings]") {
  Fixture fx;
  auto err = [&](SearchRequest r) {
    auto res = fx.idx->Search(r);
    REQUIRE(!res.ok());
    CHECK(res.status().code() == StatusCode::kInvalidArgument);
    return res.status().message();
  };
  SearchRequest r;
  r.q = "nope:x";
  CHECK_THAT(err(r), Catch::Contains("unknown field 'nope' at offset 0"));
  r.q = "a \"b";
  CHECK_THAT(err(r), Catch::Contains("at offset 2"));
  // A filter's error keeps its offset (into the filter) under its prefix.
  r.filter = "x:(";
  {
    auto res = fx.idx->Search(r);
    REQUIRE(!res.ok());
  }
  r.q = "a";
  {
    auto res = fx.idx->Search(r);
    REQUIRE(!res.ok());
    CHECK(res.status().message().starts_with("filter: "));
    REQUIRE(res.status().offset().has_value());
    CHECK(res.status().message().ends_with(" at offset " + std::to_string(*res.status().offset())));
  }
  r.filter.clear();
  r.q = "score:abc";
  CHECK_THAT(err(r), Catch::Contains("field 'score' expects a number"));
  r.q = "createdAt:[2024-99-01 TO *]";
  CHECK_THAT(err(r), Catch::Contains("expects a date"));
  r.q = "score:ab*";
  CHECK_THAT(err(r), Catch::Contains("not a prefix"));
  r.q = "[1 TO 2]";
  CHECK_THAT(err(r), Catch::Contains("a range needs a field"));
  r.q = "x";
  r.sort = "nope";
  CHECK_THAT(err(r), Catch::Contains("sort: unknown field 'nope'"));
  r.sort = "body";
  CHECK_THAT(err(r), Catch::Contains("sort: field 'body' is a text field"));
  r.sort = "";
  r.facets = {"body"};
  CHECK_THAT(err(r), Catch::Contains("facets: field 'body' is not"));
  r.facets = {};
  r.highlight = {"score"};
  CHECK_THAT(err(r), Catch::Contains("highlight: field 'score' is not a text field"));
  r.highlight = {};
  r.filter = "(";
  CHECK_THAT(err(r), Catch::Contains("filter: "));
  r.filter = "";
  // Boosts whose product could push a score past a double's range (JSON
  // has no infinity): refused with the offset of the clause.
  const std::string e20 = "1" + std::string(20, '0'), e30 = "1" + std::string(30, '0');
  r.q = "apple^" + e30 + "0";
  CHECK_THAT(err(r), Catch::Contains("boosts multiply to more than 1e30 at offset 0"));
  r.q = "x (apple^" + e20 + ")^" + e20;
  CHECK_THAT(err(r), Catch::Contains("boosts multiply to more than 1e30 at offset 3"));
  r.q = "apple^" + e30;
  CHECK(fx.idx->Search(r).ok());
}

// Random query soup (syntax characters, operators, field names, numbers,
// dates, multi-byte and invalid UTF-8) through the whole query path: every
// query either answers, or fails with InvalidArgument (a 400) whose
// message names an offset inside the query. Under ASan
// this is also the parser's and compiler's memory-safety check.
TEST_CASE("random queries answer or fail with a clear error", "[postings]") {
  Fixture fx;
  fx.store.Put("1", R"({"title": "The quick brown fox", "body": "jumps over the lazy dogs", "tags": ["animal", "fast"], "score": 5, "createdAt": "2024-01-02"})");
  fx.store.Put("2", R"({"title": "Lazy afternoon", "body": "a dog sleeping in the sun", "tags": "animal", "score": 7.5})");
  fx.store.Put("3", R"({"title": "Zoë's café", "body": "東京の天気 und Straße", "author": {"name": "Zoë Quick"}})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  const std::vector<std::string> pieces = {
      "quick", "fox", "dog", "la", "zo", "東京", "Straße", "\xff", "\xc3", "é", " ", " ", " ", "(", ")", "\"",
      ":", "*", "~", "~1", "~3", "^", "^2", "^0", "[", "]", "{", "}", "+", "-", "!", "?", "\\", "/", "&&", "||",
      "AND", "OR", "NOT", "TO", "title:", "body:", "tags:", "score:", "createdAt:", "author.name:", "nofield:",
      "1", "2.5", "-3", "1e309", "nan", "2024", "2024-01-02", "2024-13", "T10:00", "0x10"};
  const std::vector<std::string> words = {"quick ", "fox ", " dog", " lazy ", "title:fox ", "sleep* ", "dgo~ "};
  std::mt19937 rng(12345);
  std::uniform_int_distribution<size_t> len(1, 12), pick(0, pieces.size() - 1);
  size_t answered = 0, failed = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string q;
    for (size_t n = len(rng); n > 0; --n) q += rng() % 2 == 0 ? words[rng() % words.size()] : pieces[pick(rng)];
    for (DefaultOperator op : {DefaultOperator::kOr, DefaultOperator::kAnd}) {
      SearchRequest r;
      r.q = q;
      r.op = op;
      r.limit = 5;
      r.highlight = {"body"};
      r.facets = {"tags"};
      auto res = fx.idx->Search(r);
      if (res.ok()) {
        ++answered;
        continue;
      }
      ++failed;
      INFO("query: " << q);
      CHECK(res.status().code() == StatusCode::kInvalidArgument);
      const std::string& m = res.status().message();
      CHECK(!m.empty());
      // API.md: a syntax error is a 400 with the offset, carried by the
      // status (error.offset) and named at the message's end alike.
      REQUIRE(res.status().offset().has_value());
      const size_t offset = *res.status().offset();
      CHECK(offset <= q.size());
      CHECK(m.ends_with(" at offset " + std::to_string(offset)));
    }
  }
  // The soup reaches the searcher, not only the parser's errors.
  INFO("answered " << answered << ", failed " << failed);
  CHECK(answered > 1000);
  CHECK(failed > 1000);
}

// Prefix and fuzzy searches run their per-segment pieces on the searcher's
// helper threads (postings/parallel.h). Several threads searching at once,
// while batches land and merges run: every search answers, its hits are
// in order and its total counts what it saw. Under TSan this is the race
// check of that path; the oracle tests check its results.
TEST_CASE("prefix and fuzzy searches from several threads while batches and merges run", "[postings]") {
  Fixture fx;
  std::mt19937 rng(11);
  auto doc = [&](int i) {
    std::string body;
    for (int w = 0; w < 12; ++w) body += "pre" + std::to_string(rng() % 400) + " filler ";
    return R"({"title": "t)" + std::to_string(i) + R"(", "body": ")" + body + R"("})";
  };
  int next = 0;
  for (int b = 0; b < 4; ++b) {
    for (int i = 0; i < 60; ++i, ++next) fx.store.Put(std::to_string(next), doc(next));
    REQUIRE(fx.store.Flush(*fx.idx).ok());
  }
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      const char* queries[] = {"pre*", "pre1* OR filler", "pre10~1", "body:pre2*"};
      for (int n = 0; !stop.load() || n < 20; ++n) {
        SearchRequest r;
        r.q = queries[(n + t) % 4];
        r.limit = 10;
        auto res = fx.idx->Search(r);
        if (!res.ok()) {
          failures.fetch_add(1);
          continue;
        }
        auto hits = ParseHits(res->hits_json);
        if (res->total < hits.size() || (res->total > 0 && hits.empty())) failures.fetch_add(1);
        for (size_t i = 1; i < hits.size(); ++i)
          if (hits[i - 1].score < hits[i].score) failures.fetch_add(1);
      }
    });
  }
  for (int b = 0; b < 12; ++b) {
    for (int i = 0; i < 40; ++i) {
      const int id = static_cast<int>(rng() % static_cast<unsigned>(next + 1));
      if (rng() % 4 == 0)
        fx.store.Delete(std::to_string(id));
      else
        fx.store.Put(std::to_string(id == next ? next++ : id), doc(id));
    }
    REQUIRE(fx.store.Flush(*fx.idx).ok());
  }
  stop.store(true);
  for (auto& t : readers) t.join();
  CHECK(failures.load() == 0);
  // Quiet again: the parallel path's total is the live documents with a
  // pre... word (all of them).
  SearchRequest all;
  all.q = "pre*";
  CHECK(fx.Run(all).total == fx.store.docs.size());
}

}  // namespace
}  // namespace corvid::postings
