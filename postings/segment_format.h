// What the segment file's two writers share: the in-memory batch encoder
// (SegmentBuilder::Encode, segment.cc) and the streaming merger
// (segment_merger.cc) write the same format, whose layout is documented at
// the top of segment.cc; the reader (Segment::Open) checks it. Internal to
// postings/: the header, the footer's checksum, the id filter, and the
// short posting list encoder both writers use.
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
