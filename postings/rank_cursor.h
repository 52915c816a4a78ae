// RankCursor: the rank (number of smaller members) of increasing documents
// in a roaring bitmap, by walking its containers incrementally. A posting
// list's term frequencies are indexed by rank, and its positions by
// stride of ranks (Segment::SkipTo), so a query
// that already knows its candidate documents (phrase verification, scoring
// a final match set) can reach a posting without decoding the list's doc
// numbers block by block. Reads CRoaring's container structs directly: the
// segment format is tied to the CRoaring version already (kRoaringTag).
#pragma once

#include <roaring/roaring.h>

#include <algorithm>
#include <bit>
#include <cstdint>

namespace corvid::postings {

class RankCursor {
 public:
  // `bm` is borrowed and must outlive the cursor.
  explicit RankCursor(const roaring_bitmap_t* bm) : ra_(&bm->high_low_container) { Enter(0); }

  // If d is in the bitmap, sets *rank to the number of members below d and
  // returns true; otherwise returns false (*rank unchanged). Calls must not
  // decrease d. Cost over a sequence of calls: every container passed is
  // summed once (its stored cardinality; run containers add their runs),
  // and inside a container the words (bitset) or runs passed are counted
  // once; array containers gallop.
  bool Find(uint32_t d, uint32_t* rank) {
    const auto hb = static_cast<uint16_t>(d >> 16);
    const auto lb = static_cast<uint16_t>(d & 0xFFFF);
    while (ci_ < ra_->size && ra_->keys[ci_] < hb) {
      base_ += Cardinality();
      Enter(ci_ + 1);
    }
    if (ci_ == ra_->size || ra_->keys[ci_] != hb) return false;
    switch (type_) {
      case BITSET_CONTAINER_TYPE_CODE: {
        const uint64_t* words = static_cast<const bitset_container_t*>(c_)->array;
        const uint32_t w = lb >> 6;
        for (; in_ < w; ++in_) in_rank_ += static_cast<uint32_t>(std::popcount(words[in_]));
        const uint64_t bit = uint64_t{1} << (lb & 63);
        if ((words[w] & bit) == 0) return false;
        *rank = base_ + in_rank_ + static_cast<uint32_t>(std::popcount(words[w] & (bit - 1)));
        return true;
      }
      case ARRAY_CONTAINER_TYPE_CODE: {
        const auto* a = static_cast<const array_container_t*>(c_);
        const uint16_t* v = a->array;
        const uint32_t n = static_cast<uint32_t>(a->cardinality);
        // Gallop from the last position, then binary search the last step.
        uint32_t lo = in_, step = 1;
        while (lo + step < n && v[lo + step] < lb) {
          lo += step;
          step *= 2;
        }
        in_ = static_cast<uint32_t>(std::lower_bound(v + lo, v + std::min(n, lo + step + 1), lb) - v);
        if (in_ == n || v[in_] != lb) return false;
        *rank = base_ + in_;
        return true;
      }
      default: {  // RUN_CONTAINER_TYPE_CODE
        const auto* r = static_cast<const run_container_t*>(c_);
        for (; in_ < static_cast<uint32_t>(r->n_runs); ++in_) {
          const rle16_t run = r->runs[in_];
          if (uint32_t{run.value} + run.length >= lb) {
            if (run.value > lb) return false;
            *rank = base_ + in_rank_ + (lb - run.value);
            return true;
          }
          in_rank_ += uint32_t{run.length} + 1;
        }
        return false;
      }
    }
  }

 private:
  void Enter(int32_t ci) {
    ci_ = ci;
    in_ = 0;
    in_rank_ = 0;
    if (ci_ >= ra_->size) return;
    type_ = ra_->typecodes[ci_];
    c_ = container_unwrap_shared(ra_->containers[ci_], &type_);
  }
  uint32_t Cardinality() const { return static_cast<uint32_t>(container_get_cardinality(c_, type_)); }

  const roaring_array_t* ra_;
  int32_t ci_ = 0;    // current container
  uint8_t type_ = 0;  // its type (shared containers unwrapped)
  const void* c_ = nullptr;
  uint32_t base_ = 0;     // members in the containers before ci_
  uint32_t in_ = 0;       // bitset: next word to count; array: search start; run: next run
  uint32_t in_rank_ = 0;  // bitset: members in words before in_; run: in runs before in_
};

}  // namespace corvid::postings
