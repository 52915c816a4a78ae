// Matching: a compiled query's boolean structure evaluated per segment
// with roaring bitmap algebra (Eval), phrases verified against positions
// (in chunks on every core), and what the scorers read of the result.
#pragma once

#include <roaring/roaring.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "postings/roaring_layout.h"
#include "postings/search/query.h"
#include "postings/snapshot.h"

namespace corvid::postings::search {

// A verified phrase's matches and, per match, each query term's tf (row
// by row, `terms` order): read while verifying, so that Score does not
// look the same postings up again. Empty when the positions were not read
// (a term or a pair table answered) or nothing matched.
struct PhraseTfs {
  std::vector<uint32_t> docs;
  std::vector<uint32_t> tfs;  // [match * terms + i]
};

// Per-segment evaluation state of a compiled query of `nodes` nodes. A
// node's bitmap may be borrowed (a segment's posting list, or a child's
// bitmap) rather than copied.
struct SegEval {
  SegEval(const SegmentState& state, int nodes) : s(&state), node_bm(nodes), alt_bm(nodes), alt_tfs(nodes) {}
  const SegmentState* s;
  std::vector<const roaring_bitmap_t*> node_bm;  // by node id; owned by `owned` or `alt_bm`
  std::vector<std::vector<ConstBitmap>> alt_bm;  // by node id, alt index
  std::vector<std::vector<PhraseTfs>> alt_tfs;   // by node id, alt index
  std::vector<ConstBitmap> owned;
  const roaring_bitmap_t* Keep(Bitmap b) {
    owned.emplace_back(b.release());
    return owned.back().get();
  }
};

// The documents of segment k where `n` matches (and, through ev, those of
// each of its nodes and alternatives), borrowed from ev.
const roaring_bitmap_t* Eval(const CNode& n, size_t k, SegEval& ev);

// Calls f(doc) for every document of b, in order, 256 decoded at a time.
template <typename F>
void ForEachDoc(const roaring_bitmap_t* b, F&& f) {
  uint32_t buf[256];
  roaring_uint32_iterator_t it;
  roaring_init_iterator(b, &it);
  while (uint32_t got = roaring_read_uint32_iterator(&it, buf, 256))
    for (uint32_t i = 0; i < got; ++i) f(buf[i]);
}

// Leaf `n`'s alternative ai's matches among anc: anc itself for a leaf of
// one alternative, else their AND, kept in *own.
const roaring_bitmap_t* AltBitmap(const CNode& n, size_t ai, const roaring_bitmap_t* anc, const SegEval& ev,
                                  Bitmap* own);

// The same matches, ascending, into out.
void AltMatches(const CNode& n, size_t ai, const roaring_bitmap_t* anc, const SegEval& ev, std::vector<uint32_t>& out);

// Score term i of leaf `n`'s alternative ai: its tf at the alternative's
// matches, asked in ascending order. A verified phrase's tfs were read
// with its positions; otherwise by rank in the postings (matches are often
// far sparser than the postings: a phrase's in a common word's list).
// Valid while ev is.
class ScoreTermTfs {
 public:
  ScoreTermTfs(const CNode& n, size_t ai, size_t i, size_t k, const SegEval& ev);  // match.cc
  // d's tf, 0 if d does not hold the term; d ascending, a match of the alternative.
  uint32_t Tf(uint32_t d) {
    if (known_ != nullptr) {
      while (known_->docs[m_] < d) ++m_;
      return known_->tfs[m_ * nt_ + q_];
    }
    uint32_t r;
    return ranks_ && ranks_->Find(d, &r) ? tfs_[r] : 0;
  }

 private:
  const PhraseTfs* known_ = nullptr;
  size_t nt_ = 0, q_ = 0, m_ = 0;  // known_: terms per row, this term's column, next row
  ConstBitmap postings_;
  std::optional<RankCursor> ranks_;
  TfArray tfs_;
};

}  // namespace corvid::postings::search
