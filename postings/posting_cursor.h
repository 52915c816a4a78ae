// Readers of one term's postings in a segment (segment.h's format): the
// doc numbers in order with their ranks and block-skipping (PostingCursor),
// and the positions by rank (PositionReader). The searcher's matching and
// scorers read postings through these.
#pragma once

#include <roaring/roaring.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "postings/file_util.h"
#include "postings/segment.h"

namespace corvid::postings {

// Iterates one posting list in doc order with its rank (for term
// frequencies) and block-skipping Advance. Doc numbers are decoded a block
// (kPostingBlock postings, the unit of the skip table and block maxima)
// at a time.
class PostingCursor {
 public:
  PostingCursor(const Segment& seg, uint32_t field, uint32_t ti) {
    const TermEntry e = seg.entry(field, ti);  // decoded once for all four
    bm_ = seg.Postings(e);
    blocks_ = seg.Blocks(e, whole_);
    df_ = e.doc_freq;
    nblocks_ = static_cast<uint32_t>(BlockCount(df_));
    tfs_ = seg.Tfs(e);
    roaring_init_iterator(bm_.get(), &it_);
    LoadBlock(0);
  }
  // The list's block maxima (valid while the cursor is).
  const BlockMax* blocks() const { return blocks_; }
  bool valid() const { return rank_ < df_; }
  uint32_t doc() const { return buf_[rank_ - block_ * kPostingBlock]; }
  uint32_t rank() const { return rank_; }
  uint32_t tf() const { return tfs_[rank_]; }
  void Next() {
    if (++rank_ == (block_ + 1) * kPostingBlock) LoadBlock(block_ + 1);
  }
  // Moves to the first posting >= target.
  void Advance(uint32_t target) {
    if (!valid() || doc() >= target) return;
    if (blocks_[block_].last_doc < target) {
      uint32_t nb = block_ + 1;
      while (nb < nblocks_ && blocks_[nb].last_doc < target) ++nb;
      LoadBlock(nb);
      if (!valid()) return;
    }
    while (doc() < target) ++rank_;  // stops in this block: its last doc >= target
  }
  // Calls f(x, tf) for each docs[x] (x < n) in the list. `docs` ascends
  // from doc() and ends at or before the current block's last doc, so the
  // cursor stays in its block: a merge over decoded postings, no Advance
  // per document.
  template <class F>
  void ForEachInBlock(const uint32_t* docs, size_t n, F&& f) {
    const uint32_t base = block_ * kPostingBlock;
    uint32_t r = rank_;
    for (size_t x = 0; x < n; ++x) {
      while (buf_[r - base] < docs[x]) ++r;  // stops in this block: its last doc >= docs[x]
      if (buf_[r - base] == docs[x]) f(x, tfs_[r]);
    }
    rank_ = r;
  }

 private:
  // Decodes block b's doc numbers into buf_ (b == nblocks_: the end).
  void LoadBlock(uint32_t b) {
    block_ = b;
    rank_ = std::min(df_, b * kPostingBlock);
    if (b >= nblocks_) return;
    if (it_block_ != b) roaring_move_uint32_iterator_equalorlarger(&it_, blocks_[b - 1].last_doc + 1);  // b > 0 here
    roaring_read_uint32_iterator(&it_, buf_, kPostingBlock);
    it_block_ = b + 1;
  }

  ConstBitmap bm_;
  roaring_uint32_iterator_t it_;
  const BlockMax* blocks_;
  BlockMax whole_;  // a short list's one block (Segment::Blocks)
  uint32_t df_, nblocks_;
  TfArray tfs_;
  uint32_t rank_ = 0;
  uint32_t block_ = 0;     // the block in buf_
  uint32_t it_block_ = 0;  // the block it_ is at the start of
  uint32_t buf_[kPostingBlock];
};

// The encoded positions of one term's postings by rank (from a RankCursor
// over its bitmap): Segment::SkipTo gives the start of the nearest posting
// the skip table reaches, then the postings in between are skipped (tf
// varints each). Increasing ranks continue from the previous posting when
// that is nearer.
class PositionReader {
 public:
  PositionReader(const Segment& seg, uint32_t field, uint32_t ti)
      : seg_(seg), e_(seg.entry(field, ti)), tfs_(seg.Tfs(e_)) {}  // the header decoded once
  uint32_t tf(uint32_t rank) const { return tfs_[rank]; }
  // Posting `rank`'s positions: tf(rank) varint deltas from 0.
  const uint8_t* Begin(uint32_t rank) {
    if (ptr_ == nullptr || at_ > rank || at_ < Segment::SkipFrom(e_, rank)) ptr_ = seg_.SkipTo(e_, rank, &at_);
    if (at_ < rank) {
      size_t skip = 0;
      for (; at_ < rank; ++at_) skip += tfs_[at_];
      ptr_ = SkipVarints(ptr_, skip);
    }
    return ptr_;
  }
  // Decodes posting `rank`'s positions into out (absolute).
  void Decode(uint32_t rank, std::vector<uint32_t>& out) {
    const uint8_t* p = Begin(rank);
    out.clear();
    uint32_t acc = 0, v;
    for (uint32_t k = tfs_[rank]; k > 0; --k) {
      p = GetVarint(p, &v);
      acc += v;
      out.push_back(acc);
    }
    ptr_ = p;
    ++at_;
  }

 private:
  const Segment& seg_;
  TermEntry e_;
  TfArray tfs_;
  const uint8_t* ptr_ = nullptr;  // start of posting at_'s positions
  uint32_t at_ = 0;
};

}  // namespace corvid::postings
