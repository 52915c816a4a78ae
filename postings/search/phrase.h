// Phrase matching over positions (the rules are searcher.cc's): whether
// a phrase with slop matches given each term's positions, and the windows
// where it does (which highlighting marks).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace corvid::postings::search {

// Whether the phrase matches given each term's absolute positions `pos`,
// the terms' query positions `rel` (relative to the first) and `slop`.
bool PhraseMatches(const std::vector<std::vector<uint32_t>>& pos, const std::vector<uint32_t>& rel, uint32_t slop);

// PhraseMatches for a phrase that repeats a term, each repetition taking
// its own position (`same[i]`: the first term equal to term i).
bool PhraseMatchesRepeated(const std::vector<std::vector<uint32_t>>& pos, const std::vector<uint32_t>& rel,
                           const std::vector<size_t>& same, uint32_t slop);

// PhraseMatches for two terms, straight from their encoded positions.
bool PhraseMatches2(const uint8_t* x, uint32_t tx, int64_t rx, const uint8_t* y, uint32_t ty, int64_t ry, uint32_t slop);

// The windows where a phrase matches (the rules above), each repetition of
// a term taking its own position, as in Lucene's sloppy matcher.
// `same[i]`: the first phrase term with term i's term (i itself if none
// before). For each window start a (a shifted position of some term,
// ascending), every term i needs a position in [a + r_i, a + r_i + slop];
// the repetitions of one term take distinct ones greedily in query order
// (their windows are equally long, so the smallest free position for the
// earliest is never worse). Calls fn(taken) per matching window, taken[i]
// being term i's position there, until fn returns false.
template <typename F>
void ForEachPhraseWindow(const std::vector<std::vector<uint32_t>>& pos, const std::vector<uint32_t>& rel,
                         const std::vector<size_t>& same, uint32_t slop, F&& fn) {
  const size_t n = pos.size();
  for (const auto& p : pos)
    if (p.empty()) return;
  std::vector<int64_t> starts;
  for (size_t i = 0; i < n; ++i)
    for (uint32_t p : pos[i]) starts.push_back(static_cast<int64_t>(p) - rel[i]);
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  std::vector<int64_t> taken(n);  // by term: the position the window gave it
  for (const int64_t a : starts) {
    bool fits = true;
    for (size_t i = 0; i < n && fits; ++i) {
      int64_t from = a + rel[i];
      // The positions the earlier repetitions of this term took (query
      // order is window order) are all below from's next free one.
      for (size_t j = same[i]; j < i; ++j)
        if (same[j] == same[i]) from = std::max(from, taken[j] + 1);
      const auto it = std::lower_bound(pos[i].begin(), pos[i].end(), from,
                                       [](uint32_t p, int64_t v) { return static_cast<int64_t>(p) < v; });
      fits = it != pos[i].end() && static_cast<int64_t>(*it) <= a + rel[i] + static_cast<int64_t>(slop);
      if (fits) taken[i] = *it;
    }
    if (fits && !fn(std::as_const(taken))) return;
  }
}

}  // namespace corvid::postings::search
