// Common-word pair tables (postings/pairs.h): which terms are common, and
// the documents of every pair, against a brute force over the tokens.
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <random>
#include <set>

#include "postings/pairs.h"
#include "postings/segment.h"
#include "postings/snapshot.h"
#include "tests/postings/test_util.h"

namespace corvid::postings {
namespace {

using testing::ParseHits;
using testing::Store;
using testing::TempDir;

TEST_CASE("common terms are the most frequent ones above 1/64 of the documents", "[postings]") {
  // df 10 and 14 are below 1000/64 = 15: never common.
  std::vector<uint32_t> df = {10, 500, 16, 14, 900, 500};
  CHECK(ChooseCommonTerms(df, 1000) == std::vector<uint32_t>{1, 2, 4, 5});
  // More candidates than kMaxCommonTerms: the largest df win, ties to the lower index.
  std::vector<uint32_t> many(100, 50);
  for (uint32_t i = 0; i < 100; ++i) many[i] = 50 + (i % 10);
  auto common = ChooseCommonTerms(many, 100);
  REQUIRE(common.size() == kMaxCommonTerms);
  std::set<uint32_t> chosen(common.begin(), common.end());
  for (uint32_t i = 0; i < 100; ++i)
    for (uint32_t j = 0; j < 100; ++j)
      if (chosen.count(i) && !chosen.count(j)) CHECK((many[i] > many[j] || (many[i] == many[j] && i < j)));
  CHECK(std::is_sorted(common.begin(), common.end()));
}

TEST_CASE("pair tables equal a brute force over the tokens", "[postings]") {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    std::mt19937 rng(seed);
    // 150 words, Zipf-like: more than kMaxCommonTerms words pass 1/64.
    std::vector<std::string> vocab;
    // Every seventh word is longer than the builder's pending-token window takes.
    for (int i = 0; i < 150; ++i) vocab.push_back(std::string("w").append(std::to_string(i)).append(i % 7 == 0 ? 45 : 0, 'l'));
    std::vector<double> weight;
    for (int i = 0; i < 150; ++i) weight.push_back(1.0 / (i + 3));
    std::discrete_distribution<int> word(weight.begin(), weight.end());
    const uint32_t ndocs = 1500;
    SegmentBuilder b(1, 0);
    // Brute force: (first, second) term names -> docs where first at p, second at p + 1.
    std::map<std::pair<std::string, std::string>, std::set<uint32_t>> expect;
    for (uint32_t d = 0; d < ndocs; ++d) {
      const uint32_t doc = b.AddDoc(std::string("d").append(std::to_string(d)));
      std::uniform_int_distribution<int> len(1, 40);
      std::vector<std::pair<std::string, uint32_t>> tokens;
      uint32_t p = 0;
      // Up to three array elements: positions jump by 100 between them,
      // so no pair spans two elements.
      const int values = 1 + static_cast<int>(rng() % 3);
      for (int v = 0; v < values; ++v) {
        const int n = len(rng);
        for (int i = 0; i < n; ++i) tokens.emplace_back(vocab[word(rng)], p++);
        p += 100;
      }
      for (const auto& [t, pos] : tokens) b.AddToken(0, doc, t, pos);
      b.SetLength(0, doc, static_cast<uint32_t>(tokens.size()));
      for (size_t i = 0; i + 1 < tokens.size(); ++i)
        if (tokens[i + 1].second == tokens[i].second + 1) expect[{tokens[i].first, tokens[i + 1].first}].insert(doc);
    }
    TempDir dir;
    REQUIRE(WriteFileAtomic(dir.path(), "s.cvs", b.Encode(7)).ok());
    auto opened = Segment::Open(dir.path() + "/s.cvs", 7, 1, 0);
    REQUIRE(opened.ok());
    const Segment& s = **opened;
    std::vector<uint32_t> df(s.term_count(0));
    for (uint32_t i = 0; i < df.size(); ++i) df[i] = s.entry(0, i).doc_freq;
    const auto common = ChooseCommonTerms(df, ndocs);
    REQUIRE(common.size() == kMaxCommonTerms);  // the corpus has more candidates than that
    const std::set<uint32_t> is_common(common.begin(), common.end());
    size_t answered = 0, nonempty = 0;
    for (uint32_t i = 0; i < s.term_count(0); ++i) {
      for (uint32_t j = 0; j < s.term_count(0); ++j) {
        ConstBitmap got;
        const bool known = s.PairPostings(0, i, j, &got);
        REQUIRE(known == (is_common.count(i) && is_common.count(j)));
        if (!known) continue;
        ++answered;
        std::vector<uint32_t> docs(roaring_bitmap_get_cardinality(got.get()));
        roaring_bitmap_to_uint32_array(got.get(), docs.data());
        auto it = expect.find({std::string(s.term(0, i)), std::string(s.term(0, j))});
        const std::set<uint32_t> want = it == expect.end() ? std::set<uint32_t>{} : it->second;
        INFO("seed " << seed << " pair " << s.term(0, i) << " " << s.term(0, j));
        CHECK(std::set<uint32_t>(docs.begin(), docs.end()) == want);
        nonempty += !want.empty();
      }
    }
    CHECK(answered == kMaxCommonTerms * kMaxCommonTerms);
    CHECK(nonempty > 1000);  // the test looks at real pairs, not only empty ones
  }
}

TEST_CASE("pairs of tokens that share a position", "[postings]") {
  // No analyzer puts two tokens at one position, but the builder accepts
  // it; the pair table must still list every word followed by another.
  std::vector<uint32_t> docs = {0, 1};
  std::vector<uint32_t> one = {1, 1};
  const uint8_t a_pos[] = {0, 5};     // a: doc 0 at 0; doc 1 at 5
  const uint8_t b_pos[] = {0, 6};     // b: doc 0 at 0 (beside a); doc 1 at 6
  const uint8_t c_pos[] = {1, 7};     // c: doc 0 at 1; doc 1 at 7
  std::vector<PairSource> sources = {{docs, one, a_pos}, {docs, one, b_pos}, {docs, one, c_pos}};
  std::map<std::pair<int, int>, std::vector<uint32_t>> got;
  for (const auto& p : BuildPairs(sources)) got[{p.first, p.second}] = p.docs;
  const std::map<std::pair<int, int>, std::vector<uint32_t>> want = {
      {{0, 2}, {0}}, {{1, 2}, {0, 1}}, {{0, 1}, {1}}};  // doc 0: a/b then c; doc 1: a b c
  CHECK(got == want);
}

TEST_CASE("pairs of logged tokens that share a position or come out of order", "[postings]") {
  // A batch builds its pair tables from the token log; a document whose
  // positions do not increase in log order takes the sorting path.
  SegmentBuilder b(1, 0);
  const uint32_t d0 = b.AddDoc("d0"), d1 = b.AddDoc("d1"), d2 = b.AddDoc("d2");
  b.AddToken(0, d0, "a", 0);  // a and b at 0, then c
  b.AddToken(0, d0, "b", 0);
  b.AddToken(0, d0, "c", 1);
  b.AddToken(0, d1, "a", 5);  // a b c in order
  b.AddToken(0, d1, "b", 6);
  b.AddToken(0, d1, "c", 7);
  b.AddToken(0, d2, "c", 3);  // c b a, added backwards: a at 1, b at 2, c at 3
  b.AddToken(0, d2, "b", 2);
  b.AddToken(0, d2, "a", 1);
  for (uint32_t d : {d0, d1, d2}) b.SetLength(0, d, 3);
  TempDir dir;
  {
    // Below kMinPairTableDocs documents a segment has no pair tables.
    REQUIRE(WriteFileAtomic(dir.path(), "small.cvs", b.Encode(7)).ok());
    auto small = Segment::Open(dir.path() + "/small.cvs", 7, 1, 0);
    REQUIRE(small.ok());
    ConstBitmap bm;
    CHECK_FALSE((*small)->PairPostings(0, 0, 1, &bm));
  }
  // Fillers with a, b and c never next to each other.
  while (b.doc_count() < kMinPairTableDocs) {
    const uint32_t d = b.AddDoc(std::string("f").append(std::to_string(b.doc_count())));
    b.AddToken(0, d, "a", 0);
    b.AddToken(0, d, "b", 10);
    b.AddToken(0, d, "c", 20);
    b.SetLength(0, d, 3);
  }
  REQUIRE(WriteFileAtomic(dir.path(), "s.cvs", b.Encode(7)).ok());
  auto opened = Segment::Open(dir.path() + "/s.cvs", 7, 1, 0);
  REQUIRE(opened.ok());
  const Segment& s = **opened;
  REQUIRE(s.term_count(0) == 3);  // a, b, c: all common
  std::map<std::pair<int, int>, std::vector<uint32_t>> got;
  for (uint32_t i = 0; i < 3; ++i)
    for (uint32_t j = 0; j < 3; ++j) {
      ConstBitmap bm;
      REQUIRE(s.PairPostings(0, i, j, &bm));
      std::vector<uint32_t> docs(roaring_bitmap_get_cardinality(bm.get()));
      roaring_bitmap_to_uint32_array(bm.get(), docs.data());
      if (!docs.empty()) got[{static_cast<int>(i), static_cast<int>(j)}] = docs;
    }
  const std::map<std::pair<int, int>, std::vector<uint32_t>> want = {
      {{0, 2}, {0}}, {{1, 2}, {0, 1, 2}}, {{0, 1}, {1, 2}}};
  CHECK(got == want);
}

TEST_CASE("a field without common terms has an empty pair table", "[postings]") {
  // Each word in one document only: below 1/64 of the documents.
  SegmentBuilder b(1, 0);
  for (uint32_t d = 0; d < kMinPairTableDocs; ++d) {
    const uint32_t doc = b.AddDoc(std::string("d").append(std::to_string(d)));
    b.AddToken(0, doc, std::string("a").append(std::to_string(d)), 0);
    b.AddToken(0, doc, std::string("b").append(std::to_string(d)), 1);
    b.SetLength(0, doc, 2);
  }
  TempDir dir;
  REQUIRE(WriteFileAtomic(dir.path(), "s.cvs", b.Encode(7)).ok());
  auto opened = Segment::Open(dir.path() + "/s.cvs", 7, 1, 0);
  REQUIRE(opened.ok());
  ConstBitmap got;
  CHECK_FALSE((*opened)->PairPostings(0, 0, 1, &got));
}

// The ids a query matches, and its total.
std::pair<uint64_t, std::set<std::string>> Matches(SearchIndex& idx, const std::string& q) {
  SearchRequest r;
  r.q = q;
  r.limit = 100000;
  auto res = idx.Search(r);
  REQUIRE(res.ok());
  std::set<std::string> ids;
  for (const auto& h : ParseHits(res->hits_json)) ids.insert(h.id);
  return {res->total, ids};
}

TEST_CASE("phrase matches with pair tables equal a brute force over positions", "[postings]") {
  auto def = SearchDefinition::Compile(R"({"type":"search","collection":"c","fields":{"body":{"analyzer":"standard"}}})");
  REQUIRE(def.ok());
  std::mt19937 rng(11);
  // 150 words, Zipf-like: the most frequent are common terms (pair tables),
  // the rest are verified by positions.
  std::vector<double> weight;
  for (int i = 0; i < 150; ++i) weight.push_back(1.0 / (i + 1));
  std::discrete_distribution<int> word(weight.begin(), weight.end());
  auto w = [&] { return std::string("w").append(std::to_string(word(rng))); };
  // Each document: an array of two values; positions jump by 100 between
  // them (kArrayPositionGap), so no phrase spans both.
  std::map<std::string, std::vector<std::pair<std::string, int>>> tokens;  // id -> (word, position)
  TempDir merged_dir, one_dir;
  auto merged = std::move(SearchIndex::Open(merged_dir.path(), *def)).value();
  auto one = std::move(SearchIndex::Open(one_dir.path(), *def)).value();
  Store merged_store, one_store;
  for (int b = 0; b < 40; ++b) {
    for (int i = 0; i < 50; ++i) {
      const std::string id = std::string("d").append(std::to_string(b * 50 + i));
      auto& t = tokens[id];
      std::string json = R"({"body": [")";
      for (int k = 0; k < 12; ++k) {
        t.emplace_back(w(), k);
        json.append(k ? " " : "").append(t.back().first);
      }
      json.append(R"(", ")");
      for (int k = 0; k < 2; ++k) {
        t.emplace_back(w(), 12 + 100 + k);
        json.append(k ? " " : "").append(t.back().first);
      }
      json.append(R"("]})");
      merged_store.Put(id, json);
      one_store.Put(id, json);
    }
    REQUIRE(merged_store.Flush(*merged).ok());
  }
  REQUIRE(one_store.Flush(*one).ok());
  WaitForMerges(*merged);
  // The phrase rule (searcher.cc): distinct positions p_i of the words
  // (a repeated word needs one per repetition) with
  // max(p_i - i) - min(p_i - i) <= slop.
  auto brute = [&](const std::vector<std::string>& words, int slop) {
    std::set<std::string> out;
    for (const auto& [id, t] : tokens) {
      std::vector<std::vector<int>> pos(words.size());
      for (const auto& [word, p] : t)
        for (size_t i = 0; i < words.size(); ++i)
          if (word == words[i]) pos[i].push_back(p);
      std::vector<int> chosen;
      std::function<bool(size_t, int, int)> any = [&](size_t i, int lo, int hi) {
        if (i == words.size()) return hi - lo <= slop;
        for (int p : pos[i]) {
          if (std::find(chosen.begin(), chosen.end(), p) != chosen.end()) continue;
          const int q = p - static_cast<int>(i);
          chosen.push_back(p);
          const bool found = any(i + 1, std::min(lo, q), std::max(hi, q));
          chosen.pop_back();
          if (found) return true;
        }
        return false;
      };
      if (any(0, INT32_MAX, INT32_MIN)) out.insert(id);
    }
    return out;
  };
  size_t checked = 0, matched = 0;
  for (int n = 0; n < 120; ++n) {
    const size_t words = n < 60 ? 2 : n < 100 ? 3 : 2;
    const int slop = n < 100 ? 0 : 1;
    std::vector<std::string> ws;
    for (size_t k = 0; k < words; ++k) ws.push_back(n % 7 == 0 ? "w0" : w());
    std::string q = "\"";
    for (size_t k = 0; k < words; ++k) q.append(k ? " " : "").append(ws[k]);
    q.append("\"");
    if (slop > 0) q.append("~").append(std::to_string(slop));
    const auto want = brute(ws, slop);
    INFO("query " << q);
    for (SearchIndex* idx : {merged.get(), one.get()}) {
      const auto [total, ids] = Matches(*idx, q);
      CHECK(total == want.size());
      CHECK(ids == want);
      ++checked;
    }
    matched += !want.empty();
  }
  CHECK(checked == 240);
  CHECK(matched > 60);  // the comparison is mostly of non-empty sets
}

}  // namespace
}  // namespace corvid::postings
