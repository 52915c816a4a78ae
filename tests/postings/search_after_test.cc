// Deep paging with searchAfter (API.md "Deep paging"): walks of a few
// thousand documents full of ties (repeated texts, repeated sort values,
// missing and multi-valued ones, integers beyond 2^53) page by page, by
// score (through each top-k path: MaxScore, the dense disjunction's floor,
// conjunctions, expansions, term-at-a-time, a phrase leaf) and by number,
// date and keyword fields, ascending, descending and mixed with _score.
// Every walk must equal the full answer, whose order a brute-force oracle
// checks; with deletes, inserts and rewrites that move sort values between
// pages, a field-sorted walk returns no document twice and skips none that
// matched throughout.
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <charconv>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "common/exact_json.h"
#include "common/sanitizers.h"
#include "postings/definition.h"
#include "postings/search_index.h"
#include "postings/snapshot.h"
#include "postings/walks.h"
#include "tests/postings/test_util.h"

namespace corvid::postings {
namespace {

using testing::Store;
using testing::TempDir;

// The title's tiny boost makes its terms "light" beside the body's, so a
// phrase over both fields takes the searcher's ScoreLeafTopK path.
constexpr const char* kDef = R"({"type": "search", "collection": "c",
  "fields": {"title": {"analyzer": "standard", "boost": 0.0001}, "body": {"analyzer": "standard"},
             "k": {"analyzer": "keyword"}, "n": {"type": "number"}, "d": {"type": "date"}}})";

// A document as the oracle sees it: its sort values.
struct Doc {
  std::vector<Number> n;
  std::vector<std::string> k;
  std::vector<double> d;
};

// A hit as the searcher answered it.
struct PageHit {
  std::string id;
  double score = 0;
  std::string sort_json;            // the "sort" array, as written
  std::vector<SortValue> sort_key;  // the same, as a client sends it back (as server/index_handlers.cc reads it)
};

struct Page {
  uint64_t total = 0;
  std::vector<PageHit> hits;
};

Page ParsePage(const SearchResult& r) {
  rapidjson::Document d;
  REQUIRE(!ParseWithExactNumbers(d, r.hits_json).IsError());
  REQUIRE(d.IsArray());
  Page page;
  page.total = r.total;
  for (const auto& h : d.GetArray()) {
    PageHit p;
    p.id = h["id"].GetString();
    p.score = h["score"].GetDouble();
    REQUIRE(h.HasMember("sort"));
    const auto& s = h["sort"];
    REQUIRE(s.IsArray());
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    s.Accept(w);
    p.sort_json = buf.GetString();
    for (const auto& x : s.GetArray()) {
      SortValue v;
      if (x.IsNull()) {
        v.type = SortValue::Type::kNull;
      } else if (x.IsString()) {
        v.type = SortValue::Type::kString;
        v.text = x.GetString();
      } else if (x.IsUint64() || x.IsInt64()) {
        v.type = SortValue::Type::kNumber;
        v.text = x.IsUint64() ? std::to_string(x.GetUint64()) : std::to_string(x.GetInt64());
      } else {
        REQUIRE(x.IsDouble());
        v.type = SortValue::Type::kNumber;
        char b[32];
        v.text.assign(b, std::to_chars(b, b + sizeof b, x.GetDouble()).ptr);
      }
      p.sort_key.push_back(std::move(v));
    }
    // The key ends with the id.
    REQUIRE(!p.sort_key.empty());
    CHECK(p.sort_key.back().type == SortValue::Type::kString);
    CHECK(p.sort_key.back().text == p.id);
    page.hits.push_back(std::move(p));
  }
  return page;
}

struct SortSpec {
  std::string field;  // "_score" for relevance
  bool desc = false;
};

std::vector<SortSpec> ParseSort(const std::string& sort) {
  std::vector<SortSpec> out;
  size_t start = 0;
  while (start < sort.size()) {
    size_t comma = sort.find(',', start);
    std::string item = sort.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? sort.size() : comma + 1;
    SortSpec s;
    s.desc = item[0] == '-';
    if (item[0] == '-') item.erase(item.begin());
    s.field = item;
    if (item == "_score") s.desc = true;
    out.push_back(s);
  }
  return out;
}

// The brute-force order of API.md and docs/http-choices.md: per sort key,
// a document's smallest value ascending or largest descending, missing
// values last; then score (descending; 0 when no key is _score), then id
// bytewise. `score` maps ids to the scores the searcher gave.
class Oracle {
 public:
  Oracle(const std::map<std::string, Doc>& docs, const std::map<std::string, double>& score, std::vector<SortSpec> sort)
      : docs_(docs), score_(score), sort_(std::move(sort)) {}

  bool operator()(const std::string& a, const std::string& b) const {
    const Doc& x = docs_.at(a);
    const Doc& y = docs_.at(b);
    for (const SortSpec& s : sort_) {
      if (s.field == "_score") {
        if (score_.at(a) != score_.at(b)) return score_.at(a) > score_.at(b);
        continue;
      }
      int c = 0;
      if (s.field == "n") c = Cmp(x.n, y.n, s.desc);
      if (s.field == "d") c = Cmp(x.d, y.d, s.desc);
      if (s.field == "k") c = Cmp(x.k, y.k, s.desc);
      if (c != 0) return c < 0;
    }
    if (score_.at(a) != score_.at(b)) return score_.at(a) > score_.at(b);
    return a < b;
  }

 private:
  // <0 when values `a` sort before `b`.
  template <class T>
  static int Cmp(const std::vector<T>& a, const std::vector<T>& b, bool desc) {
    if (a.empty() || b.empty()) return a.empty() == b.empty() ? 0 : a.empty() ? 1 : -1;  // missing last
    const T& va = desc ? *std::max_element(a.begin(), a.end()) : *std::min_element(a.begin(), a.end());
    const T& vb = desc ? *std::max_element(b.begin(), b.end()) : *std::min_element(b.begin(), b.end());
    if (va == vb) return 0;
    return (desc ? vb < va : va < vb) ? -1 : 1;
  }
  const std::map<std::string, Doc>& docs_;
  const std::map<std::string, double>& score_;
  std::vector<SortSpec> sort_;
};

const std::vector<std::string> kWords = {"w00", "w01", "w02", "w03", "w04", "w05", "w06", "w07",
                                         "w08", "w09", "w10", "w11", "w12", "w13", "w14", "w15",
                                         "w16", "w17", "w18", "w19", "w20", "w21", "w22", "w23"};
const std::vector<std::string> kKeywords = {"", "alpha", "beta", "gamma", "delta", "Zulu", "éclair", "zz", "a b"};
// Integers a double cannot tell apart: their order lives in the residual.
const std::vector<std::string> kBigInts = {"9007199254740992", "9007199254740993", "9007199254740995",
                                           "-9007199254740993", "18446744073709551615"};

// A random document: one of a few hundred texts (exact score ties), "w00"
// in nearly every body (a list dense enough for the dense-disjunction
// path), sort values from small sets (ties), some missing, some several.
class Corpus {
 public:
  explicit Corpus(uint64_t seed) : rng_(seed) {
    for (int t = 0; t < 300; ++t) {
      std::string body = Chance(0.97) ? "w00" : "w01";
      const int len = 3 + static_cast<int>(rng_() % 10);
      for (int i = 0; i < len; ++i) body += " " + kWords[Skewed()];
      texts_.push_back({kWords[Skewed()] + " " + kWords[Skewed()], body});
    }
  }

  // Adds a document with a new id to `store` and `docs`.
  void Add(Store& store, std::map<std::string, Doc>& docs) {
    const std::string id = "doc" + std::to_string(next_id_++ * 7919 % 100003);
    const auto& [title, body] = texts_[rng_() % texts_.size()];
    Doc doc;
    std::string json = R"({"title": ")" + title + R"(", "body": ")" + body + "\"";
    // n: ints, halves, big integers; missing; several values.
    const int nn = Chance(0.1) ? 0 : Chance(0.15) ? 2 + static_cast<int>(rng_() % 2) : 1;
    if (nn > 0) {
      std::vector<std::string> texts;
      for (int i = 0; i < nn; ++i) {
        std::string v;
        if (Chance(0.05)) {
          v = kBigInts[rng_() % kBigInts.size()];
        } else if (Chance(0.2)) {
          v = std::to_string(rng_() % 20) + ".5";
        } else {
          v = std::to_string(static_cast<int>(rng_() % 25) - 3);
        }
        texts.push_back(v);
        doc.n.push_back(ParseNumberForTest(v));
      }
      json += R"(, "n": )" + Join(texts, nn > 1);
    }
    const int nk = Chance(0.1) ? 0 : Chance(0.15) ? 2 : 1;
    if (nk > 0) {
      std::vector<std::string> texts;
      for (int i = 0; i < nk; ++i) {
        doc.k.push_back(kKeywords[rng_() % kKeywords.size()]);
        texts.push_back("\"" + doc.k.back() + "\"");
      }
      json += R"(, "k": )" + Join(texts, nk > 1);
    }
    if (!Chance(0.1)) {
      char date[64];
      const int day = 1 + static_cast<int>(rng_() % 28), hour = static_cast<int>(rng_() % 3);
      const int ms = Chance(0.2) ? static_cast<int>(rng_() % 1000) : 0;
      std::snprintf(date, sizeof date, "2024-03-%02dT%02d:00:00.%03dZ", day, hour, ms);
      auto ms_since_epoch = ParseIsoDate(date);
      REQUIRE(ms_since_epoch);
      doc.d.push_back(*ms_since_epoch);
      json += R"(, "d": ")" + std::string(date) + "\"";
    }
    json += "}";
    store.Put(id, json);
    docs[id] = std::move(doc);
  }

  std::mt19937_64& rng() { return rng_; }

 private:
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  size_t Skewed() {
    return std::min<size_t>(kWords.size() - 1,
                            static_cast<size_t>(std::abs(std::normal_distribution<double>(0, 6)(rng_))));
  }
  static std::string Join(const std::vector<std::string>& v, bool array) {
    if (!array) return v[0];
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
    return out + "]";
  }
  // As the index reads a JSON number (Number, segment.h).
  static Number ParseNumberForTest(const std::string& s) {
    int64_t i;
    if (auto r = std::from_chars(s.data(), s.data() + s.size(), i); r.ec == std::errc() && r.ptr == s.data() + s.size())
      return Number::Of(i);
    uint64_t u;
    if (auto r = std::from_chars(s.data(), s.data() + s.size(), u); r.ec == std::errc() && r.ptr == s.data() + s.size())
      return Number::Of(u);
    return Number{std::stod(s), 0};
  }

  std::mt19937_64 rng_;
  std::vector<std::pair<std::string, std::string>> texts_;
  uint64_t next_id_ = 1;
};

struct Fixture {
  TempDir dir;
  Store store;
  std::map<std::string, Doc> docs;
  std::unique_ptr<SearchIndex> idx;
  Fixture() {
    auto d = SearchDefinition::Compile(kDef);
    REQUIRE(d.ok());
    auto r = SearchIndex::Open(dir.path(), *d);
    REQUIRE(r.ok());
    idx = std::move(r).value();
  }
  Page Run(const SearchRequest& r) {
    auto res = idx->Search(r);
    INFO("q=" << r.q << " sort=" << r.sort);
    REQUIRE(res.ok());
    return ParsePage(*res);
  }
};

SearchRequest Request(const std::string& q, const std::string& sort, size_t limit) {
  SearchRequest r;
  r.q = q;
  r.sort = sort;
  r.limit = limit;
  return r;
}

// Walks (q, sort) with searchAfter, `limit` at a time, from hit `from` of
// the full answer (after its predecessor's key) for `count` hits or to the
// end.
std::vector<PageHit> Walk(Fixture& fx, const std::string& q, const std::string& sort, size_t limit,
                          const Page& full, size_t from, size_t count) {
  std::vector<PageHit> out;
  SearchRequest r = Request(q, sort, limit);
  if (from > 0) r.search_after = full.hits[from - 1].sort_key;
  while (out.size() < count) {
    const Page page = fx.Run(r);
    CHECK(page.total == full.total);  // every match, not the ones left
    if (page.hits.empty()) break;
    REQUIRE(page.hits.size() <= limit);
    out.insert(out.end(), page.hits.begin(), page.hits.end());
    r.search_after = page.hits.back().sort_key;
    REQUIRE(out.size() <= full.total);  // a walk that repeats itself would never end
  }
  if (out.size() > count) out.resize(count);
  return out;
}

std::vector<std::string> Ids(const std::vector<PageHit>& hits) {
  std::vector<std::string> out;
  for (const PageHit& h : hits) out.push_back(h.id);
  return out;
}

TEST_CASE("searchAfter walks equal the full answer, in the oracle's order", "[postings]") {
  Fixture fx;
  Corpus corpus(20260512);
  // One segment dense enough (4,500 documents with "w00") for the
  // disjunction's floor and the conjunction's required terms, and a few
  // small ones (the segments' top-ks run in parallel and merge).
  for (int i = 0; i < 4500; ++i) corpus.Add(fx.store, fx.docs);
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  for (int b = 0; b < 3; ++b) {
    for (int i = 0; i < 250; ++i) corpus.Add(fx.store, fx.docs);
    REQUIRE(fx.store.Flush(*fx.idx).ok());
  }
  WaitForMerges(*fx.idx);

  struct Case {
    const char* q;
    const char* sort;
  };
  const Case cases[] = {
      {"w00 w03", ""},                     // a flat disjunction over a dense list: the sampled floor, MaxScore
      {"w02 w05 w07", "_score"},           // MaxScore
      {"w00 AND w01", ""},                 // a conjunction of many matches (required terms first)
      {"+w03 w04 -w05", ""},               // a conjunction with a prohibited clause
      {"w1*", ""},                         // an expansion (MaxScore over its terms)
      {"w*", ""},                          // more than 16 terms: term-at-a-time
      {"\"w00 w01\"", ""},                 // a phrase over both fields, the title's terms light: ScoreLeafTopK
      {"title:w02 OR (w03 AND w06)", ""},  // the general path
      {"*", "n"},
      {"*", "-n"},
      {"w00", "k"},
      {"*", "-k"},
      {"*", "d"},
      {"w02 OR w04", "-d,k"},
      {"*", "k,-n,d"},
      {"w01 w03", "k,_score"},   // a field, then relevance
      {"w01 w03", "_score,-n"},  // relevance, then a field
      {"w02", "n,_score,k"},
  };
  for (const Case& c : cases) {
    INFO("q=" << c.q << " sort=" << c.sort);
    const Page full = fx.Run(Request(c.q, c.sort, 10000));
    REQUIRE(full.total == full.hits.size());
    REQUIRE(full.total > 100);
    // The full answer's order is the oracle's, over its own matches and scores.
    std::map<std::string, double> score;
    for (const PageHit& h : full.hits) score[h.id] = h.score;
    std::vector<std::string> expected = Ids(full.hits);
    std::sort(expected.begin(), expected.end(), Oracle(fx.docs, score, ParseSort(c.sort)));
    CHECK(Ids(full.hits) == expected);
    // Each hit's key: one value per sort key (the score by default), then the id.
    const size_t key_size = std::max<size_t>(1, ParseSort(c.sort).size()) + 1;
    for (const PageHit& h : full.hits) REQUIRE(h.sort_key.size() == key_size);
    for (size_t limit : {size_t{1}, size_t{7}, size_t{100}, size_t{999}}) {
      INFO("limit=" << limit);
      // A request per hit or seven is dear: pages of 1 walk the whole
      // answer only when it is small, and under a sanitizer (each request
      // several times dearer; with whole walks of 7s this test case took
      // 272 s of postings_tests' 387 s under ASan) pages of 1 and 7 walk
      // two windows of 60 hits, the top one and one from the middle.
      // Otherwise the whole answer.
      const bool whole = limit >= 100 || (!kSanitizerBuild && (limit == 7 || full.total <= 1500));
      std::vector<std::pair<size_t, size_t>> windows = {{0, full.total}};  // (from, count)
      if (!whole) windows = {{0, 60}, {full.total / 2, 60}};
      for (const auto& [from, count] : windows) {
        INFO("from=" << from);
        const std::vector<PageHit> walked = Walk(fx, c.q, c.sort, limit, full, from, count);
        const std::vector<PageHit> expected(full.hits.begin() + from,
                                            full.hits.begin() + from + std::min<size_t>(count, full.total - from));
        REQUIRE(Ids(walked) == Ids(expected));
        for (size_t i = 0; i < walked.size(); ++i) CHECK(walked[i].sort_json == expected[i].sort_json);
      }
    }
    // Offset paging agrees (the window is the server's to enforce).
    std::vector<std::string> by_offset;
    for (size_t offset = 0; offset < full.total; offset += 250) {
      SearchRequest r = Request(c.q, c.sort, 250);
      r.offset = offset;
      for (const PageHit& h : fx.Run(r).hits) by_offset.push_back(h.id);
    }
    CHECK(by_offset == Ids(full.hits));
    // After the last hit: nothing, and still the whole total.
    SearchRequest last = Request(c.q, c.sort, 10);
    last.search_after = full.hits.back().sort_key;
    const Page end = fx.Run(last);
    CHECK(end.hits.empty());
    CHECK(end.total == full.total);
    // A key between two hits (not any hit's): the page starts at the next one.
    const PageHit& mid = full.hits[full.hits.size() / 2];
    SearchRequest between = Request(c.q, c.sort, 3);
    between.search_after = mid.sort_key;
    between.search_after->back().text += "\x01";  // just after mid's id, before any other id that follows it
    const Page next = fx.Run(between);
    REQUIRE(!next.hits.empty());
    CHECK(next.hits[0].id == full.hits[full.hits.size() / 2 + 1].id);
  }
}

TEST_CASE("searchAfter over integers beyond 2^53 keeps their order exactly", "[postings]") {
  Fixture fx;
  const char* values[] = {"9007199254740992",
                          "9007199254740993",
                          "9007199254740994",
                          "9007199254740995",
                          "18446744073709551615",
                          "18446744073709551614",
                          "-9223372036854775808",
                          "2.5",
                          "0"};
  for (size_t i = 0; i < std::size(values); ++i)
    for (int copy = 0; copy < 2; ++copy)
      fx.store.Put("v" + std::to_string(i) + "_" + std::to_string(copy),
                   std::string(R"({"body": "x", "n": )") + values[i] + "}");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  for (const char* sort : {"n", "-n"}) {
    INFO(sort);
    const Page full = fx.Run(Request("x", sort, 100));
    REQUIRE(full.hits.size() == 2 * std::size(values));
    CHECK(Ids(Walk(fx, "x", sort, 1, full, 0, full.total)) == Ids(full.hits));
    for (const PageHit& h : full.hits) {
      const std::string& want = values[h.id[1] - '0'];
      CHECK(h.sort_json == "[" + want + ",\"" + h.id + "\"]");  // each value exactly as indexed
    }
  }
}

// With a field sort, a walk is exact under concurrent writes: no document
// twice, and every document that matched throughout (never deleted; sort
// values never change here) returned, in key order.
TEST_CASE("searchAfter with deletes and inserts between pages", "[postings]") {
  for (const char* sort : {"n", "-n", "k", "-d,k", "k,-n,d"}) {
    INFO(sort);
    Fixture fx;
    Corpus corpus(42);
    for (int b = 0; b < 4; ++b) {
      for (int i = 0; i < 500; ++i) corpus.Add(fx.store, fx.docs);
      REQUIRE(fx.store.Flush(*fx.idx).ok());
    }
    const std::string q = "w00";
    const Page first_full = fx.Run(Request(q, sort, 10000));
    std::set<std::string> initial;
    for (const PageHit& h : first_full.hits) initial.insert(h.id);
    std::set<std::string> deleted, returned;
    std::vector<std::string> order;
    std::map<std::string, double> zero;  // field sorts: no scores
    SearchRequest r = Request(q, sort, 40);
    size_t pages = 0;
    for (;;) {
      const Page page = fx.Run(r);
      for (const PageHit& h : page.hits) {
        CHECK(returned.insert(h.id).second);  // never twice
        CHECK(!deleted.count(h.id));          // never one deleted before this page
        order.push_back(h.id);
        zero[h.id] = 0;
      }
      if (page.hits.empty()) break;
      r.search_after = page.hits.back().sort_key;
      ++pages;
      // Between pages: delete some live documents (returned or not), add
      // new ones (they may or may not be returned), in their own batch.
      std::vector<std::string> live;
      for (const auto& [id, doc] : fx.docs)
        if (!deleted.count(id)) live.push_back(id);
      for (int i = 0; i < 12; ++i) {
        const std::string& id = live[corpus.rng()() % live.size()];
        if (deleted.insert(id).second) fx.store.Delete(id);
      }
      for (int i = 0; i < 8; ++i) corpus.Add(fx.store, fx.docs);
      REQUIRE(fx.store.Flush(*fx.idx).ok());
    }
    CHECK(pages > 20);
    for (const std::string& id : initial)
      if (!deleted.count(id)) CHECK(returned.count(id));  // matched throughout: never skipped
    // The walk is in key order (the oracle's), strictly.
    const Oracle less(fx.docs, zero, ParseSort(sort));
    for (size_t i = 1; i < order.size(); ++i) CHECK(less(order[i - 1], order[i]));
  }
}

// API.md: with a field sort a walk is exact under concurrent writes. A
// rewrite that moves a document's sort value past the walk's key, forward
// (it was returned: read as the index is now, it would come again) or back
// (not yet returned: it would be skipped), leaves it where the walk found
// it (walks.h): every page reads the snapshot the first page read, less
// the documents deleted since.
TEST_CASE("searchAfter: a field-sorted walk keeps each document's place while writes move it", "[postings]") {
  for (const char* sort : {"n", "-n", "k,-n", "d,k"}) {
    INFO(sort);
    Fixture fx;
    std::mt19937_64 rng(7);
    auto doc = [&](int n, int k, int day) {
      return R"({"body": "w00 w01", "n": )" + std::to_string(n) + R"(, "k": "k)" + std::to_string(k) +
             R"(", "d": "2024-03-)" + (day < 10 ? "0" : "") + std::to_string(day) + R"("})";
    };
    std::map<std::string, std::string> first_key;  // id -> its "sort" when the walk began
    for (int b = 0; b < 3; ++b) {
      for (int i = 0; i < 100; ++i)
        fx.store.Put("d" + std::to_string(b * 100 + i), doc(static_cast<int>(rng() % 1000), static_cast<int>(rng() % 4),
                                                            1 + static_cast<int>(rng() % 28)));
      REQUIRE(fx.store.Flush(*fx.idx).ok());
    }
    for (const PageHit& h : fx.Run(Request("w00", sort, 1000)).hits) first_key[h.id] = h.sort_json;
    REQUIRE(first_key.size() == 300);
    std::set<std::string> returned, deleted;
    SearchRequest r = Request("w00", sort, 7);
    int fresh = 0;
    size_t pages = 0;
    for (;;) {
      const Page page = fx.Run(r);
      CHECK(page.total == 300);  // the walk's moment: its first page's matches
      for (const PageHit& h : page.hits) {
        CHECK(returned.insert(h.id).second);  // never twice
        CHECK(!deleted.count(h.id));          // never one deleted before this page
        REQUIRE(first_key.count(h.id));       // never one added since (it did not match throughout)
        CHECK(h.sort_json == first_key[h.id]);  // where the walk found it
      }
      if (page.hits.empty()) break;
      r.search_after = page.hits.back().sort_key;
      ++pages;
      // Between pages: rewrite documents with new sort values, returned or
      // not (each may cross the key either way), delete one not yet
      // returned, add one; now and then merge, so that some of the walk's
      // segments are gone from the index (deletes are then found by id).
      for (int i = 0; i < 6; ++i) {
        const std::string id = "d" + std::to_string(rng() % 300);
        if (!deleted.count(id))
          fx.store.Put(id, doc(static_cast<int>(rng() % 1000), static_cast<int>(rng() % 4), 1 + static_cast<int>(rng() % 28)));
      }
      for (int tries = 0; tries < 20; ++tries) {
        const std::string id = "d" + std::to_string(rng() % 300);
        if (returned.count(id) || deleted.count(id)) continue;
        deleted.insert(id);
        fx.store.Delete(id);
        break;
      }
      fx.store.Put("new" + std::to_string(++fresh), doc(static_cast<int>(rng() % 1000), 0, 1));
      REQUIRE(fx.store.Flush(*fx.idx).ok());
      if (pages % 5 == 0) WaitForMerges(*fx.idx);
    }
    CHECK(pages > 20);
    for (const auto& [id, key] : first_key)
      if (!deleted.count(id)) CHECK(returned.count(id));  // matched throughout: never skipped
    // A new walk reads the index as it is now: the new documents, the moved values.
    const Page now = fx.Run(Request("w00", sort, 1000));
    CHECK(now.total == 300 - deleted.size() + static_cast<size_t>(fresh));
  }
}

TEST_CASE("searchAfter: a pinned walk is found however its key's numbers and its sort are written", "[postings]") {
  Fixture fx;
  for (int i = 0; i < 50; ++i) {
    char id[8];
    std::snprintf(id, sizeof id, "d%02d", i);
    fx.store.Put(id, R"({"body": "w00", "n": )" + std::to_string(i) + "}");
  }
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  const Page first = fx.Run(Request("w00", "n", 5));
  REQUIRE(first.hits.size() == 5);
  CHECK(first.hits.back().sort_json == R"([4,"d04"])");
  // Between pages: d02 (returned) moves ahead of the key, d30 behind it; a new one comes.
  fx.store.Put("d02", R"({"body": "w00", "n": 7.5})");
  fx.store.Put("d30", R"({"body": "w00", "n": 1})");
  fx.store.Put("new", R"({"body": "w00", "n": 6})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  for (const char* number : {"4", "4.0", "4e0", "0.4e1", "4.000000000000000000001"}) {
    for (const char* sort : {"n", "+n", " n"}) {
      INFO(number << " " << sort);
      SearchRequest r = Request("w00", sort, 5);
      r.search_after = std::vector<SortValue>{{SortValue::Type::kNumber, number}, {SortValue::Type::kString, "d04"}};
      const Page page = fx.Run(r);
      CHECK(page.total == 50);  // the walk's moment
      REQUIRE(page.hits.size() == 5);
      CHECK(Ids(page.hits) == std::vector<std::string>{"d05", "d06", "d07", "d08", "d09"});
    }
  }
  // Another key, or another query, is another walk: the index as it is now.
  SearchRequest r = Request("w00 OR w01", "n", 5);
  r.search_after = std::vector<SortValue>{{SortValue::Type::kNumber, "4"}, {SortValue::Type::kString, "d04"}};
  const Page now = fx.Run(r);
  CHECK(now.total == 51);
  CHECK(Ids(now.hits) == std::vector<std::string>{"d05", "d06", "new", "d07", "d02"});
}

TEST_CASE("searchAfter: pinned walks are bounded, and first pages cannot push walks out", "[postings]") {
  WalkPins pins;
  auto snap = std::make_shared<const Snapshot>();
  const uint64_t g = pins.generation();
  // Walks going on: at most kMaxWalks, the latest.
  for (size_t i = 0; i <= kMaxWalks; ++i) pins.Pin("walk" + std::to_string(i), snap, g, true, "");
  CHECK(pins.Find("walk0") == nullptr);
  CHECK(pins.Find("walk1") == snap);
  // First pages (which nobody may continue) push out each other, not walks.
  for (size_t i = 0; i < 3 * kMaxFirstPages; ++i) pins.Pin("first" + std::to_string(i), snap, g, false, "");
  CHECK(pins.Find("walk1") == snap);
  CHECK(pins.Find("first0") == nullptr);
  CHECK(pins.Find("first" + std::to_string(3 * kMaxFirstPages - 1)) == snap);
  CHECK(pins.size() == kMaxWalks + kMaxFirstPages);
  // A page read at walk1's pin leaves it among the first pages, for a retry, until they push it out.
  pins.Pin("walk1-next", snap, g, true, "walk1");
  CHECK(pins.Find("walk1") == snap);
  for (size_t i = 0; i < kMaxFirstPages; ++i) pins.Pin("again" + std::to_string(i), snap, g, false, "");
  CHECK(pins.Find("walk1") == nullptr);
  CHECK(pins.Find("walk1-next") == snap);
  // Pinned again: one pin, the newest of its pool.
  const size_t n = pins.size();
  pins.Pin("walk2", snap, g, true, "");
  CHECK(pins.size() == n);
  // Clear drops every pin and refuses one made by a search that began before it.
  pins.Clear();
  CHECK(pins.size() == 0);
  pins.Pin("late", snap, g, true, "");
  CHECK(pins.Find("late") == nullptr);
  pins.Pin("late", snap, pins.generation(), true, "");
  CHECK(pins.Find("late") == snap);
}

TEST_CASE("searchAfter: a key that does not fit the sort is refused", "[postings]") {
  Fixture fx;
  fx.store.Put("a", R"({"body": "x", "n": 1, "k": "p", "d": "2024-01-01"})");
  REQUIRE(fx.store.Flush(*fx.idx).ok());
  auto num = [](std::string t) { return SortValue{SortValue::Type::kNumber, std::move(t)}; };
  auto str = [](std::string t) { return SortValue{SortValue::Type::kString, std::move(t)}; };
  const SortValue null{SortValue::Type::kNull, ""};
  auto err = [&](const std::string& sort, std::vector<SortValue> key, size_t offset = 0) -> std::string {
    SearchRequest r = Request("x", sort, 10);
    r.search_after = std::move(key);
    r.offset = offset;
    auto res = fx.idx->Search(r);
    if (res.ok()) return "ok";
    CHECK(res.status().code() == StatusCode::kInvalidArgument);
    CHECK(res.status().message().starts_with("searchAfter"));  // the server answers these invalid_argument
    return res.status().message();
  };
  CHECK(err("", {num("1.5"), str("a")}) == "ok");
  CHECK(err("n,k,d", {null, null, null, str("a")}) == "ok");  // missing values are null
  CHECK(err("n,-k,_score", {num("-3"), str(""), num("0"), str("")}) == "ok");
  CHECK(err("", {}) ==
        "searchAfter: expected 2 values as a hit's \"sort\" holds them (_score, then the document id), got 0");
  CHECK(err("n,_score", {num("1"), str("a")}) ==
        "searchAfter: expected 3 values as a hit's \"sort\" holds them (sort field 'n', _score, then the document id), "
        "got 2");
  CHECK(err("", {str("1.5"), str("a")}) == "searchAfter[0]: _score takes a number, got a string");
  CHECK(err("", {null, str("a")}) == "searchAfter[0]: _score takes a number, got null");
  CHECK(err("", {num("1"), num("2")}) == "searchAfter[1]: the document id takes a string, got the number 2");
  CHECK(err("", {num("1"), null}) == "searchAfter[1]: the document id takes a string, got null");
  CHECK(err("n", {str("1"), str("a")}) == "searchAfter[0]: sort field 'n' takes a number or null, got a string");
  CHECK(err("n", {num("1e999"), str("a")}) ==
        "searchAfter[0]: sort field 'n' takes a number or null, got the number 1e999");
  CHECK(err("d", {str("2024-01-01"), str("a")}) ==
        "searchAfter[0]: sort field 'd' takes a number (milliseconds since the epoch) or null, got a string");
  CHECK(err("k", {num("1"), str("a")}) == "searchAfter[0]: sort field 'k' takes a string or null, got the number 1");
  CHECK(err("", {num("1"), str("a")}, 5) ==
        "searchAfter: offset must be 0 with searchAfter (the key says where the page starts), got 5");
}

}  // namespace
}  // namespace corvid::postings
