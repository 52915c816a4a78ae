// The edit distance fuzzy expansion is checked against (fuzzy_test.cc)
// and measured beside (bench/postings/fuzzy_bench.cc): the whole matrix,
// written for clarity, independent of fuzzy.cc's banded automaton.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace corvid::postings::testing {

// The oracle: optimal-string-alignment edit distance (insertions,
// deletions, substitutions, adjacent transpositions) over code points
// decoded as fuzzy.cc decodes them (the lead byte alone fixes the length; a
// truncated sequence keeps the bits it has), the whole matrix, or max+1 if
// it exceeds `max`.
inline uint32_t EditDistance(std::string_view a8, std::string_view b8, uint32_t max) {
  auto decode = [](std::string_view s, std::u32string& out) {
    out.clear();
    for (size_t i = 0; i < s.size();) {
      unsigned char c = s[i];
      uint32_t cp;
      size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
      for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
      out.push_back(cp);
      i += n;
    }
  };
  thread_local std::u32string a, b;
  decode(a8, a);
  decode(b8, b);
  const size_t n = a.size(), m = b.size();
  if ((n > m ? n - m : m - n) > max) return max + 1;
  thread_local std::vector<uint32_t> d;
  d.assign((n + 1) * (m + 1), 0);
  auto at = [&](size_t i, size_t j) -> uint32_t& { return d[i * (m + 1) + j]; };
  for (size_t i = 0; i <= n; ++i) at(i, 0) = static_cast<uint32_t>(i);
  for (size_t j = 0; j <= m; ++j) at(0, j) = static_cast<uint32_t>(j);
  for (size_t i = 1; i <= n; ++i) {
    uint32_t row_min = UINT32_MAX;
    for (size_t j = 1; j <= m; ++j) {
      uint32_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      uint32_t v = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) v = std::min(v, at(i - 2, j - 2) + 1);
      at(i, j) = v;
      row_min = std::min(row_min, v);
    }
    if (row_min > max) return max + 1;
  }
  return std::min(at(n, m), max + 1);
}

}  // namespace corvid::postings::testing
