// ForEachFuzzyTerm: the sorted dictionary walked as an implicit trie.
//
// Rows of the OSA dynamic program are indexed by the term's code points,
// columns by the query's. Consecutive terms of a sorted dictionary share
// prefixes, and the rows of a shared prefix are the same, so each term
// reuses the rows of its longest common (whole code point) prefix with the
// previous term and computes only the rest. When a row has no value
// <= max_edits, no extension of that prefix can match (row minima never
// decrease in OSA: every cell comes from the previous row, or for a
// transposition from a cell two rows up that bounds the previous row's
// diagonal), so every term starting with those bytes is skipped with one
// galloping search. Only the band |i - j| <= max_edits of a row is
// computed; cells outside it are > max_edits by definition.
//
// Code points are decoded (DecodeCodePointAt, common/utf8.h) exactly as the
// test's EditDistance oracle decodes them — the lead byte alone fixes the length, a truncated sequence keeps
// the bits it has — so malformed UTF-8 compares the same way. A code point
// whose nominal length runs past the end of its term is never treated as
// shared with another term and never causes a skip.
#include "postings/fuzzy.h"

#include <algorithm>
#include <vector>

#include "common/utf8.h"

namespace corvid::postings {
namespace {

// First index after `i` whose term does not start with `prefix`, given
// that term i does (the terms with a prefix are contiguous when sorted).
uint32_t SkipPrefix(const Segment& seg, uint32_t field, uint32_t i, std::string_view prefix) {
  const uint32_t count = seg.term_count(field);
  auto has = [&](uint32_t k) { return seg.term(field, k).starts_with(prefix); };
  uint32_t ok = i;  // the last index known to start with prefix
  uint64_t step = 1;
  uint64_t probe = i + 1;
  while (probe < count && has(static_cast<uint32_t>(probe))) {
    ok = static_cast<uint32_t>(probe);
    step *= 2;
    probe = i + step;
  }
  uint32_t lo = ok + 1, hi = static_cast<uint32_t>(std::min<uint64_t>(probe, count));
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (has(mid))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace

void ForEachFuzzyTerm(const Segment& seg, uint32_t field, std::string_view query, uint32_t max_edits,
                      const std::function<void(uint32_t)>& on_match) {
  const uint32_t count = seg.term_count(field);
  if (count == 0) return;
  std::vector<uint32_t> q;
  for (size_t i = 0; i < query.size();) {
    uint32_t cp;
    i += DecodeCodePointAt(query, i, cp);
    q.push_back(cp);
  }
  const size_t m = q.size();
  if (m == 0) {
    // EditDistance(term, "", max) finds no column to take a row minimum
    // from: only the empty term (sorted first) is within any distance.
    if (seg.term(field, 0).empty()) on_match(0);
    return;
  }
  // Values are kept saturated at cap: only "<= max_edits or not" matters.
  const uint32_t cap = max_edits >= UINT32_MAX - 2 ? UINT32_MAX - 1 : max_edits + 1;
  const size_t width = m + 1;
  std::vector<uint32_t> rows(width * 16);
  for (size_t j = 0; j <= m; ++j) rows[j] = static_cast<uint32_t>(std::min<size_t>(j, cap));
  std::vector<uint32_t> a;   // code points of the current term
  std::vector<size_t> ends;  // nominal byte end of each code point
  std::string_view prev;
  size_t valid = 0;  // rows 1..valid hold the DP of prev's first `valid` code points

  // Computes row k (1-based) for code point a[k-1]; returns false if no
  // value in it is <= max_edits.
  auto compute_row = [&](size_t k) -> bool {
    if (rows.size() < (k + 2) * width) rows.resize((k + 2) * width * 2);
    uint32_t* r = rows.data() + k * width;
    const uint32_t* p1 = r - width;
    const uint32_t* p2 = k >= 2 ? p1 - width : nullptr;
    const size_t lo = k > max_edits ? k - max_edits : 1;
    const size_t hi = std::min<size_t>(m, k + max_edits);
    if (lo > hi) return false;
    r[lo - 1] = lo == 1 ? static_cast<uint32_t>(std::min<size_t>(k, cap)) : cap;
    if (hi < m) r[hi + 1] = cap;
    const uint32_t c = a[k - 1];
    const uint32_t c_prev = k >= 2 ? a[k - 2] : 0;
    uint32_t row_min = cap;
    for (size_t j = lo; j <= hi; ++j) {
      uint32_t v = std::min(p1[j] + 1, r[j - 1] + 1);
      v = std::min(v, p1[j - 1] + (c == q[j - 1] ? 0u : 1u));
      if (p2 != nullptr && j > 1 && c == q[j - 2] && c_prev == q[j - 1]) v = std::min(v, p2[j - 2] + 1);
      v = std::min(v, cap);
      r[j] = v;
      row_min = std::min(row_min, v);
    }
    return row_min < cap;
  };

  for (uint32_t i = 0; i < count;) {
    const std::string_view t = seg.term(field, i);
    // Whole code points shared with prev (and still with valid rows).
    const size_t limit = std::min(prev.size(), t.size());
    size_t lcp = 0;
    while (lcp < limit && prev[lcp] == t[lcp]) ++lcp;
    size_t k = 0;
    while (k < valid && ends[k] <= lcp) ++k;
    a.resize(k);
    ends.resize(k);
    size_t pos = k ? ends[k - 1] : 0;
    bool dead = false;
    while (pos < t.size()) {
      uint32_t cp;
      const size_t n = DecodeCodePointAt(t, pos, cp);
      a.push_back(cp);
      pos += n;
      ends.push_back(pos);
      ++k;
      if (!compute_row(k)) {
        dead = true;
        break;
      }
    }
    prev = t;
    if (dead) {
      valid = k - 1;
      if (ends[k - 1] <= t.size())
        i = SkipPrefix(seg, field, i, t.substr(0, ends[k - 1]));
      else
        ++i;  // a truncated code point: longer terms decode it differently
      continue;
    }
    valid = k;
    // k == 0: EditDistance("", query) is the query's length. Column m
    // outside row k's band (k + max_edits < m) was not computed: too far.
    const uint32_t d = k == 0               ? static_cast<uint32_t>(std::min<size_t>(m, cap))
                       : m <= k + max_edits ? rows[k * width + m]
                                            : cap;
    if (d <= max_edits) on_match(i);
    ++i;
  }
}

}  // namespace corvid::postings
