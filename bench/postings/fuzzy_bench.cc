// fuzzy_bench: fuzzy term expansion — ForEachFuzzyTerm (postings/fuzzy.h)
// against scanning the whole dictionary with EditDistance, on one segment
// of 30k and one of 300k synthetic terms; 200 queries (dictionary words,
// some with two letters swapped or a letter added), max edits 1 and 2.
// Both must find the same number of matches.
//
//   fuzzy_bench [--dir /tmp/fuzzy_bench]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench/machine.h"
#include "postings/file_util.h"
#include "postings/fuzzy.h"
#include "postings/snapshot.h"
#include "tests/postings/edit_distance.h"

using namespace corvid;
using namespace corvid::postings;
using Clock = std::chrono::steady_clock;

namespace {

std::string MakeWord(std::mt19937& rng) {
  static const char* kSyll[] = {"ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "der", "an", "el", "or", "ing", "ter", "st",
                                "ba", "ve", "qu", "th", "ion", "al", "ex", "pre", "con", "us", "it", "om", "ur", "ly", "ic"};
  std::uniform_int_distribution<int> n(1, 5), s(0, 29);
  std::string w;
  for (int i = n(rng); i > 0; --i) w += kSyll[s(rng)];
  return w;
}

double MicrosPerQuery(Clock::time_point t0, size_t queries) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / static_cast<double>(queries);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/fuzzy_bench";
  if (argc == 3 && std::string(argv[1]) == "--dir") dir = argv[2];
  std::filesystem::create_directories(dir);
  printf("machine: %s\n", corvid::bench::MachineDescription().c_str());
  for (size_t nterms : {size_t{30000}, size_t{300000}}) {
    std::mt19937 rng(7);
    std::set<std::string> seen;
    std::vector<std::string> words;
    while (words.size() < nterms) {
      std::string w = MakeWord(rng);
      if (seen.insert(w).second) words.push_back(std::move(w));
    }
    SegmentBuilder b(1, 0);
    const uint32_t doc = b.AddDoc("d");
    for (size_t i = 0; i < words.size(); ++i) b.AddToken(0, doc, words[i], static_cast<uint32_t>(i));
    b.SetLength(0, doc, static_cast<uint32_t>(words.size()));
    if (!WriteFileAtomic(dir, "f.cvs", b.Encode(1)).ok()) return 1;
    auto opened = Segment::Open(dir + "/f.cvs", 1, 1, 0);
    if (!opened.ok()) return 1;
    const Segment& seg = **opened;
    std::uniform_int_distribution<size_t> pick(0, words.size() - 1);
    std::vector<std::string> queries;
    for (int i = 0; i < 200; ++i) {
      std::string w = words[pick(rng)];
      if (i % 2 == 1 && w.size() > 2) std::swap(w[1], w[2]);
      if (i % 3 == 0) w += "e";
      queries.push_back(std::move(w));
    }
    for (uint32_t max : {1u, 2u}) {
      // Untimed: the walk must find exactly the scan's terms for every query.
      for (const auto& q : queries) {
        std::vector<uint32_t> scanned, walked;
        for (uint32_t i = 0; i < seg.term_count(0); ++i)
          if (testing::EditDistance(seg.term(0, i), q, max) <= max) scanned.push_back(i);
        ForEachFuzzyTerm(seg, 0, q, max, [&](uint32_t i) { walked.push_back(i); });
        std::sort(walked.begin(), walked.end());
        if (scanned != walked) {
          fprintf(stderr, "query %s, max edits %u: the walk and the scan disagree\n", q.c_str(), max);
          return 2;
        }
      }
      size_t scan_matches = 0, walk_matches = 0;
      auto t0 = Clock::now();
      for (const auto& q : queries)
        for (uint32_t i = 0; i < seg.term_count(0); ++i) scan_matches += testing::EditDistance(seg.term(0, i), q, max) <= max;
      const double scan = MicrosPerQuery(t0, queries.size());
      constexpr int kReps = 5;
      t0 = Clock::now();
      for (int rep = 0; rep < kReps; ++rep)
        for (const auto& q : queries) ForEachFuzzyTerm(seg, 0, q, max, [&](uint32_t) { ++walk_matches; });
      const double walk = MicrosPerQuery(t0, queries.size() * kReps);
      printf("%zu terms, max edits %u: scan %.0f us/query, ForEachFuzzyTerm %.1f us/query, %.0fx; matches %zu / %zu\n", nterms,
             max, scan, walk, scan / walk, scan_matches, walk_matches / kReps);
    }
  }
  return 0;
}
