// Single-term lists of a segment read once for the strategies that share
// them (conjunction.cc, disjunction.cc): scoring a set of documents by rank
// (ScoreByRank), and the common-word reasoning that finds which terms a
// threshold makes required (RequiredTerms, WalkRequiredFirst).
#pragma once

#include <roaring/roaring.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "postings/search/bm25.h"
#include "postings/search/query.h"
#include "postings/search/top_k.h"

namespace corvid::postings::search {

// A single-term alternative's list in segment k, read once (header, doc
// numbers, bound) for every path of a segment's top-k that uses it.
struct TermList {
  const Alt* alt;
  TermEntry e;
  ConstBitmap postings;
  double bound;  // ScoreBound over the whole list
};

// The lists of `alts` (single terms) in segment k, in alts order (Score's
// order), the terms absent from the segment left out.
std::vector<TermList> TermLists(const std::vector<const Alt*>& alts, size_t k, const Segment& seg, Norms& norms);

// Offers every document of `docs` to `top`, scored by rank over `lists`
// (term_lists.cc).
void ScoreByRank(const std::vector<TermList>& lists, size_t k, const Segment& seg, Norms& norms,
                 const roaring_bitmap_t* docs, TopK& top);

constexpr uint64_t kDenseConjunction = 4096;  // DisjunctionSegment: a list this long may make terms required

// A conjunction with this many matches or more scores first those most
// likely to rank (WalkRequiredFirst): "con AND prepreal" (1,700 matches in
// a segment, "con" in most of them) is decided by the few with "prepreal"
// in the title, and walking all its matches cost ~240 us where this costs
// ~90 (bench/postings/RESULTS.md, 2026-12-02).
constexpr uint64_t kManyMatches = 64;

// A set of `docs` documents among terms with `postings` postings in all is
// scored by rank (ScoreByRank) when it is this much sparser: the block
// walks (windows, MaxScore) would decode most of the postings.
inline bool SparseBesidePostings(uint64_t docs, uint64_t postings) { return docs * 4 <= postings; }

// The common-word reasoning of WalkRequiredFirst and DisjunctionSegment,
// over a segment's TermLists (borrowed: they must outlive it). With the
// terms ordered by their list's bound (largest first), `deep[j]` holds the
// documents that count (`from`; all when null) with the first j + 1 terms,
// intersected as long as at least `want` remain. A document lacking term t scores at most the
// other terms' bounds summed: when that sum is below the threshold, t is
// required, and the required terms are a prefix of the order.
class RequiredTerms {
 public:
  RequiredTerms(const std::vector<TermList>& lists, const roaring_bitmap_t* from, size_t want) {
    for (const TermList& l : lists) lists_.push_back(List{l.postings.get(), l.bound});
    std::stable_sort(lists_.begin(), lists_.end(), [](const List& x, const List& y) { return x.bound > y.bound; });
    for (const List& l : lists_) {
      const roaring_bitmap_t* prev = deep_.empty() ? from : deep_.back();
      if (prev == nullptr) {  // the first list, borrowed
        if (roaring_bitmap_get_cardinality(l.postings) < want) break;
        deep_.push_back(l.postings);
        continue;
      }
      Bitmap next(roaring_bitmap_and(prev, l.postings));
      if (roaring_bitmap_get_cardinality(next.get()) < want) break;
      owned_.push_back(std::move(next));
      deep_.push_back(owned_.back().get());
    }
  }
  const std::vector<const roaring_bitmap_t*>& deep() const { return deep_; }
  // How many terms `threshold` makes required.
  size_t Required(double threshold) const {
    size_t required = 0;
    for (; required < lists_.size(); ++required) {
      double others = 0;
      for (size_t i = 0; i < lists_.size(); ++i)
        if (i != required) others += lists_[i].bound;
      if (others >= threshold) break;
    }
    return required;
  }

 private:
  struct List {
    const roaring_bitmap_t* postings;  // borrowed from the TermList
    double bound;                      // of the whole list
  };
  std::vector<List> lists_;
  std::vector<const roaring_bitmap_t*> deep_;
  std::vector<Bitmap> owned_;
};

// A conjunction of many matches (kManyMatches; common words, or a common
// word beside a rarer one): the matches that can still rank are found by bitmap algebra
// (RequiredTerms), so that `walk` (which offers a set of matches to the
// top-k) need not visit every match. The deepest intersection is walked
// first, which sets the threshold; then only the matches holding the
// required terms that were not walked yet.
template <class Walk>
void WalkRequiredFirst(const std::vector<TermList>& lists, const roaring_bitmap_t* final_bm, TopK& top, Walk&& walk) {
  if (roaring_bitmap_get_cardinality(final_bm) < kManyMatches) return walk(final_bm);
  const RequiredTerms terms(lists, final_bm, top.k());
  const auto& deep = terms.deep();
  if (deep.empty()) return walk(final_bm);
  walk(deep.back());
  const size_t required = terms.Required(top.threshold());
  if (required >= deep.size()) return;  // every match that can rank is walked
  const Bitmap rest(roaring_bitmap_andnot(required == 0 ? final_bm : deep[required - 1], deep.back()));
  walk(rest.get());
}

}  // namespace corvid::postings::search
