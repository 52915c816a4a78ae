// Conjunctions of single terms (strategy.h: kConjunction).
#include "postings/search/strategy.h"

#include "postings/posting_cursor.h"
#include "postings/search/term_lists.h"

namespace corvid::postings::search {

namespace {

// Offers the documents of `docs` (final matches of a ConjunctionTerms
// query) to `top`, document at a time with block-max skipping: for the
// window up to the nearest end of the terms' current blocks, the sum of
// those blocks' bounds bounds every document's score; a window that cannot
// reach the threshold is skipped without touching the postings. Scores
// are summed in Score's order (bit-identical).
void ConjunctionWindows(const std::vector<const Alt*>& alts, size_t k, const Segment& seg, Norms& norms,
                        const roaring_bitmap_t* docs, TopK& top) {
  constexpr uint32_t kTfBounds = 256;  // TfBound is memoized below this tf
  struct T {
    std::unique_ptr<PostingCursor> cur;
    double weight, idf, avg;
    FieldNorms* norm;
    const uint32_t* lens;
    const BlockMax* blocks;
    uint32_t bound_block = UINT32_MAX;  // the block `bound` bounds
    double bound = 0;
    uint32_t min_len = 0;          // the shortest length among the term's postings (TermEntry::whole)
    std::vector<double> tf_bound;  // by tf < kTfBounds: TfBound, or -1 until needed (made at first use)
    // ScoreBound at this tf and the term's shortest length: bounds one
    // posting's contribution from its tf alone, without a division (once
    // per distinct tf).
    double TfBound(uint32_t tf) {
      if (tf_bound.empty()) tf_bound.assign(kTfBounds, -1.0);
      if (tf >= kTfBounds) return ScoreBound(weight, idf, tf, min_len, avg);
      double& b = tf_bound[tf];
      if (b < 0) b = ScoreBound(weight, idf, tf, min_len, avg);
      return b;
    }
    double Contribution(uint32_t tf, uint32_t doc) const { return weight * Bm25WithNorm(idf, tf, (*norm)(lens[doc])); }
  };
  std::vector<T> ts;
  for (const Alt* a : alts) {
    const int64_t ti = a->SegScoreTerm(k, 0);
    if (ti < 0) continue;
    T t;
    t.cur = std::make_unique<PostingCursor>(seg, a->field, static_cast<uint32_t>(ti));
    t.weight = a->weight;
    t.idf = a->idf[0];
    t.norm = &norms.field(a->field);
    t.avg = t.norm->avglen();
    t.lens = seg.lengths(a->field);
    t.blocks = t.cur->blocks();
    t.min_len = seg.entry(a->field, static_cast<uint32_t>(ti)).whole.min_len;
    ts.push_back(std::move(t));
  }
  // The final matches are read kBuf at a time (the per-element roaring
  // iterator costs more than scoring a dense conjunction's document).
  constexpr uint32_t kBuf = 256;
  uint32_t buf[kBuf];
  uint32_t got = 0, i = 0;
  double doc_bound[kBuf];                  // [x]: buf[i + x]'s TfBounds so far
  uint32_t alive[kBuf], alive_docs[kBuf];  // the x not dropped yet, and their buf[i + x]
  std::vector<uint32_t> tf_at;             // [term * kBuf + x]: buf[i + x]'s tf, 0 if absent
  std::vector<size_t> active;              // the window's terms, largest bound first
  std::vector<double> rest;                // [j]: the bounds of active[j + 1..] summed
  bool ranked = false;                     // active and rest are sorted for this window
  roaring_uint32_iterator_t it;
  roaring_init_iterator(docs, &it);
  uint32_t window_end = 0;
  bool in_window = false;
  for (;;) {
    if (i == got) {
      got = roaring_read_uint32_iterator(&it, buf, kBuf);
      i = 0;
      if (got == 0) break;
    }
    const uint32_t d = buf[i];
    if (!in_window || d > window_end) {
      uint32_t end = UINT32_MAX;
      for (T& t : ts) {
        t.cur->Advance(d);
        if (!t.cur->valid()) continue;  // no more postings: contributes nothing
        const uint32_t b = t.cur->rank() / kPostingBlock;
        if (t.bound_block != b) {
          t.bound = BlockBound(t.weight, t.idf, t.blocks[b], t.avg);
          t.bound_block = b;
        }
        const uint32_t last = t.blocks[b].last_doc;  // a copy: BlockMax is packed, unaligned in the file
        end = std::min(end, last);
      }
      // A term whose next posting lies past the window adds nothing in it
      // (a title term is sparse where its body term is dense).
      active.clear();
      double bound = 0;
      for (size_t t = 0; t < ts.size(); ++t) {
        if (!ts[t].cur->valid() || ts[t].cur->doc() > end) continue;
        active.push_back(t);
        bound += ts[t].bound;
      }
      ranked = false;
      window_end = end;
      in_window = true;
      if (bound < top.threshold()) {
        if (end == UINT32_MAX) break;
        while (i < got && buf[i] <= end) ++i;
        if (i == got) roaring_move_uint32_iterator_equalorlarger(&it, end + 1);  // past the buffer too
        in_window = false;
        continue;
      }
    }
    // The window's final documents in the buffer, a term at a time, the
    // largest bound first: each document's TfBounds are summed, and after
    // each term the documents whose sum plus the later terms' block bounds
    // cannot reach the threshold are dropped (with common words nearly
    // every window may reach it, and few documents do: a document without
    // the terms of large bounds is dropped before the others are read).
    // Each term's tf is kept for the exact score.
    size_t n = i;
    while (n < got && buf[n] <= window_end) ++n;
    n -= i;
    if (n == 1) {
      // A lone document (a sparse conjunction's windows): scored directly,
      // bounding it would cost more.
      double score = 0;
      for (T& t : ts) {
        if (!t.cur->valid() || t.cur->doc() > window_end) continue;
        t.cur->Advance(d);
        if (t.cur->doc() == d) score += t.Contribution(t.cur->tf(), d);
      }
      if (score >= top.threshold()) top.Offer(TopEntry{score, static_cast<uint32_t>(k), d, &seg});
      ++i;
      continue;
    }
    tf_at.resize(ts.size() * kBuf);  // allocated by the first window with several documents
    if (!ranked) {
      // The window's terms, largest bound first, and the bounds after each.
      std::sort(active.begin(), active.end(), [&](size_t a, size_t b) { return ts[a].bound > ts[b].bound; });
      rest.assign(active.size(), 0.0);
      for (size_t j = active.size(); j-- > 1;) rest[j - 1] = rest[j] + ts[active[j]].bound;
      ranked = true;
    }
    size_t alive_n = n;
    for (size_t x = 0; x < n; ++x) {
      alive[x] = static_cast<uint32_t>(x);
      alive_docs[x] = buf[i + x];
      doc_bound[x] = 0;
    }
    for (size_t t = 0; t < ts.size(); ++t) std::fill_n(tf_at.data() + t * kBuf, n, 0u);
    for (size_t j = 0; j < active.size() && alive_n > 0; ++j) {
      T& term = ts[active[j]];
      uint32_t* tf = tf_at.data() + active[j] * kBuf;
      term.cur->ForEachInBlock(alive_docs, alive_n, [&](size_t y, uint32_t f) {
        tf[alive[y]] = f;
        doc_bound[alive[y]] += term.TfBound(f);
      });
      const double need = top.threshold() - rest[j];
      size_t m = 0;
      for (size_t y = 0; y < alive_n; ++y) {
        if (doc_bound[alive[y]] < need) continue;
        alive[m] = alive[y];
        alive_docs[m++] = alive_docs[y];
      }
      alive_n = m;
    }
    for (size_t y = 0; y < alive_n; ++y) {
      const size_t x = alive[y];
      if (doc_bound[x] < top.threshold()) continue;
      const uint32_t doc = buf[i + x];
      double score = 0;
      for (size_t t = 0; t < ts.size(); ++t) {
        const uint32_t f = tf_at[t * kBuf + x];
        if (f != 0) score += ts[t].Contribution(f, doc);
      }
      // Below the threshold it cannot enter: not offered.
      if (score >= top.threshold()) top.Offer(TopEntry{score, static_cast<uint32_t>(k), doc, &seg});
    }
    i += n;
  }
}

}  // namespace

// Top-k over the final matches of a ConjunctionTerms query in segment k:
// the required terms first when most documents match
// (WalkRequiredFirst), each set of matches walked by ConjunctionWindows,
// or by rank when it is small.
void ConjunctionSegment(const std::vector<const Alt*>& alts, size_t k, const Snapshot& snap, Norms& norms,
                        const roaring_bitmap_t* final_bm, TopK& top) {
  const Segment& seg = *snap.segments[k].segment;
  // Few matches (no more than the longest list has blocks): block-max
  // skipping would decode about a block per match and term, so each match
  // is scored directly, its tf found by rank. So are the sets
  // WalkRequiredFirst picks out of many matches when they are much
  // sparser than the postings, which the windows would decode in full.
  const std::vector<TermList> lists = TermLists(alts, k, seg, norms);
  uint64_t max_blocks = 0, postings = 0;
  for (const TermList& l : lists) {
    max_blocks = std::max(max_blocks, BlockCount(l.e.doc_freq));
    postings += l.e.doc_freq;
  }
  const bool many = roaring_bitmap_get_cardinality(final_bm) >= kManyMatches;
  WalkRequiredFirst(lists, final_bm, top, [&](const roaring_bitmap_t* docs) {
    const uint64_t n = roaring_bitmap_get_cardinality(docs);
    if (n <= max_blocks || (many && SparseBesidePostings(n, postings)))
      ScoreByRank(lists, k, seg, norms, docs, top);
    else
      ConjunctionWindows(alts, k, seg, norms, docs, top);
  });
}

}  // namespace corvid::postings::search
