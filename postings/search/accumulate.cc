// Term-at-a-time over many terms (strategy.h: kAccumulate).
#include "postings/search/strategy.h"

#include <bit>

namespace corvid::postings::search {

// Term-at-a-time for flat disjunctions of many terms (prefix and fuzzy
// expansions), without a bitmap union: every posting adds its contribution
// to a dense per-document accumulator and marks its document in a dense
// bitset, whose marked documents are the matches. Contributions are added
// in `flat` order, as Score adds them (bit-identical).
// `drop`: documents that do not count (deleted, prohibited); `keep`, if
// not null: the only ones that do (a filter, or matches found already).
// Offers the matches that count to `top` and returns their number.
uint64_t AccumulateSegment(const std::vector<FlatTerm>& flat, size_t k, const Snapshot& snap, Norms& norms,
                           const roaring_bitmap_t* keep, std::span<const roaring_bitmap_t* const> drop, TopK& top) {
  const Segment& seg = *snap.segments[k].segment;
  const uint32_t n = seg.doc_count();
  const size_t words = (n + 63) / 64;
  // Reused by every search on this thread. `acc` is all zeros between
  // searches (the final scan zeroes what the postings touched), so a
  // search does not pay for clearing a whole segment's worth of doubles.
  static thread_local std::vector<double> acc;
  static thread_local std::vector<uint64_t> seen, mask;
  if (acc.size() < n) acc.resize(n, 0.0);
  seen.assign(words, 0);
  for (const FlatTerm& t : flat) {
    const int64_t ti = t.SegTerm(k);
    if (ti < 0) continue;
    const Alt& a = *t.alt;
    FieldNorms& norm = norms.field(a.field);
    const double weight = a.weight, idf = t.idf();
    const uint32_t* lens = seg.lengths(a.field);
    const TermEntry e = seg.entry(a.field, static_cast<uint32_t>(ti));  // decoded once for both
    const TfArray tfs = seg.Tfs(e);
    // Captures by value: the stores cannot then alias what it reads (the
    // compiler would reload weight and idf after every store otherwise).
    seg.ForEachDoc(e,
                   [weight, idf, tfs, lens, &norm, sums = acc.data(), marks = seen.data(), rank = uint32_t{0}](uint32_t d) mutable {
                     sums[d] += weight * Bm25WithNorm(idf, tfs[rank++], norm(lens[d]));
                     marks[d >> 6] |= uint64_t{1} << (d & 63);
                   });
  }
  const bool restricted = keep != nullptr || !drop.empty();
  if (restricted) {
    mask.assign(words, keep == nullptr ? ~uint64_t{0} : 0);
    if (keep != nullptr) ForEachDoc(keep, [&](uint32_t d) { mask[d >> 6] |= uint64_t{1} << (d & 63); });
    for (const roaring_bitmap_t* x : drop) ForEachDoc(x, [&](uint32_t d) { mask[d >> 6] &= ~(uint64_t{1} << (d & 63)); });
  }
  uint64_t total = 0;
  double threshold = top.threshold();
  for (size_t w = 0; w < words; ++w) {
    uint64_t bits = seen[w];
    const uint64_t live = restricted ? bits & mask[w] : bits;
    total += std::popcount(live);
    for (; bits != 0; bits &= bits - 1) {
      const uint32_t bit = std::countr_zero(bits);
      const uint32_t d = static_cast<uint32_t>(w * 64) + bit;
      const double score = acc[d];
      acc[d] = 0;
      if (score >= threshold && (live >> bit & 1) != 0) {
        top.Offer(TopEntry{score, static_cast<uint32_t>(k), d, &seg});
        threshold = top.threshold();
      }
    }
  }
  return total;
}

// The number of documents of segment k in which any of `flat` (at most
// kMaxScoreTerms) occurs, counted in a dense bitset; or nullopt when the
// lists hold fewer than doc_count / 512 postings. Zeroing and counting the
// bitset are doc_count / 32 word operations whatever the lists, so rare
// terms in a large segment are left to roaring unions (one step or so per
// posting); the bound of 512 is a choice, not a measured break-even.
std::optional<uint64_t> CountFlatMatches(const std::vector<FlatTerm>& flat, size_t k, const Segment& seg) {
  TermEntry entries[kMaxScoreTerms];
  size_t n = 0;
  uint64_t postings = 0;
  for (const FlatTerm& t : flat) {
    const int64_t ti = t.SegTerm(k);
    if (ti < 0) continue;
    entries[n] = seg.entry(t.alt->field, static_cast<uint32_t>(ti));
    postings += entries[n++].doc_freq;
  }
  if (postings < seg.doc_count() / 512) return std::nullopt;
  static thread_local std::vector<uint64_t> words;  // reused by every search on this thread
  words.assign((seg.doc_count() + 63) / 64, 0);
  for (size_t i = 0; i < n; ++i) seg.MarkDocs(entries[i], words);
  uint64_t count = 0;
  for (uint64_t w : words) count += static_cast<uint64_t>(std::popcount(w));
  return count;
}

}  // namespace corvid::postings::search
