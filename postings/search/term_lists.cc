// Term lists and scoring by rank (term_lists.h).
#include "postings/search/term_lists.h"

#include "postings/roaring_layout.h"
#include "postings/search/match.h"

namespace corvid::postings::search {

std::vector<TermList> TermLists(const std::vector<const Alt*>& alts, size_t k, const Segment& seg, Norms& norms) {
  std::vector<TermList> lists;
  lists.reserve(alts.size());
  for (const Alt* a : alts) {
    const int64_t ti = a->SegScoreTerm(k, 0);
    if (ti < 0) continue;
    const TermEntry e = seg.entry(a->field, static_cast<uint32_t>(ti));
    const uint32_t max_tf = e.whole.max_tf, min_len = e.whole.min_len;  // copies: BlockMax is packed
    lists.push_back(TermList{a, e, seg.Postings(e),
                             ScoreBound(a->weight, a->idf[0], max_tf, min_len, norms.field(a->field).avglen())});
  }
  return lists;
}


// Offers every document of `docs` to `top`, scored as the sum over `lists`
// of their contributions, each found by rank. The terms are read largest
// bound first, and a document is dropped as soon as its contributions so
// far plus the later terms' bounds cannot reach the threshold: among many
// matches of common words, most are decided by one or two terms.
void ScoreByRank(const std::vector<TermList>& lists, size_t k, const Segment& seg, Norms& norms,
                 const roaring_bitmap_t* docs, TopK& top) {
  struct T {
    RankCursor ranks;
    TfArray tfs;
    double weight, idf;
    FieldNorms* norm;
    const uint32_t* lens;
    double bound;             // of the whole list
    double later = 0;         // the bounds of the terms read after this one, summed
    double contribution = 0;  // to the current document
  };
  std::vector<T> ts;
  ts.reserve(lists.size());
  for (const TermList& l : lists) {
    const Alt& a = *l.alt;
    ts.push_back(T{RankCursor(l.postings.get()), seg.Tfs(l.e), a.weight, a.idf[0], &norms.field(a.field),
                   seg.lengths(a.field), l.bound});
  }
  std::vector<T*> order;  // largest bound first
  for (T& t : ts) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const T* a, const T* b) { return a->bound > b->bound; });
  for (size_t j = order.size(); j-- > 1;) order[j - 1]->later = order[j]->later + order[j]->bound;
  ForEachDoc(docs, [&](uint32_t d) {
    const double threshold = top.threshold();
    double partial = 0;
    for (T* t : order) {
      uint32_t r;
      t->contribution = t->ranks.Find(d, &r) ? t->weight * Bm25WithNorm(t->idf, t->tfs[r], (*t->norm)(t->lens[d])) : 0;
      partial += t->contribution;
      // Nudged up: partial is summed in another order than the score.
      if ((partial + t->later) * (1 + 1e-9) < threshold) return;
    }
    double score = 0;  // in Score's order (bit-identical); an absent term adds 0
    for (const T& t : ts) score += t.contribution;
    if (score >= threshold) top.Offer(TopEntry{score, static_cast<uint32_t>(k), d, &seg});
  });
}

}  // namespace corvid::postings::search
