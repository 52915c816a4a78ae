// Phrase matching (phrase.h).
#include "postings/search/phrase.h"

#include "postings/file_util.h"

namespace corvid::postings::search {

// True if the phrase matches given each term's positions (see the rules
// above): some window [a, a + slop] holds a shifted position p - r_i of
// every term i. Equivalently, the smallest range that covers one shifted
// position of every list is at most slop: found in one merge pass over the
// lists (advance the list holding the minimum), O(sum of tf * terms).
bool PhraseMatches(const std::vector<std::vector<uint32_t>>& pos, const std::vector<uint32_t>& rel, uint32_t slop) {
  const size_t n = pos.size();
  for (const auto& p : pos)
    if (p.empty()) return false;
  if (n == 2) {
    const auto& x = pos[0];
    const auto& y = pos[1];
    const int64_t rx = rel[0], ry = rel[1];
    size_t i = 0, j = 0;
    while (i < x.size() && j < y.size()) {
      const int64_t qx = static_cast<int64_t>(x[i]) - rx, qy = static_cast<int64_t>(y[j]) - ry;
      if (qx <= qy) {
        if (qy - qx <= static_cast<int64_t>(slop)) return true;
        ++i;
      } else {
        if (qx - qy <= static_cast<int64_t>(slop)) return true;
        ++j;
      }
    }
    return false;
  }
  size_t idx_buf[16];
  std::vector<size_t> idx_vec;
  size_t* idx = idx_buf;
  if (n > 16) {
    idx_vec.assign(n, 0);
    idx = idx_vec.data();
  } else {
    std::fill(idx, idx + n, size_t{0});
  }
  for (;;) {
    int64_t mn = INT64_MAX, mx = INT64_MIN;
    size_t argmin = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t q = static_cast<int64_t>(pos[i][idx[i]]) - rel[i];
      if (q < mn) {
        mn = q;
        argmin = i;
      }
      mx = std::max(mx, q);
    }
    if (mx - mn <= static_cast<int64_t>(slop)) return true;
    if (++idx[argmin] == pos[argmin].size()) return false;
  }
}

// PhraseMatches for a phrase that repeats a term ("dog dog"~1, with slop
// > 0): some window of ForEachPhraseWindow.
bool PhraseMatchesRepeated(const std::vector<std::vector<uint32_t>>& pos, const std::vector<uint32_t>& rel,
                           const std::vector<size_t>& same, uint32_t slop) {
  bool match = false;
  ForEachPhraseWindow(pos, rel, same, slop, [&](const std::vector<int64_t>&) {
    match = true;
    return false;  // one window is enough
  });
  return match;
}

// PhraseMatches for two terms, straight from their encoded positions
// (x: tx varint deltas, query position rx; y likewise); stops at the first
// window found.
bool PhraseMatches2(const uint8_t* x, uint32_t tx, int64_t rx, const uint8_t* y, uint32_t ty, int64_t ry, uint32_t slop) {
  if (tx == 0 || ty == 0) return false;
  uint32_t vx, vy;
  x = GetVarint(x, &vx);
  y = GetVarint(y, &vy);
  int64_t px = vx, py = vy;
  --tx;
  --ty;
  const auto s = static_cast<int64_t>(slop);
  for (;;) {
    const int64_t qx = px - rx, qy = py - ry;
    if (qx <= qy) {
      if (qy - qx <= s) return true;
      if (tx == 0) return false;
      x = GetVarint(x, &vx);
      px += vx;
      --tx;
    } else {
      if (qx - qy <= s) return true;
      if (ty == 0) return false;
      y = GetVarint(y, &vy);
      py += vy;
      --ty;
    }
  }
}

}  // namespace corvid::postings::search
