// Common-word pairs ("common grams", as Lucene's CommonGramsFilter and
// Elasticsearch's index_phrases): per text field of a segment, for its most
// frequent terms, the documents in which one such term is immediately
// followed by another. A phrase of two frequent words otherwise has most of
// the segment as candidates, each with long position lists to merge; with
// the pair's documents it is one bitmap, and a longer phrase starts from
// far fewer candidates.
//
// Built by SegmentBuilder::Encode from the term data it already holds
// (for batches and merges alike); stored in the
// segment file (format in segment.cc) and read by Segment::PairPostings.
#pragma once

#include <roaring/roaring.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace corvid::postings {

// At most this many common terms per field (a pair's terms are u16 indexes
// into the field's common-term list).
inline constexpr uint32_t kMaxCommonTerms = 64;

// Segments of fewer documents get no pair tables: a phrase there verifies
// at most this many documents' positions, while the tables cost a batch of
// a few large many-field documents (W3) a sixth of its segment's bytes.
// Merges build the tables once segments reach this size.
inline constexpr uint32_t kMinPairTableDocs = 1024;

// The field's common terms: the kMaxCommonTerms terms (indexes into
// `doc_freqs`, the field's dictionary order) with the largest document
// frequencies, among those in at least 1/64 of the segment's documents;
// ties go to the lower index. Returned in increasing index order.
std::vector<uint32_t> ChooseCommonTerms(std::span<const uint32_t> doc_freqs, uint32_t doc_count);

// One common term's postings, as the builder holds them: ascending docs,
// their term frequencies, and the positions (per posting, tf varints of
// deltas from 0) back to back.
struct PairSource {
  std::span<const uint32_t> docs;
  std::span<const uint32_t> tfs;
  const uint8_t* positions;
};

// The documents in which common term `first` at some position p is followed
// by common term `second` at p + 1 (indexes into the sources).
struct PairList {
  uint16_t first = 0, second = 0;
  std::vector<uint32_t> docs;  // ascending, no repeats
};

// Every pair with at least one document, sorted by (first, second).
// Cost: O(positions of the common terms × log(their positions per document)).
std::vector<PairList> BuildPairs(std::span<const PairSource> common);

// A field's tokens as a batch builder logs them: each document's tokens
// (from `first` to the next document's first), in the order added.
struct TextToken {
  uint32_t term;  // index into the builder's dictionary
  uint32_t position;
};
struct DocStart {
  uint32_t doc;
  uint32_t first;
};
// The same pairs as BuildPairs, from the log: `common_of[term]` is the
// term's index among the common terms + 1, or 0. One pass with a table
// lookup per token where positions increase (the analyzers' order); a
// document whose positions do not is sorted first.
std::vector<PairList> BuildPairsFromLog(std::span<const TextToken> tokens, std::span<const DocStart> docs,
                                        std::span<const uint8_t> common_of, size_t common_count);

// Segment file section of one text field (32-byte aligned, little-endian):
//   u32 common_count, u32 pair_count,
//   u32 common[common_count]   dictionary indexes of the common terms, ascending
//   (8-byte aligned) PairEntry[pair_count], sorted by (first, second)
//   per pair: a frozen roaring bitmap of its documents (32-byte aligned)
#pragma pack(push, 1)
struct PairEntry {
  uint16_t first, second;  // indexes into common[]
  uint32_t bitmap_len;
  uint64_t bitmap_off;  // from the start of the file
};
#pragma pack(pop)

// Appends a field's section to a segment image; returns its offset.
// `common`: ChooseCommonTerms' result; `pairs`: BuildPairs' over them.
uint64_t AppendPairSection(std::string& out, std::span<const uint32_t> common, std::span<const PairList> pairs);

// The same from bitmaps (the streaming merger): `out` starts at file
// offset `base`, a multiple of 32; each bitmap is run-optimized already.
struct PairBitmap {
  uint16_t first = 0, second = 0;
  const roaring_bitmap_t* docs = nullptr;
};
uint64_t AppendPairSection(std::string& out, uint64_t base, std::span<const uint32_t> common,
                           std::span<const PairBitmap> pairs);

// A field's section as read from a mapped segment file.
class PairTable {
 public:
  // Validates the section at `off` of the file [base, base + size) for a
  // dictionary of `term_count` terms; false if it is malformed.
  bool Parse(const char* base, uint64_t size, uint64_t off, uint32_t term_count);
  // If terms i and j (dictionary indexes) are both common, sets *docs to the
  // documents where i is immediately followed by j — a frozen view the
  // caller frees, or nullptr if there are none — and returns true;
  // otherwise returns false (the table cannot tell).
  bool Find(uint32_t i, uint32_t j, const roaring_bitmap_t** docs) const;
  // The same table in another mapping of the same file, whose bytes start
  // at `base` (Segment::MapAgain).
  PairTable Rebased(const char* base) const;

 private:
  int Common(uint32_t term) const;
  const char* base_ = nullptr;
  const uint32_t* common_ = nullptr;
  uint32_t common_count_ = 0;
  const PairEntry* entries_ = nullptr;
  uint32_t pair_count_ = 0;
};

}  // namespace corvid::postings
