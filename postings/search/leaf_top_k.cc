// One leaf with light terms (strategy.h: kLeafTopK).
#include "postings/search/strategy.h"

namespace corvid::postings::search {

namespace {

// The k-th largest of v (1 <= k <= v.size()), counting repeats. For a
// page's end (k small beside v) one pass keeps the k largest in a min-heap,
// most values failing one comparison against its front; deeper, nth_element
// on a copy.
double KthLargest(const std::vector<double>& v, size_t k) {
  if (k > 256 || k * 16 > v.size()) {
    std::vector<double> order = v;
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k - 1), order.end(), std::greater<>());
    return order[k - 1];
  }
  std::vector<double> heap(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k));
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  for (size_t j = k; j < v.size(); ++j) {
    if (v[j] <= heap.front()) continue;
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    heap.back() = v[j];
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  }
  return heap.front();
}


}  // namespace

// Offers the top of segment k's final matches `docs` of a leaf (the whole
// query, by relevance) to `top` without scoring every match in full, when
// some of its terms are light: their bound is at most 1/1000 of the
// largest (a stop word beside rarer words: "aa" in every body, next to
// "ab" in 89% of them, over 73k matches). The other terms' contributions
// are summed first; the want-th largest of those partial sums bounds the
// want-th final score from below, so only matches whose partial sum plus
// the light terms' bounds reach it can rank, and only those are scored in
// full, in Score's order (bit-identical). False, having offered nothing,
// when no term is light, an alternative is an expansion, or the matches
// are no more than the places.
bool ScoreLeafTopK(const CNode& leaf, size_t k, Norms& norms, SegEval& ev, const roaring_bitmap_t* final_bm,
                   const std::vector<uint32_t>& docs, size_t want, TopK& top) {
  if (want == 0 || docs.size() <= want) return false;
  const Segment& seg = *ev.s->segment;
  struct Item {
    size_t ai, i;
    double bound;
    FieldNorms* norm;
    const uint32_t* lens;
    bool light = false;
    double Contribution(const Alt& a, uint32_t tf, uint32_t d) const {
      return a.weight * Bm25WithNorm(a.idf[i], tf, (*norm)(lens[d]));
    }
  };
  std::vector<Item> items;  // Score's order
  double heaviest = 0;
  for (size_t ai = 0; ai < leaf.alts.size(); ++ai) {
    const Alt& a = leaf.alts[ai];
    if (a.any) return false;
    for (size_t i = 0; i < a.ScoreTerms().size(); ++i) {
      const int64_t ti = a.SegScoreTerm(k, i);
      if (ti < 0) continue;
      FieldNorms& norm = norms.field(a.field);
      const TermEntry e = seg.entry(a.field, static_cast<uint32_t>(ti));
      items.push_back(Item{ai, i, BlockBound(a.weight, a.idf[i], e.whole, norm.avglen()), &norm, seg.lengths(a.field)});
      heaviest = std::max(heaviest, items.back().bound);
    }
  }
  double light = 0;  // the light terms' bounds summed
  for (Item& t : items) {
    t.light = t.bound <= heaviest * 1e-3;
    if (t.light) light += t.bound;
  }
  if (light == 0) return false;
  // Each alternative's matches among docs (docs itself for one alternative).
  std::vector<std::vector<uint32_t>> eff(leaf.alts.size());
  if (leaf.alts.size() > 1)
    for (size_t ai = 0; ai < leaf.alts.size(); ++ai) AltMatches(leaf, ai, final_bm, ev, eff[ai]);
  auto matches = [&](size_t ai) -> const std::vector<uint32_t>& { return leaf.alts.size() == 1 ? docs : eff[ai]; };
  std::vector<double> partial(docs.size(), 0.0);
  for (const Item& t : items) {
    if (t.light) continue;
    ScoreTermTfs tfs(leaf, t.ai, t.i, k, ev);
    size_t j = 0;
    for (uint32_t d : matches(t.ai)) {
      const uint32_t tf = tfs.Tf(d);
      if (tf == 0) continue;
      while (docs[j] < d) ++j;
      partial[j] += t.Contribution(leaf.alts[t.ai], tf, d);
    }
  }
  // The bar a match must reach, less a margin for the partial sums'
  // different order of addition (ScoreBound's margin covers the bounds).
  // After a searchAfter key only the matches that certainly follow it
  // count: those whose partial sum plus the light terms' bounds (nudged
  // up: another order of addition) is below the key's score.
  double kth = -HUGE_VAL;
  if (const TopEntry* after = top.after()) {
    std::vector<double> below;
    for (double p : partial)
      if ((p + light) * (1 + 1e-9) < after->score) below.push_back(p);
    if (below.size() >= want) kth = KthLargest(below, want);
  } else {
    kth = KthLargest(partial, want);
  }
  const double bar = std::max(kth, top.threshold());
  const double need = bar - std::abs(bar) * 1e-9 - light;
  std::vector<ScoreTermTfs> tfs;
  for (const Item& t : items) tfs.emplace_back(leaf, t.ai, t.i, k, ev);
  std::vector<size_t> at(leaf.alts.size(), 0);  // per alternative: the next of its matches to compare
  for (size_t j = 0; j < docs.size(); ++j) {
    if (partial[j] < need) continue;
    const uint32_t d = docs[j];
    double score = 0;
    for (size_t x = 0; x < items.size(); ++x) {
      const Item& t = items[x];
      const std::vector<uint32_t>& e = matches(t.ai);
      size_t& p = at[t.ai];
      while (p < e.size() && e[p] < d) ++p;
      if (p == e.size() || e[p] != d) continue;
      const uint32_t tf = tfs[x].Tf(d);
      if (tf != 0) score += t.Contribution(leaf.alts[t.ai], tf, d);
    }
    if (score >= top.threshold()) top.Offer(TopEntry{score, static_cast<uint32_t>(k), d, &seg});
  }
  return true;
}

}  // namespace corvid::postings::search
