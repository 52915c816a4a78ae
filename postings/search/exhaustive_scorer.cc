// The exhaustive scorer (strategy.h: kExhaustive), the reference.
#include "postings/search/strategy.h"

namespace corvid::postings::search {

// Adds the BM25 contributions of `n` to scores[], where docs[] is the
// segment's sorted final matches and `anc` the docs where n and every
// ancestor match (a subset of docs and of n's matches).
void Score(const CNode& n, const roaring_bitmap_t* anc, size_t k, Norms& norms, SegEval& ev,
           const std::vector<uint32_t>& docs, std::vector<double>& scores) {
  if (n.kind == CNode::Kind::kBool) {
    for (const auto& [occ, c] : n.clauses) {
      if (occ == Occur::kMustNot) continue;
      if (occ == Occur::kMust) {
        Score(*c, anc, k, norms, ev, docs, scores);  // n matches only where its required clauses do
        continue;
      }
      Bitmap a2(roaring_bitmap_and(anc, ev.node_bm[c->id]));
      if (!roaring_bitmap_is_empty(a2.get())) Score(*c, a2.get(), k, norms, ev, docs, scores);
    }
    return;
  }
  if (n.kind != CNode::Kind::kLeaf) return;
  const Segment& seg = *ev.s->segment;
  std::vector<uint32_t> eff;
  for (size_t ai = 0; ai < n.alts.size(); ++ai) {
    const Alt& a = n.alts[ai];
    FieldNorms& norm = norms.field(a.field);
    const uint32_t* lens = seg.lengths(a.field);
    const double w = a.weight;
    if (a.any) {
      // Many expanded terms: each one's documents among the alternative's
      // matches by bitmap AND, rather than a rank lookup per match.
      Bitmap own;
      const roaring_bitmap_t* eb = AltBitmap(n, ai, anc, ev, &own);
      if (roaring_bitmap_is_empty(eb)) continue;
      for (size_t i = 0; i < a.ScoreTerms().size(); ++i) {
        const int64_t ti = a.SegScoreTerm(k, i);
        if (ti < 0) continue;
        ConstBitmap postings = seg.Postings(a.field, static_cast<uint32_t>(ti));
        RankCursor ranks(postings.get());
        const TfArray tfs = seg.Tfs(a.field, static_cast<uint32_t>(ti));
        Bitmap both(roaring_bitmap_and(postings.get(), eb));
        size_t j = 0;
        ForEachDoc(both.get(), [&](uint32_t d) {
          uint32_t r = 0;  // d is in the postings: Find sets it
          ranks.Find(d, &r);
          while (docs[j] < d) ++j;
          scores[j] += w * Bm25WithNorm(a.idf[i], tfs[r], norm(lens[d]));
        });
      }
      continue;
    }
    AltMatches(n, ai, anc, ev, eff);
    for (size_t i = 0; i < a.ScoreTerms().size() && !eff.empty(); ++i) {
      ScoreTermTfs tfs(n, ai, i, k, ev);
      size_t j = 0;
      for (uint32_t d : eff) {
        const uint32_t tf = tfs.Tf(d);
        if (tf == 0) continue;
        while (docs[j] < d) ++j;
        scores[j] += w * Bm25WithNorm(a.idf[i], tf, norm(lens[d]));
      }
    }
  }
}

}  // namespace corvid::postings::search
