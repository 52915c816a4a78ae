// Every scoring strategy of postings/search/strategy.h on its own, against
// the exhaustive scorer on the same segments: random corpora (a stop word
// in every body, Zipf-distributed common words, rare words that prefixes
// expand to; several segments, deletes in some), and random queries of each
// strategy's shape. Per segment, a strategy's top-k must be the head of the
// exhaustive ranking (the same documents, bit-identical scores, ties by id),
// with and without a searchAfter key, and the planner must pick the
// strategy the shape calls for. RunSearch is tested whole by oracle_test.cc;
// here a strategy that went wrong cannot hide behind another.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "postings/query_parser.h"
#include "postings/search/compiler.h"
#include "postings/search/strategy.h"
#include "postings/snapshot.h"
#include "tests/postings/test_util.h"

namespace corvid::postings {
namespace {

using namespace search;
using testing::Store;
using testing::TempDir;

constexpr const char* kDef = R"({"type": "search", "collection": "c",
  "fields": {"title": {"analyzer": "standard", "boost": 2}, "body": {"analyzer": "standard"}}})";

// w0 in every body (a stop word: its bound is below 1/1000 of a rare
// word's); w1..w39 Zipf-like; x<n> rare (x1* expands to x1, x10.., x100..).
std::string Common(std::mt19937_64& rng) {
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  return "w" + std::to_string(1 + static_cast<int>(39 * u * u * u));
}

std::string Rare(std::mt19937_64& rng) { return "x" + std::to_string(rng() % 1500); }

std::string Text(std::mt19937_64& rng, size_t lo, size_t hi) {
  std::string out;
  const size_t n = lo + rng() % (hi - lo + 1);
  for (size_t i = 0; i < n; ++i) {
    if (!out.empty()) out += ' ';
    out += rng() % 8 == 0 ? Rare(rng) : Common(rng);
  }
  return out;
}

struct Corpus {
  TempDir dir;
  Store store;
  std::unique_ptr<SearchIndex> idx;
  std::shared_ptr<const Snapshot> snap;
};

// Batches of `per_batch` documents, then deletes of about a tenth of them,
// then one more batch (a segment without deletes).
void OpenIndex(Corpus& c) {
  auto def = SearchDefinition::Compile(kDef);
  REQUIRE(def.ok());
  auto idx = SearchIndex::Open(c.dir.path(), *def);
  REQUIRE(idx.ok());
  c.idx = std::move(idx).value();
}

void Build(Corpus& c, std::mt19937_64& rng, const std::vector<size_t>& batches) {
  OpenIndex(c);
  size_t next = 0;
  std::vector<std::string> ids;
  auto add = [&](size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const std::string id = "d" + std::to_string(next++);
      const std::string json = R"({"title": ")" + Text(rng, 1, 6) + R"(", "body": "w0 )" + Text(rng, 4, 60) + "\"}";
      c.store.Put(id, json);
      ids.push_back(id);
    }
    REQUIRE(c.store.Flush(*c.idx).ok());
  };
  for (size_t i = 0; i + 1 < batches.size(); ++i) add(batches[i]);
  for (const std::string& id : ids)
    if (rng() % 10 == 0) c.store.Delete(id);
  REQUIRE(c.store.Flush(*c.idx).ok());
  add(batches.back());
  WaitForMerges(*c.idx);
  c.snap = CurrentSnapshot(*c.idx);
  REQUIRE(c.snap->segments.size() >= 2);
}

CompiledQuery CompileText(const Snapshot& snap, const std::string& q) {
  auto parsed = ParseQuery(q, DefaultOperator::kOr);
  REQUIRE(parsed.ok());
  auto compiled = Compile(snap, **parsed);
  REQUIRE(compiled.ok());
  return std::move(compiled).value();
}

// Segment k's final matches (the query's, less the deleted documents).
struct Final {
  SegEval ev;
  Bitmap bm;
  std::vector<uint32_t> docs;
  Final(const Snapshot& snap, const CompiledQuery& q, size_t k) : ev(snap.segments[k], q.nodes) {
    const roaring_bitmap_t* matches = Eval(*q.root, k, ev);
    bm.reset(roaring_bitmap_andnot(matches, snap.segments[k].deleted.get()));
    docs.resize(roaring_bitmap_get_cardinality(bm.get()));
    roaring_bitmap_to_uint32_array(bm.get(), docs.data());
  }
};

// Every final match of segment k scored by Score, best first (ties by id),
// only those strictly after `after` when given.
std::vector<TopEntry> Exhaustive(const Snapshot& snap, const CompiledQuery& q, size_t k, const TopEntry* after) {
  Final f(snap, q, k);
  Norms norms(snap);
  std::vector<double> scores(f.docs.size(), 0.0);
  Score(*q.root, f.bm.get(), k, norms, f.ev, f.docs, scores);
  const Segment& seg = *snap.segments[k].segment;
  std::vector<TopEntry> out;
  for (size_t j = 0; j < f.docs.size(); ++j) {
    const TopEntry e{scores[j], static_cast<uint32_t>(k), f.docs[j], &seg};
    if (after == nullptr || Better(*after, e)) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), Better);
  return out;
}

// The strategy `s` over segment k; nullopt when it declined (kLeafTopK).
std::optional<std::vector<TopEntry>> Run(Strategy s, const Plan& plan, const Snapshot& snap, const CompiledQuery& q,
                                         size_t k, size_t want, const TopEntry* after) {
  TopK top(want, after);
  Norms norms(snap);
  Final f(snap, q, k);
  const SegmentState& state = snap.segments[k];
  // As RunSearch does: without deletes or prohibited clauses every
  // document the flat terms reach is a match, and none is checked.
  const roaring_bitmap_t* check = state.deleted_count > 0 || plan.flat_has_not ? f.bm.get() : nullptr;
  switch (s) {
    case Strategy::kExhaustive:
      FAIL("the reference is not a strategy under test");
      break;
    case Strategy::kDisjunction:
      DisjunctionSegment(plan.flat, k, snap, norms, check, top);
      break;
    case Strategy::kConjunction:
      ConjunctionSegment(plan.conj, k, snap, norms, f.bm.get(), top);
      break;
    case Strategy::kAccumulate: {
      std::vector<const roaring_bitmap_t*> drop;
      if (state.deleted_count > 0) drop.push_back(state.deleted.get());
      SegEval ev(state, q.nodes);
      for (const auto& [occ, c] : q.root->clauses)
        if (occ == Occur::kMustNot) drop.push_back(Eval(*c, k, ev));
      CHECK(AccumulateSegment(plan.flat, k, snap, norms, nullptr, drop, top) == f.docs.size());
      break;
    }
    case Strategy::kLeafTopK:
      if (!ScoreLeafTopK(*q.root, k, norms, f.ev, f.bm.get(), f.docs, want, top)) return std::nullopt;
      break;
  }
  return std::move(top).Sorted();
}

// MaxScore alone (DisjunctionSegment often narrows first).
std::vector<TopEntry> RunMaxScore(const Plan& plan, const Snapshot& snap, const CompiledQuery& q, size_t k,
                                  size_t want, const TopEntry* after) {
  TopK top(want, after);
  Norms norms(snap);
  Final f(snap, q, k);
  MaxScoreSegment(plan.flat, k, snap, norms, f.bm.get(), top);
  return std::move(top).Sorted();
}

void ExpectHead(const std::vector<TopEntry>& got, const std::vector<TopEntry>& all, size_t want) {
  REQUIRE(got.size() == std::min(want, all.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("rank " << i);
    CHECK(got[i].id() == all[i].id());
    CHECK(got[i].score == all[i].score);  // bit-identical: summed in Score's order
  }
}

std::string Disjunction(std::mt19937_64& rng) {
  std::string q;
  const size_t n = 1 + rng() % 6;
  for (size_t i = 0; i < n; ++i) {
    const int r = static_cast<int>(rng() % 10);
    q += (r == 0 ? "title:" : "") + (r == 1 ? Rare(rng) : r == 2 ? std::string("w0") : Common(rng)) + " ";
  }
  if (rng() % 3 == 0) q += "-" + Common(rng);
  return q;
}

std::string Conjunction(std::mt19937_64& rng) {
  std::string q = "+" + Common(rng) + " +" + (rng() % 3 == 0 ? Rare(rng) : Common(rng));
  if (rng() % 2 == 0) q += " " + Common(rng);
  if (rng() % 3 == 0) q += " +title:" + Common(rng);
  if (rng() % 3 == 0) q += " -" + Common(rng);
  return q;
}

std::string Accumulation(std::mt19937_64& rng) {
  std::string q = "x" + std::to_string(1 + rng() % 9) + "*";
  if (rng() % 2 == 0) q += " " + Common(rng);
  if (rng() % 3 == 0) q += " -" + Common(rng);
  return q;
}

std::string LeafPhrase(std::mt19937_64& rng) {
  // A stop word beside a rarer one: the stop word is the light term.
  std::string q = "\"w0 " + Common(rng) + "\"~" + std::to_string(rng() % 40);
  if (rng() % 3 == 0) q = "body:" + q;
  return q;
}

// Builds a corpus from `seed` (three segments, with deletes), plans 40
// queries of the strategy's shape and compares the strategy's top 1, 10
// and 100 per segment, and the page after a key, with the exhaustive
// scorer's, bit for bit.
void CompareWithExhaustive(Strategy strategy, std::string (*make)(std::mt19937_64&), uint64_t seed) {
  std::mt19937_64 rng(seed);
  Corpus c;
  Build(c, rng, {6000, 3000, 1500});
  const Snapshot& snap = *c.snap;
  int compared = 0, with_after = 0, leaf_declined = 0;
  for (int qi = 0; qi < 40; ++qi) {
    const std::string text = make(rng);
    const CompiledQuery q = CompileText(snap, text);
    const Plan plan = PlanSearch(*q.root, /*by_score=*/true);
    INFO("seed " << seed << ", query " << text << ", planned " << StrategyName(plan.strategy));
    REQUIRE(plan.strategy == strategy);
    CHECK(PlanSearch(*q.root, /*by_score=*/false).strategy == Strategy::kExhaustive);
    for (size_t k = 0; k < snap.segments.size(); ++k) {
      const std::vector<TopEntry> all = Exhaustive(snap, q, k, nullptr);
      for (size_t want : {size_t{1}, size_t{10}, size_t{100}}) {
        INFO("segment " << k << " (" << snap.segments[k].deleted_count << " deleted), k " << want);
        const auto got = Run(strategy, plan, snap, q, k, want, nullptr);
        if (!got) {
          ++leaf_declined;
          continue;
        }
        ExpectHead(*got, all, want);
        if (!all.empty()) ++compared;
        if (strategy == Strategy::kDisjunction) ExpectHead(RunMaxScore(plan, snap, q, k, want, nullptr), all, want);
        // The next page: the hits strictly after one of these.
        if (all.size() < 2) continue;
        const TopEntry after = all[rng() % std::min(all.size() - 1, want)];
        const std::vector<TopEntry> rest = Exhaustive(snap, q, k, &after);
        const auto page = Run(strategy, plan, snap, q, k, want, &after);
        if (!page) continue;
        ExpectHead(*page, rest, want);
        ++with_after;
        if (strategy == Strategy::kDisjunction) ExpectHead(RunMaxScore(plan, snap, q, k, want, &after), rest, want);
      }
    }
  }
  // The strategy was compared where it had something to rank (the leaf
  // top-k declines when no term is light, but applies often).
  INFO(StrategyName(strategy) << ": " << compared << " compared, " << with_after << " after a key; declined "
                              << leaf_declined);
  CHECK(compared >= 50);
  CHECK(with_after >= 20);
}

TEST_CASE("disjunction (MaxScore) ranks as the exhaustive scorer does", "[postings][heavy]") {
  CompareWithExhaustive(Strategy::kDisjunction, Disjunction, GENERATE(1u, 2u));
}

TEST_CASE("conjunction (block-max windows) ranks as the exhaustive scorer does", "[postings][heavy]") {
  CompareWithExhaustive(Strategy::kConjunction, Conjunction, GENERATE(1u, 2u));
}

TEST_CASE("accumulation (term at a time over expansions) ranks as the exhaustive scorer does", "[postings][heavy]") {
  CompareWithExhaustive(Strategy::kAccumulate, Accumulation, GENERATE(1u, 2u));
}

TEST_CASE("the single-leaf top-k ranks as the exhaustive scorer does", "[postings][heavy]") {
  CompareWithExhaustive(Strategy::kLeafTopK, LeafPhrase, GENERATE(1u, 2u));
}

// `body:w1` over the one segment of `c`, its files out of the page cache
// first: the answer, and how many of the segment's id pages it read.
// Nullopt when the page cache kept the file (tmpfs?): nothing to measure.
struct ColdSearch {
  SearchResult result;
  size_t id_pages = 0, read = 0;
};
std::optional<ColdSearch> SearchW1Cold(Corpus& c) {
  auto snap = CurrentSnapshot(*c.idx);
  REQUIRE(snap->segments.size() == 1);
  const Segment& seg = *snap->segments[0].segment;
  const char* first = seg.id(0).data();
  const std::string_view last = seg.id(seg.doc_count() - 1);
  const size_t bytes = static_cast<size_t>(last.data() + last.size() - first);
  if (!testing::EvictSegmentFiles(c.dir.path(), seg.file())) {
    WARN("the page cache kept the file (tmpfs?): nothing to measure");
    return std::nullopt;
  }
  SearchRequest req;
  req.q = "body:w1";
  auto result = c.idx->Search(req);
  REQUIRE(result.ok());
  return ColdSearch{std::move(*result), bytes / 4096, testing::ResidentPages(first, bytes)};
}

// Six digits, then `pad` x's (long ids fill more pages).
std::string PaddedId(size_t n, size_t pad) {
  char id[16];
  std::snprintf(id, sizeof id, "%06zu", n);
  return id + std::string(pad, 'x');
}

TEST_CASE("a ranking reads the ids of the hits it keeps, not of every document it offers", "[postings]") {
  // The first 10 documents fill the top 10, and every later block of 64
  // postings of w1 holds one document that enters it (each scores above
  // the one before), so no block is skipped and every document is scored
  // and offered; the other 63 score below the threshold, never equal to
  // it. Their ids (about 1,000 pages of long ids) need not be read.
  Corpus c;
  OpenIndex(c);
  constexpr uint32_t kDocs = 20000;
  for (uint32_t d = 0; d < kDocs; ++d) {
    std::string body = "w1 f";
    const uint32_t extra = d % 64 == 0 ? 1 + d / 64 : d < 10 ? 1 + d : 0;  // tf 1 + extra
    for (uint32_t t = 0; t < extra; ++t) body += " w1";
    if (d < 10 && d > 0) body += " g";  // a length no block's document has: no equal scores
    c.store.Put(PaddedId(d, 200), R"({"title": "t", "body": ")" + body + "\"}");
  }
  REQUIRE(c.store.Flush(*c.idx).ok());
  const auto cold = SearchW1Cold(c);
  if (!cold) return;
  CHECK(cold->result.total == kDocs);
  // The best: the last document of w1's tf 2 + d / 64 (d = 19968).
  CHECK(cold->result.hits_json.find("019968") != std::string::npos);
  INFO("id pages " << cold->id_pages << ", read " << cold->read);
  CHECK(cold->read <= 16);  // the 10 hits' ids (and a page beside each at most)
}

// Every document of `ids` holds w1 once in a body of the same length, so
// all score alike and the answer is the ids in order; `segments` flushes.
void BuildTies(Corpus& c, const std::vector<std::string>& ids, size_t segments) {
  OpenIndex(c);
  for (size_t i = 0; i < ids.size(); ++i) {
    c.store.Put(ids[i], R"({"title": "t", "body": "w1 f"})");
    if ((i + 1) % (ids.size() / segments) == 0) REQUIRE(c.store.Flush(*c.idx).ok());
  }
  REQUIRE(c.store.Flush(*c.idx).ok());
}

std::vector<std::string> ShuffledIds(size_t n, size_t pad) {
  std::vector<std::string> ids;
  for (size_t d = 0; d < n; ++d) ids.push_back(PaddedId(d, pad));
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(11));
  return ids;
}

TEST_CASE("equal scores rank by id, however many tie and wherever they are", "[postings]") {
  // 9,000 equal scores in three segments, ids in no relation to the order
  // they were written in: each page, searched whole, holds the next ids in
  // order. (The top-k's own cases, its bound among them, are below.)
  Corpus c;
  std::vector<std::string> ids = ShuffledIds(9000, 0);
  BuildTies(c, ids, 3);
  std::sort(ids.begin(), ids.end());
  for (size_t limit : {1u, 10u, 200u}) {
    for (size_t offset : {0u, 10u, 4990u}) {
      SearchRequest req;
      req.q = "body:w1";
      req.limit = limit;
      req.offset = offset;
      auto result = c.idx->Search(req);
      REQUIRE(result.ok());
      CHECK(result->total == ids.size());
      std::string expected;
      for (size_t i = offset; i < offset + limit; ++i) expected += "\"" + ids[i] + "\"";
      std::string got;
      for (size_t at = 0; (at = result->hits_json.find("\"id\":", at)) != std::string::npos;) {
        at += 5;
        got += result->hits_json.substr(at, result->hits_json.find('"', at + 1) + 1 - at);
      }
      INFO("limit " << limit << ", offset " << offset);
      CHECK(got == expected);
    }
  }
}

TEST_CASE("a ranking reads a few pages of ids when thousands of documents tie", "[postings]") {
  // 20,000 equal scores in one segment, ids shuffled: the top 10 are the 10
  // smallest ids. Comparing each tie with the worst kept one by id read
  // the ids of nearly all of them (about 1,000 pages of long ids).
  Corpus c;
  std::vector<std::string> ids = ShuffledIds(20000, 200);
  BuildTies(c, ids, 1);
  const auto cold = SearchW1Cold(c);
  if (!cold) return;
  CHECK(cold->result.total == ids.size());
  std::sort(ids.begin(), ids.end());
  const std::string& hits = cold->result.hits_json;
  CHECK(hits.find("\"" + ids[0] + "\"") != std::string::npos);
  CHECK(hits.find("\"" + ids[9] + "\"") != std::string::npos);
  CHECK(hits.find("\"" + ids[10] + "\"") == std::string::npos);
  INFO("id pages " << cold->id_pages << ", read " << cold->read);
  CHECK(cold->read <= 24);  // the 10 hits' ids, a page beside each at most, and the cuts' few comparisons
}

TEST_CASE("the top-k keeps what sorting every offer by score then id keeps", "[postings]") {
  // Two segments of 10,000 documents, ids shuffled (doc order is not id
  // order). Offers in random order, with scores that tie: all alike (more
  // than the bound on held ties: cuts while offering, each segment's cut by
  // walking its id order), three values (the threshold rises and drops its
  // ties), and a few at the top among many distinct ones (a cut by reading
  // the few ids).
  Corpus c;
  BuildTies(c, ShuffledIds(20000, 0), 2);
  auto snap = CurrentSnapshot(*c.idx);
  REQUIRE(snap->segments.size() == 2);
  std::vector<TopEntry> all;
  for (uint32_t k = 0; k < 2; ++k)
    for (uint32_t d = 0; d < snap->segments[k].segment->doc_count(); ++d)
      all.push_back(TopEntry{0, k, d, snap->segments[k].segment.get()});
  REQUIRE(all.size() > TopK::kMaxTies * 2);
  std::mt19937_64 rng(5);
  const char* shapes[] = {"all equal", "three values", "a few at the top"};
  for (const char* shape : shapes) {
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string_view s = shape;
      all[i].score = s == "all equal" ? 1.0 : s == "three values" ? double(rng() % 3) : i % 400 == 0 ? 1e9 : double(i);
    }
    std::shuffle(all.begin(), all.end(), rng);
    for (size_t k : {1u, 10u, 300u}) {
      TopK top(k);
      for (const TopEntry& e : all) top.Offer(e);
      std::vector<TopEntry> got = std::move(top).Sorted();
      std::vector<TopEntry> want = all;
      std::partial_sort(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(k), want.end(), Better);
      want.resize(k);
      INFO(shape << ", k " << k);
      REQUIRE(got.size() == k);
      for (size_t i = 0; i < k; ++i) {
        INFO("rank " << i);
        CHECK(got[i].id() == want[i].id());
        CHECK(got[i].score == want[i].score);
      }
    }
  }
}

TEST_CASE("the planner picks by shape", "[postings]") {
  std::mt19937_64 rng(7);
  Corpus c;
  Build(c, rng, {300, 100});
  const std::pair<const char*, Strategy> cases[] = {
      {"w1", Strategy::kDisjunction},         {"w1 w2 -w3", Strategy::kDisjunction},
      {"title:w1 body:w2", Strategy::kDisjunction},
      {"+w1 +w2", Strategy::kConjunction},    {"+w1 w2 -w3", Strategy::kConjunction},
      {"x1*", Strategy::kAccumulate},         {"\"w1 w2\"", Strategy::kLeafTopK},
      {"+w1 +\"w2 w3\"", Strategy::kExhaustive}, {"(w1 AND w2) OR w3", Strategy::kExhaustive},
      {"*", Strategy::kExhaustive}};
  for (const auto& [text, want] : cases) {
    INFO(text);
    const CompiledQuery q = CompileText(*c.snap, text);
    CHECK(StrategyName(PlanSearch(*q.root, true).strategy) == std::string(StrategyName(want)));
  }
}

}  // namespace
}  // namespace corvid::postings
