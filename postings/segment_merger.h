// The merger: writes the live documents of several segments into one new
// segment file, streaming. It reads its inputs through their memory maps
// and writes the merged ids, stored fields, lengths, postings, positions,
// pair tables and number columns to the file as it goes, term by term;
// what it holds is independent of the segments' sizes but for the id
// filter it writes (~1.25 bytes per document), a long list's bitmap
// (at most 1 bit per document) and the merged pair bitmaps. Which segments to
// merge is merge_policy.h's business; committing the result is the index's
// (search_index.cc).
#pragma once

#include <roaring/roaring.h>

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "postings/segment.h"

namespace corvid::postings {

// Where an input's live documents go in the merged segment: document d of
// the input becomes base + d - (deleted documents before d). Holds a
// bitset of the deleted documents and a count per 64 (0.19 bytes per
// document) when there are deletes, nothing otherwise.
class DocRemap {
 public:
  DocRemap(const roaring_bitmap_t* deleted, uint32_t doc_count, uint32_t base);
  bool live(uint32_t d) const { return words_.empty() || ((words_[d >> 6] >> (d & 63)) & 1) == 0; }
  // Requires live(d).
  uint32_t operator()(uint32_t d) const {
    if (words_.empty()) return base_ + d;
    const uint64_t below = words_[d >> 6] & ((uint64_t{1} << (d & 63)) - 1);
    return base_ + d - before_[d >> 6] - static_cast<uint32_t>(std::popcount(below));
  }
  uint32_t live_count() const { return live_; }
  uint32_t base() const { return base_; }
  bool has_deletes() const { return !words_.empty(); }

 private:
  uint32_t base_ = 0, live_ = 0;
  std::vector<uint64_t> words_;   // deleted documents; empty: none
  std::vector<uint32_t> before_;  // deleted documents in the words before
};

struct MergeInput {
  const Segment* segment = nullptr;
  const roaring_bitmap_t* deleted = nullptr;  // never null
};

// Writes dir/name (through dir/name.tmp, fsynced, renamed, directory
// fsynced) holding the live documents of `inputs` in order. Returns the
// merged document count, and in *remaps (if given) where each input's
// documents went; on error or when `cancel` becomes true nothing is left at
// dir/name or dir/name.tmp. Cost: one pass over the inputs' files per
// section, a few per long posting list.
Result<uint32_t> MergeSegments(std::span<const MergeInput> inputs, const std::string& dir, const std::string& name,
                               uint64_t fingerprint, uint32_t text_fields, uint32_t numeric_fields,
                               const std::atomic<bool>& cancel, std::vector<DocRemap>* remaps = nullptr);

}  // namespace corvid::postings
