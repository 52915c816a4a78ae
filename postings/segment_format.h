// The segment file's format, and what its two writers share: the in-memory
// batch encoder (SegmentBuilder::Encode, segment_encoder.cc) and the
// streaming merger (segment_merger.cc) write it; the reader (Segment::Open,
// segment.cc) checks it. Internal to postings/: the header, the footer's
// checksum, the id filter, term keys, and the short posting list encoder
// both writers use.
//
// Segment file format, version 8 (all integers little-endian; every section
// and every frozen roaring bitmap starts at a 32-byte aligned offset, which
// frozen views require; posting lists are otherwise unaligned). Two
// writers produce it: SegmentBuilder::Encode (a batch, in memory) and the
// streaming merger, which writes the sections in another order; readers
// find every section through the directory.
//
//   Header, 64 bytes:
//     0  char[8] magic "CVDSEG01"
//     8  u32 format version (8; 7 had no id order or id filter and the
//            home-made Checksum64 over every byte, 6 no stored fields, 5 a fixed skip
//            stride of 16, 4 a skip table entry per 64 postings,
//            3 a 40-byte entry per term and a
//            frozen bitmap for every list, 2 56-byte entries and a skip
//            table and block maxima for every term, 1 no pair sections)
//    12  u32 roaring tag (major*10000 + minor*100 + revision of CRoaring that
//            wrote the frozen bitmaps; a different one is "unknown")
//    16  u64 definition fingerprint
//    24  u32 doc_count, u32 text_field_count, u32 numeric_field_count, u32 0
//    40  u64 directory offset
//    48  u64 file length
//    56  u64 0
//   Ids: u32 offsets[doc_count + 1] into a blob of the concatenated document ids.
//   Stored fields, when the definition's "store" lists paths: u64
//     offsets[doc_count + 1] into a blob of the documents' stored-field
//     objects (JSON text, as a hit's "fields" renders them), back to back.
//   Id order: u32 doc numbers[doc_count], ordered by id (bytewise).
//   Id filter: blocks of 64 bytes, a blocked Bloom filter of the ids
//     (segment_format.h has the hash and the bits).
//   Per text field (definition order of text fields, sorted by path):
//     u32 lengths[doc_count]          tokens of each document in the field
//     u32 term_offsets[T + 1], blob   the T terms, sorted bytewise
//     u64 list_offsets[T]             where each term's posting list starts
//     per term, its posting list (unaligned, back to back):
//       header, varints: doc_freq, pos_len, max_tf, min_len (the smallest
//         field length among its documents), last_doc, and for a long list
//         (doc_freq > 64) bitmap_len;
//       term frequencies in doc order, u8 each if max_tf < 256, else u32;
//       positions (pos_len bytes): per posting, tf varints of position
//         deltas (the first from 0);
//       short list (doc_freq <= 64, one block; most terms): the doc
//         numbers by chunks of equal high 16 bits: varint chunk count, per
//         chunk varints (high 16 bits, postings in it); a zero byte if
//         needed to reach an even file offset; u16 low 16 bits per doc
//         (Segment::Postings points roaring array containers at them);
//       long list: skip table, u32 per stride of postings (1, 2, 4, 8
//         or 16: SkipShift of doc_freq and pos_len, segment.h), the byte
//         offset of the first one's positions in the positions;
//         BlockMax per block of 64 postings {u32 last_doc, u32 max_tf,
//         u32 min_len, u32 0};
//         zeros to the next 32-byte boundary; the frozen roaring bitmap of
//         the doc numbers (bitmap_len bytes).
//     A short list costs no alignment, no bitmap header and no fixed-size
//     entry: W3's many-fields batches have ~950k lists of ~2.6 postings,
//     and format 3 spent 40 + ~16 + 9 bytes on each of them.
//     The common-word pair section (format in pairs.h).
//   Per numeric (number/date) field: f64 column[doc_count] (the double of
//     the document's smallest value, NaN when it has none); NumEntry[m]
//     {f64 value, u32 doc, i32 residual} sorted by (value, residual, doc),
//     one per value of every document (Number, segment.h: the residual is
//     what an integer beyond 2^53 differs from its double by, else 0).
//   Directory: u64 ids_offsets_off, u64 ids_blob_off, u64
//     stored_offsets_off, u64 stored_blob_off (both 0: none), u64
//     id_order_off, u64 id_filter_off, u64 id_filter_blocks; per text field
//     {u64 lengths_off, u64 sum_len, u32 docs_with_tokens, u32 term_count,
//      u64 term_offsets_off, u64 term_blob_off, u64 list_offsets_off,
//      u64 pairs_off (the field's common-word pair section, pairs.h)};
//     per numeric field {u64 column_off, u64 sorted_off, u64 sorted_count}.
//   Footer, 16 bytes: u64 checksum, char[8] "CVDSEGND". The checksum is
//     XXH3-64 over 16 bytes: the header's XXH3-64, then the XXH3-64 of
//     every byte from the header's end to the footer (FileChecksum).
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "postings/file_util.h"
#include "postings/segment.h"

namespace corvid::postings::segment_format {

// A name's first 8 bytes as a big-endian integer, zero-padded: a strictly
// smaller key means a bytewise smaller name (equal keys decide nothing).
inline uint64_t TermKey(std::string_view name) {
  uint64_t key = 0;
  for (size_t b = 0; b < 8; ++b) key = key << 8 | (b < name.size() ? static_cast<uint8_t>(name[b]) : 0);
  return key;
}


inline constexpr char kMagic[8] = {'C', 'V', 'D', 'S', 'E', 'G', '0', '1'};
inline constexpr char kFooterMagic[8] = {'C', 'V', 'D', 'S', 'E', 'G', 'N', 'D'};
inline constexpr size_t kHeaderBytes = 64;
inline constexpr size_t kFooterBytes = 16;
// The directory: ids (2 u64), stored fields (2 u64), id order, id filter
// offset and blocks (3 u64), then per field.
inline constexpr size_t kFixedDirBytes = 56;
inline constexpr size_t kTextDirBytes = 56;
inline constexpr size_t kNumericDirBytes = 24;

struct Header {
  uint64_t fingerprint = 0;
  uint32_t doc_count = 0, text_fields = 0, numeric_fields = 0;
  uint64_t dir_off = 0, file_len = 0;
};
inline void EncodeHeader(const Header& h, char out[kHeaderBytes]) {
  std::memset(out, 0, kHeaderBytes);
  std::memcpy(out, kMagic, 8);
  const uint32_t version = kSegmentFormatVersion, tag = kRoaringTag;
  std::memcpy(out + 8, &version, 4);
  std::memcpy(out + 12, &tag, 4);
  std::memcpy(out + 16, &h.fingerprint, 8);
  std::memcpy(out + 24, &h.doc_count, 4);
  std::memcpy(out + 28, &h.text_fields, 4);
  std::memcpy(out + 32, &h.numeric_fields, 4);
  std::memcpy(out + 40, &h.dir_off, 8);
  std::memcpy(out + 48, &h.file_len, 8);
}

// The footer's checksum: the XXH3-64 of 16 bytes, the header's XXH3-64
// then the XXH3-64 of everything between the header and the footer. The
// header is hashed apart because the merger writes it last (its directory
// offset and length are known only at the end) while it hashes the rest as
// it streams it out.
inline uint64_t CombineChecksums(uint64_t header_hash, uint64_t body_hash) {
  const uint64_t both[2] = {header_hash, body_hash};
  return XXH3_64bits(both, sizeof both);
}
inline uint64_t FileChecksum(const char* file, size_t size_without_footer) {
  return CombineChecksums(XXH3_64bits(file, kHeaderBytes),
                          XXH3_64bits(file + kHeaderBytes, size_without_footer - kHeaderBytes));
}

// The id filter: a blocked Bloom filter of the segment's ids, 64-byte
// blocks of 512 bits, about 10 bits per id (~1% false positives), read in
// place from the map. An id's XXH3-64 picks the block from its high 32
// bits and 7 bits in it from 9-bit slices of the hash times a constant.
// It lets an update find the segment holding the previous version of a
// document without an index of ids in memory: most segments answer "no"
// from one cache line, the one holding it then binary-searches its id
// order.
inline constexpr size_t kIdFilterBlockBytes = 64;
inline uint64_t IdFilterBlocks(uint64_t ids) { return std::max<uint64_t>(1, (ids * 10 + 511) / 512); }
inline uint64_t IdHash(std::string_view id) { return XXH3_64bits(id.data(), id.size()); }
template <typename Bit>
inline void ForEachIdFilterBit(uint64_t h, uint64_t blocks, Bit&& bit) {
  const uint64_t block = ((h >> 32) * blocks) >> 32;
  const uint64_t g = h * 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 7; ++i) bit(block * 512 + ((g >> (9 * i)) & 511));
}
inline void IdFilterAdd(char* filter, uint64_t blocks, std::string_view id) {
  ForEachIdFilterBit(IdHash(id), blocks, [&](uint64_t b) { filter[b >> 3] |= static_cast<char>(1u << (b & 7)); });
}
inline bool IdFilterMayContain(const char* filter, uint64_t blocks, std::string_view id) {
  bool all = true;
  ForEachIdFilterBit(IdHash(id), blocks, [&](uint64_t b) { all = all && ((filter[b >> 3] >> (b & 7)) & 1) != 0; });
  return all;
}

inline void Align(std::string& out) { out.append((32 - out.size() % 32) % 32, '\0'); }

// A text field's directory entry but its pair section's offset (segment.cc
// has the layout), appended to the directory being built.
struct TextFieldDir {
  uint64_t lengths_off, sum_len;
  uint32_t with_tokens, term_count;
  uint64_t term_offs_off, term_blob_off, list_offs_off;
};
inline void PutTextFieldDir(std::string& dir, const TextFieldDir& d) {
  PutFixed<uint64_t>(dir, d.lengths_off);
  PutFixed<uint64_t>(dir, d.sum_len);
  PutFixed<uint32_t>(dir, d.with_tokens);
  PutFixed<uint32_t>(dir, d.term_count);
  PutFixed<uint64_t>(dir, d.term_offs_off);
  PutFixed<uint64_t>(dir, d.term_blob_off);
  PutFixed<uint64_t>(dir, d.list_offs_off);
}

// Appends a short list (at most kShortList postings: docs and tfs, `df`
// each; len_of(i) the field length of posting i's document) to `out`:
// header varints, tfs, positions, the doc numbers as chunk varints and u16
// low halves. Its positions are pos_len bytes that write_positions(q)
// writes at q, returning the byte after them. `file_off` is the file
// offset `out` starts at (the low halves are u16-aligned in the file). One
// reservation, written through a pointer, then cut to size: most lists
// are short.
template <typename LenOf, typename WritePositions>
void AppendShortList(std::string& out, uint64_t file_off, const uint32_t* docs, const uint32_t* tfs, uint32_t df,
                     LenOf&& len_of, size_t pos_len, WritePositions&& write_positions) {
  uint32_t max_tf = 0, min_len = std::numeric_limits<uint32_t>::max(), chunks = 0;
  for (uint32_t i = 0; i < df; ++i) {
    max_tf = std::max(max_tf, tfs[i]);
    min_len = std::min(min_len, len_of(i));
    chunks += i == 0 || (docs[i] >> 16) != (docs[i - 1] >> 16);
  }
  const size_t at = out.size();
  out.resize(at + 5 * 5 + 4 * size_t{df} + pos_len + 5 + 10 * size_t{df} + 1 + 2 * size_t{df});
  char* const base = out.data();
  char* q = base + at;
  q = WriteVarint(q, df);
  q = WriteVarint(q, static_cast<uint32_t>(pos_len));
  q = WriteVarint(q, max_tf);
  q = WriteVarint(q, min_len);
  q = WriteVarint(q, docs[df - 1]);
  if (max_tf < 256) {
    for (uint32_t i = 0; i < df; ++i) *q++ = static_cast<char>(tfs[i]);
  } else {
    std::memcpy(q, tfs, 4 * size_t{df});
    q += 4 * size_t{df};
  }
  q = write_positions(q);
  q = WriteVarint(q, chunks);
  for (uint32_t i = 0, start = 0; i < df; ++i) {
    if (i + 1 < df && (docs[i + 1] >> 16) == (docs[i] >> 16)) continue;
    q = WriteVarint(q, docs[i] >> 16);
    q = WriteVarint(q, i + 1 - start);
    start = i + 1;
  }
  if ((file_off + static_cast<uint64_t>(q - base)) % 2 != 0) *q++ = '\0';  // the low halves are u16-aligned
  for (uint32_t i = 0; i < df; ++i) {
    const auto low = static_cast<uint16_t>(docs[i]);
    std::memcpy(q, &low, 2);
    q += 2;
  }
  out.resize(static_cast<size_t>(q - base));
}

}  // namespace corvid::postings::segment_format
