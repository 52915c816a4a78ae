// ForEachFuzzyTerm against its oracle: the full dictionary scan with
// EditDistance, on random dictionaries (ASCII, multi-byte UTF-8, malformed
// bytes) and random queries near dictionary terms or anywhere.
#include "postings/fuzzy.h"

#include <catch2/catch.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "postings/snapshot.h"
#include "tests/postings/edit_distance.h"
#include "tests/postings/test_util.h"

namespace corvid::postings {
namespace {

using testing::TempDir;

// A one-field segment whose dictionary is `terms` (any order, duplicates ok).
std::shared_ptr<const Segment> BuildSegment(const TempDir& dir, const std::vector<std::string>& terms) {
  SegmentBuilder b(1, 0);
  uint32_t doc = b.AddDoc("d");
  for (size_t i = 0; i < terms.size(); ++i) b.AddToken(0, doc, terms[i], static_cast<uint32_t>(i));
  b.SetLength(0, doc, static_cast<uint32_t>(terms.size()));
  REQUIRE(WriteFileAtomic(dir.path(), "f.cvs", b.Encode(7)).ok());
  auto seg = Segment::Open(dir.path() + "/f.cvs", 7, 1, 0);
  REQUIRE(seg.ok());
  return *seg;
}

std::vector<uint32_t> Scan(const Segment& seg, std::string_view q, uint32_t max) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < seg.term_count(0); ++i)
    if (testing::EditDistance(seg.term(0, i), q, max) <= max) out.push_back(i);
  return out;
}

std::vector<uint32_t> Fuzzy(const Segment& seg, std::string_view q, uint32_t max) {
  std::vector<uint32_t> out;
  ForEachFuzzyTerm(seg, 0, q, max, [&](uint32_t i) { out.push_back(i); });
  return out;
}

// Strings are sequences of "units" (a code point's bytes, or a lone byte
// for the malformed alphabet); edits act on units.
using Units = std::vector<std::string>;

std::string Join(const Units& u) {
  std::string s;
  for (const auto& x : u) s += x;
  return s;
}

Units RandomUnits(std::mt19937& rng, const Units& alphabet, size_t max_len) {
  std::uniform_int_distribution<size_t> len(0, max_len), pick(0, alphabet.size() - 1);
  Units u(len(rng));
  for (auto& x : u) x = alphabet[pick(rng)];
  return u;
}

// Applies `edits` random insertions/deletions/substitutions/transpositions.
Units Mutate(std::mt19937& rng, Units u, const Units& alphabet, int edits) {
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  for (int e = 0; e < edits; ++e) {
    const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
    const size_t at = std::uniform_int_distribution<size_t>(0, u.size())(rng);
    if (kind == 0)
      u.insert(u.begin() + at, alphabet[pick(rng)]);
    else if (u.empty())
      continue;
    else if (kind == 1)
      u.erase(u.begin() + std::min(at, u.size() - 1));
    else if (kind == 2)
      u[std::min(at, u.size() - 1)] = alphabet[pick(rng)];
    else if (u.size() >= 2) {
      const size_t k = std::min(at, u.size() - 2);
      std::swap(u[k], u[k + 1]);
    }
  }
  return u;
}

void CheckAlphabet(const Units& alphabet, size_t max_len, size_t dict_size, uint32_t seed) {
  std::mt19937 rng(seed);
  TempDir dir;
  std::vector<Units> dict;
  std::vector<std::string> terms;
  for (size_t i = 0; i < dict_size; ++i) {
    dict.push_back(RandomUnits(rng, alphabet, max_len));
    terms.push_back(Join(dict.back()));
  }
  auto seg = BuildSegment(dir, terms);
  std::uniform_int_distribution<size_t> di(0, dict.size() - 1);
  size_t matched = 0;
  for (int k = 0; k < 400; ++k) {
    std::string q;
    if (k % 4 == 3)
      q = Join(RandomUnits(rng, alphabet, max_len + 2));
    else
      q = Join(Mutate(rng, dict[di(rng)], alphabet, k % 3));
    for (uint32_t max = 0; max <= 2; ++max) {
      INFO("query '" << q << "' max " << max);
      auto want = Scan(*seg, q, max);
      auto got = Fuzzy(*seg, q, max);
      REQUIRE(got == want);
      matched += got.size();
    }
  }
  CHECK(matched > 0);
}

TEST_CASE("fuzzy expansion equals the EditDistance scan: ASCII", "[postings]") {
  CheckAlphabet({"a", "b", "c", "d"}, 7, 3000, 1);
  CheckAlphabet({"a", "b", "c", "d", "e", "f", "g", "h", "i", "k", "l", "m", "n", "o"}, 10, 5000, 2);
}

TEST_CASE("fuzzy expansion equals the EditDistance scan: multi-byte UTF-8", "[postings]") {
  // 1-, 2-, 3- and 4-byte code points, some sharing lead bytes.
  CheckAlphabet({"a", "b", "\xC3\xA9", "\xC3\xA8", "\xD0\xB6", "\xE4\xB8\xAD", "\xE4\xB8\xAE", "\xF0\x9F\x98\x80",
                 "\xF0\x9F\x98\x81"},
                6, 3000, 3);
}

TEST_CASE("fuzzy expansion equals the EditDistance scan: malformed bytes", "[postings]") {
  // Lone lead and continuation bytes make truncated and misaligned
  // sequences; both sides must decode them as EditDistance does.
  CheckAlphabet({"a", "b", "\xC3", "\xA9", "\xE4", "\xB8", "\xF0", "\x80", "\xFF"}, 7, 3000, 4);
}

TEST_CASE("fuzzy expansion: empty strings, transpositions, order", "[postings]") {
  TempDir dir;
  auto seg = BuildSegment(dir, {"", "a", "ab", "ba", "abc", "acb", "bca", "caféx", "cafxé", "\xC3", "\xC3\xA9"});
  for (std::string q : {"", "a", "ab", "abc", "caféx", "\xC3", "\xC3\xA9", "zzzz"})
    for (uint32_t max = 0; max <= 2; ++max) {
      INFO("query '" << q << "' max " << max);
      auto got = Fuzzy(*seg, q, max);
      CHECK(got == Scan(*seg, q, max));
      CHECK(std::is_sorted(got.begin(), got.end()));
    }
  // A transposition is one edit.
  CHECK(Fuzzy(*seg, "bac", 1) == std::vector<uint32_t>{Scan(*seg, "bac", 1)});
  std::vector<uint32_t> one;
  ForEachFuzzyTerm(*seg, 0, "acb", 1, [&](uint32_t i) { one.push_back(i); });
  CHECK(std::find(one.begin(), one.end(), static_cast<uint32_t>(seg->FindTerm(0, "abc"))) != one.end());
}

}  // namespace
}  // namespace corvid::postings
