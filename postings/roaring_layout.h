// Every piece of postings/ that reads or writes CRoaring's internal layout,
// with the checks that this library version agrees: the frozen
// serialization written directly for small bitmaps (AppendFrozenBitmap,
// checked against the library's writer) and read in place
// (ForEachFrozen, checked by FrozenReaderAgrees); a short list's bitmap
// built over the file's bytes (ShortListBitmap); and RankCursor, which
// walks a bitmap's container structs (tests/postings/rank_cursor_test.cc
// pins it against the library's rank). Segments record the CRoaring
// version that wrote them (kRoaringTag): another version rebuilds them.
#pragma once

#include <roaring/roaring.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace corvid::postings {

// Appends the frozen roaring serialization of `docs` (ascending, no
// repeats), run-optimized, exactly as roaring_bitmap_frozen_serialize
// writes it; the caller aligns `out` (frozen views need 32 bytes). Small
// single-container bitmaps (every batch term in fewer than 4097 documents)
// are written directly, without building a bitmap.
void AppendFrozenBitmap(std::string& out, std::span<const uint32_t> docs);

// A short list's doc numbers (its `chunks` (key, count) varint pairs at
// `pairs`, the low halves at `lows`, in the file) as a roaring bitmap of
// array containers pointing at the low halves: one allocation, no copy,
// flagged frozen. Null if the allocation fails.
const roaring_bitmap_t* ShortListBitmap(uint32_t chunks, const uint8_t* pairs, const uint16_t* lows);

// Whether ForEachFrozen reads this CRoaring's frozen layout exactly as the
// library does: checked once per process on arrays, runs, bitsets and
// several chunks (roaring_layout.cc), so that another library version falls back
// to the library's view instead of misreading.
bool FrozenReaderAgrees();

// Calls f(value) for every value of a frozen roaring bitmap (written by
// roaring_bitmap_frozen_serialize, `len` bytes at `buf`), in order, read
// straight from its bytes: no view is built and nothing is allocated, which
// matters to queries that read hundreds of short lists (a prefix's
// expansion). The layout, from the end: u32 header (containers << 15 |
// cookie), u8 type per container (1 bitset, 2 array, 3 run), u16 count per
// container (bitset and array: cardinality - 1; run: runs), u16 key per
// container; from the start, the containers' data in three zones: bitsets
// (1024 u64 each), runs (u16 start, u16 length - 1), arrays (u16 each).
//
// ForEachFrozenContainer is the same walk with the bitset containers handed
// whole to bitset(key, words): key the container's high bits (<< 16),
// words its 1024 u64 (unaligned bytes).
template <typename F, typename B>
void ForEachFrozenContainer(const char* buf, size_t len, F&& f, B&& bitset) {
  uint32_t header;
  std::memcpy(&header, buf + len - 4, 4);
  const uint32_t n = header >> 15;
  const uint8_t* types = reinterpret_cast<const uint8_t*>(buf + len - 4 - n);
  const char* counts = buf + len - 4 - 3 * size_t{n};
  const char* keys = counts - 2 * size_t{n};
  auto u16 = [](const char* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return uint32_t{v};
  };
  size_t bitsets = 0, run_bytes = 0;
  for (uint32_t i = 0; i < n; ++i) {
    bitsets += types[i] == 1;
    if (types[i] == 3) run_bytes += 4 * size_t{u16(counts + 2 * i)};
  }
  const char* bitset_zone = buf;
  const char* run_zone = buf + 8192 * bitsets;
  const char* array_zone = run_zone + run_bytes;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t key = u16(keys + 2 * i) << 16, count = u16(counts + 2 * i);
    if (types[i] == 2) {
      for (uint32_t j = 0; j <= count; ++j) f(key | u16(array_zone + 2 * j));
      array_zone += 2 * (size_t{count} + 1);
    } else if (types[i] == 3) {
      for (uint32_t r = 0; r < count; ++r) {
        const uint32_t start = key | u16(run_zone + 4 * r), last = start + u16(run_zone + 4 * r + 2);
        for (uint32_t v = start; v <= last; ++v) f(v);
      }
      run_zone += 4 * size_t{count};
    } else {
      bitset(key, bitset_zone);
      bitset_zone += 8192;
    }
  }
}

template <typename F>
void ForEachFrozen(const char* buf, size_t len, F&& f) {
  ForEachFrozenContainer(buf, len, f, [&f](uint32_t key, const char* words) {
    for (uint32_t w = 0; w < 1024; ++w) {
      uint64_t word;
      std::memcpy(&word, words + 8 * w, 8);
      for (; word != 0; word &= word - 1) f(key | (w * 64 + static_cast<uint32_t>(std::countr_zero(word))));
    }
  });
}


// RankCursor: the rank (number of smaller members) of increasing documents
// in a roaring bitmap, by walking its containers incrementally. A posting
// list's term frequencies are indexed by rank, and its positions by
// stride of ranks (Segment::SkipTo), so a query
// that already knows its candidate documents (phrase verification, scoring
// a final match set) can reach a posting without decoding the list's doc
// numbers block by block. Reads CRoaring's container structs directly: the
// segment format is tied to the CRoaring version already (kRoaringTag).
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
