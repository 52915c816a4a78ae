// Flat disjunctions of few terms (strategy.h: kDisjunction).
#include "postings/search/strategy.h"

#include "postings/search/term_lists.h"

namespace corvid::postings::search {

// Top-k of a flat disjunction of single terms in segment k (`check`, if
// not null: the only documents that count), by MaxScore; first, when a
// list is long (common words), the reasoning of RequiredTerms: a sample
// of the deepest intersection is scored aside, and the k-th of those
// scores becomes the top-k's floor (they are scored again, in place, by
// the walk); only the documents holding the terms the floor makes
// required are scored. "aa OR ab", both in nearly every body and in a
// third of the titles, is decided by the titles: the documents with both.
void DisjunctionSegment(const std::vector<FlatTerm>& flat, size_t k, const Snapshot& snap, Norms& norms,
                        const roaring_bitmap_t* check, TopK& top) {
  const Segment& seg = *snap.segments[k].segment;
  uint64_t max_df = 0, postings = 0;
  for (const FlatTerm& f : flat) {
    if (f.alt->any) return MaxScoreSegment(flat, k, snap, norms, check, top);  // an expansion
    const int64_t ti = f.SegTerm(k);
    if (ti < 0) continue;
    const uint32_t df = seg.doc_freq(f.alt->field, static_cast<uint32_t>(ti));
    max_df = std::max<uint64_t>(max_df, df);
    postings += df;
  }
  // Worth its bitmap work only with a list in a quarter of the segment or
  // more: below that, MaxScore rarely reads enough postings to lose.
  if (max_df < kDenseConjunction || max_df * 4 < seg.doc_count() || top.k() == 0)
    return MaxScoreSegment(flat, k, snap, norms, check, top);
  std::vector<const Alt*> alts;
  for (const FlatTerm& f : flat) alts.push_back(f.alt);
  const std::vector<TermList> lists = TermLists(alts, k, seg, norms);
  const RequiredTerms terms(lists, check, top.k());
  const auto& deep = terms.deep();
  // Without an intersection, MaxScore's essential lists do as well; when
  // scoring it by rank would read most of the postings (one field of
  // common words), MaxScore's block bounds do better.
  if (deep.size() < 2 || !SparseBesidePostings(roaring_bitmap_get_cardinality(deep.back()), postings))
    return MaxScoreSegment(flat, k, snap, norms, check, top);
  // The floor from the first of them: enough for a threshold near the
  // final one, without scoring them all twice.
  Bitmap sample(roaring_bitmap_copy(deep.back()));
  uint32_t past = 0;
  if (roaring_bitmap_select(sample.get(), static_cast<uint32_t>(std::min<uint64_t>(128 + 8 * top.k(), UINT32_MAX)),
                            &past))
    roaring_bitmap_remove_range_closed(sample.get(), past, UINT32_MAX);
  TopK seeds(top.k(), top.after());  // the key's: a floor from the sample's answerable scores
  ScoreByRank(lists, k, seg, norms, sample.get(), seeds);
  top.RaiseFloor(seeds.threshold());
  const size_t required = terms.Required(top.threshold());
  if (required == 0) return MaxScoreSegment(flat, k, snap, norms, check, top);
  const roaring_bitmap_t* docs = deep[std::min(required, deep.size()) - 1];
  if (SparseBesidePostings(roaring_bitmap_get_cardinality(docs), postings))
    ScoreByRank(lists, k, seg, norms, docs, top);
  else
    MaxScoreSegment(flat, k, snap, norms, docs, top);
}

}  // namespace corvid::postings::search
