// MaxScore with block-max bounds over a flat disjunction.
#include "postings/search/strategy.h"

#include "postings/posting_cursor.h"

namespace corvid::postings::search {

// MaxScore with block-max bounds over the posting lists of `alts` in
// segment k: only documents that can still enter `top` are fully scored.
// Each document's score is summed in alternative order, so it is
// bit-identical to the exhaustive path (Score).
void MaxScoreSegment(const std::vector<FlatTerm>& flat, size_t k, const Snapshot& snap, Norms& norms,
                     const roaring_bitmap_t* final_bm, TopK& top) {
  const SegmentState& st = snap.segments[k];
  const Segment& seg = *st.segment;
  struct T {
    std::unique_ptr<PostingCursor> cur;
    double weight, idf, ub, avg;
    FieldNorms* norm;
    const BlockMax* blocks;
    const uint32_t* lens;
    size_t order;
    uint32_t block = UINT32_MAX;  // the block `block_ub` bounds
    double block_ub = 0;
    double Contribution(uint32_t d) const { return weight * Bm25WithNorm(idf, cur->tf(), (*norm)(lens[d])); }
  };
  std::vector<T> ts;
  for (size_t o = 0; o < flat.size(); ++o) {
    const Alt& a = *flat[o].alt;
    int64_t ti = flat[o].SegTerm(k);
    if (ti < 0) continue;
    T t;
    t.cur = std::make_unique<PostingCursor>(seg, a.field, static_cast<uint32_t>(ti));
    t.weight = a.weight;
    t.idf = flat[o].idf();
    t.norm = &norms.field(a.field);
    t.avg = t.norm->avglen();
    t.blocks = t.cur->blocks();
    t.lens = seg.lengths(a.field);
    t.order = o;
    t.ub = 0;
    const uint64_t nb = BlockCount(seg.doc_freq(a.field, static_cast<uint32_t>(ti)));
    for (uint32_t b = 0; b < nb; ++b) t.ub = std::max(t.ub, BlockBound(t.weight, t.idf, t.blocks[b], t.avg));
    ts.push_back(std::move(t));
  }
  if (ts.empty()) return;
  std::sort(ts.begin(), ts.end(), [](const T& a, const T& b) { return a.ub < b.ub; });
  const size_t n = ts.size();
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + ts[i].ub;
  std::vector<double> contrib(flat.size(), 0.0);
  size_t first_ess = 0;
  auto recompute = [&] {
    double th = top.threshold();
    first_ess = 0;
    while (first_ess < n && prefix[first_ess + 1] < th) ++first_ess;
  };
  recompute();
  while (first_ess < n) {
    uint32_t d = UINT32_MAX;
    for (size_t i = first_ess; i < n; ++i)
      if (ts[i].cur->valid()) d = std::min(d, ts[i].cur->doc());
    if (d == UINT32_MAX) break;
    // Block-max skip: every essential list's postings in [d, end] lie in
    // its current block, so if those blocks' bounds plus the non-essential
    // lists' bounds cannot reach the threshold, no document up to `end`
    // can enter the top-k.
    uint32_t end = UINT32_MAX;
    for (size_t i = first_ess; i < n; ++i) {
      T& t = ts[i];
      if (!t.cur->valid()) continue;
      const uint32_t b = t.cur->rank() / kPostingBlock;
      if (t.block != b) {
        t.block = b;
        t.block_ub = BlockBound(t.weight, t.idf, t.blocks[b], t.avg);
      }
      const uint32_t last = t.blocks[b].last_doc;  // a copy: BlockMax is packed, unaligned in the file
      end = std::min(end, last);
    }
    // Lists whose next posting lies past the window add nothing in it.
    double bound = prefix[first_ess];
    for (size_t i = first_ess; i < n; ++i)
      if (ts[i].cur->valid() && ts[i].cur->doc() <= end) bound += ts[i].block_ub;
    if (bound < top.threshold()) {
      for (size_t i = first_ess; i < n; ++i) ts[i].cur->Advance(end + 1);
      continue;
    }
    double partial = 0;
    std::fill(contrib.begin(), contrib.end(), 0.0);
    for (size_t i = first_ess; i < n; ++i) {
      T& t = ts[i];
      if (!t.cur->valid() || t.cur->doc() != d) continue;
      const double c = t.Contribution(d);
      contrib[t.order] = c;
      partial += c;
      t.cur->Next();
    }
    if (final_bm != nullptr && !roaring_bitmap_contains(final_bm, d)) continue;
    const double th = top.threshold();
    bool pruned = false;
    for (size_t i = first_ess; i-- > 0;) {
      if (partial + prefix[i + 1] < th) {
        pruned = true;
        break;
      }
      T& t = ts[i];
      t.cur->Advance(d);
      if (!t.cur->valid() || t.cur->doc() != d) continue;
      const double c = t.Contribution(d);
      contrib[t.order] = c;
      partial += c;
    }
    if (pruned) continue;
    double score = 0;
    for (double c : contrib) score += c;
    if (top.Offer(TopEntry{score, static_cast<uint32_t>(k), d, &seg})) recompute();
  }
}

}  // namespace corvid::postings::search
