// Segment file encoder and reader.
//
// Segment file format, version 8 (all integers little-endian; every section
// and every frozen roaring bitmap starts at a 32-byte aligned offset, which
// frozen views require; posting lists are otherwise unaligned). Two
// writers produce it: SegmentBuilder::Encode below (a batch, in memory)
// and the streaming merger (segment_merger.cc), which writes the sections
// in another order; readers find every section through the directory.
// Shared pieces are in segment_format.h.
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
#include "postings/segment.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>

#include "postings/segment_format.h"

namespace corvid::postings {
namespace {

using namespace segment_format;

// A name's first 8 bytes as a big-endian integer, zero-padded: a strictly
// smaller key means a bytewise smaller name (equal keys decide nothing).
inline uint64_t TermKey(std::string_view name) {
  uint64_t key = 0;
  for (size_t b = 0; b < 8; ++b) key = key << 8 | (b < name.size() ? static_cast<uint8_t>(name[b]) : 0);
  return key;
}

// The dictionary's in-memory hash (never stored; any good mix will do):
// HashShortBytes' multiply-xorshift rounds, but the bytes after the last
// whole word are read with fixed-size loads (one overlapping 8-byte load,
// or two 4-byte ones, or three bytes) instead of a variable-length memcpy,
// which is a library call per token.
inline uint64_t TermHash(std::string_view s) {
  const char* p = s.data();
  const size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  size_t i = 0;
  uint64_t w;
  for (; i + 8 <= n; i += 8) {
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  const size_t rest = n - i;
  if (rest == 0) {
    w = 0;
  } else if (n >= 8) {
    std::memcpy(&w, p + n - 8, 8);
  } else if (rest >= 4) {
    uint32_t a, b;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + n - 4, 4);
    w = (uint64_t{a} << 32) | b;
  } else {
    w = (uint64_t{static_cast<uint8_t>(p[0])} << 16) | (uint64_t{static_cast<uint8_t>(p[rest / 2])} << 8) |
        static_cast<uint8_t>(p[rest - 1]);
  }
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  return h * 0x9E3779B97F4A7C15ull;
}

template <typename T>
void PutArray(std::string& out, const T* p, size_t n) {
  out.append(reinterpret_cast<const char*>(p), n * sizeof(T));
}

// CRoaring's frozen layout of a bitmap with one container (as
// roaring_bitmap_frozen_serialize writes it): the container's data (array:
// u16 low bits per value; run: u16 start, u16 length - 1 per run), u16 key
// (high bits), u16 count (array: cardinality - 1; run: runs), u8 type
// (2 array, 3 run), u32 (containers << 15 | 13766).
constexpr uint8_t kFrozenArray = 2, kFrozenRun = 3;
constexpr uint32_t kFrozenCookie = 13766;

// The fast path of AppendFrozenBitmap: one chunk of at most 4096 values,
// written directly (no bitmap built). False, writing nothing, otherwise.
bool AppendFrozenSmall(std::string& out, std::span<const uint32_t> docs) {
  const size_t n = docs.size();
  if (n == 0 || n > 4096 || (docs.front() >> 16) != (docs.back() >> 16)) return false;
  size_t runs = 1;
  for (size_t i = 1; i < n; ++i) runs += docs[i] != docs[i - 1] + 1;
  // run_optimize keeps an array unless runs are strictly smaller (4r vs 2n bytes).
  const bool as_run = 2 * runs < n;
  const size_t at = out.size();
  out.resize(at + (as_run ? 4 * runs : 2 * n) + 9);
  char* p = out.data() + at;
  auto put16 = [&](uint32_t v) {
    const uint16_t x = static_cast<uint16_t>(v);
    std::memcpy(p, &x, 2);
    p += 2;
  };
  if (as_run) {
    size_t start = 0;
    for (size_t i = 1; i <= n; ++i) {
      if (i < n && docs[i] == docs[i - 1] + 1) continue;
      put16(docs[start]);
      put16(static_cast<uint32_t>(i - start - 1));
      start = i;
    }
  } else {
    for (uint32_t d : docs) put16(d);
  }
  put16(docs.front() >> 16);
  put16(static_cast<uint32_t>(as_run ? runs : n - 1));
  *p++ = static_cast<char>(as_run ? kFrozenRun : kFrozenArray);
  const uint32_t header = (uint32_t{1} << 15) | kFrozenCookie;
  std::memcpy(p, &header, 4);
  return true;
}

void AppendFrozenByLibrary(std::string& out, std::span<const uint32_t> docs) {
  Bitmap bm(roaring_bitmap_of_ptr(docs.size(), docs.data()));
  roaring_bitmap_run_optimize(bm.get());
  const size_t at = out.size();
  out.resize(at + roaring_bitmap_frozen_size_in_bytes(bm.get()));
  roaring_bitmap_frozen_serialize(bm.get(), out.data() + at);
}

// Whether the fast path writes exactly what this CRoaring writes: checked
// once per process on arrays and runs around the array/run threshold, so
// another library version falls back to the library instead of writing a
// layout it cannot read.
bool FrozenFastPathAgrees() {
  static const bool agrees = [] {
    const std::vector<std::vector<uint32_t>> cases = {{5}, {1, 2}, {1, 2, 3}, {1, 3, 5, 7, 9}, {7, 8, 20, 21},
                                                      {7, 8, 20, 21, 22}, {65536 * 3 + 1, 65536 * 3 + 2, 65536 * 4 - 1}};
    for (const auto& c : cases) {
      std::string a, b;
      if (!AppendFrozenSmall(a, c)) return false;
      AppendFrozenByLibrary(b, c);
      if (a != b) return false;
    }
    return true;
  }();
  return agrees;
}

}  // namespace

bool FrozenReaderAgrees() {
  static const bool agrees = [] {
    std::vector<std::vector<uint32_t>> cases = {{5}, {1, 2, 3}, {7, 8, 20, 21, 22}, {65536 * 3 + 1, 65536 * 4 - 1}};
    std::vector<uint32_t> mixed;  // a run, an array and a bitset chunk, in that order
    for (uint32_t v = 10; v < 3000; ++v) mixed.push_back(v);
    for (uint32_t v = 65536; v < 65536 + 4000; v += 7) mixed.push_back(v);
    for (uint32_t v = 2 * 65536; v < 3 * 65536; v += 3) mixed.push_back(v);
    cases.push_back(mixed);
    for (const auto& c : cases) {
      std::string frozen;  // ForEachFrozen reads unaligned: no alignment needed
      AppendFrozenByLibrary(frozen, c);
      std::vector<uint32_t> read;
      ForEachFrozen(frozen.data(), frozen.size(), [&](uint32_t v) { read.push_back(v); });
      if (read != c) return false;
    }
    return true;
  }();
  return agrees;
}

namespace {

// The skip table of a posting list: the byte offset into `positions`
// (pos_len bytes) of every stride-th posting (segment.h, SkipShift), found
// by skipping each stride's tf varints, up to the last stride start only.
void AppendSkipTable(std::string& out, std::span<const uint32_t> tfs, const uint8_t* positions, size_t pos_len) {
  const size_t n = tfs.size();
  const size_t stride = size_t{1} << SkipShift(static_cast<uint32_t>(n), static_cast<uint32_t>(pos_len));
  const uint8_t* p = positions;
  for (size_t s = 0; s * stride < n; ++s) {
    PutFixed<uint32_t>(out, static_cast<uint32_t>(p - positions));
    if ((s + 1) * stride >= n) break;
    size_t varints = 0;
    for (size_t i = s * stride; i < (s + 1) * stride; ++i) varints += tfs[i];
    p = SkipVarints(p, varints);
  }
}

// A posting list's header (segment format above), the list starting at
// file offset `list_off`, at `p`; `end` bounds the reads. Returns false,
// leaving *e partly set, if a varint runs past `end`.
bool DecodeHeaderBounded(const uint8_t* p, const uint8_t* end, uint64_t list_off, TermEntry* e) {
  const uint8_t* start = p;
  uint32_t v[6] = {0, 0, 0, 0, 0, 0};
  for (int k = 0; k < 6; ++k) {
    if (k == 5 && v[0] <= kShortList) break;
    uint32_t r = 0;
    for (int shift = 0;; shift += 7) {
      if (p == end || shift > 28) return false;
      r |= static_cast<uint32_t>(*p & 0x7f) << shift;
      if ((*p++ & 0x80) == 0) break;
    }
    v[k] = r;
  }
  e->doc_freq = v[0];
  e->pos_len = v[1];
  e->tf_width = v[2] < 256 ? 1 : 4;
  e->bitmap_len = v[5];
  e->skip_shift = e->doc_freq > kShortList ? SkipShift(e->doc_freq, e->pos_len) : 0;
  e->whole = BlockMax{v[4], v[2], v[3], 0};
  e->tfs_off = list_off + static_cast<uint64_t>(p - start);
  return true;
}

// The same for a header Open has checked: straight-line varint decodes
// (queries decode a header per term and segment, often several times).
inline void DecodeHeader(const uint8_t* p, uint64_t list_off, TermEntry* e) {
  const uint8_t* start = p;
  uint32_t max_tf, min_len, last_doc;
  p = GetVarint(p, &e->doc_freq);
  p = GetVarint(p, &e->pos_len);
  p = GetVarint(p, &max_tf);
  p = GetVarint(p, &min_len);
  p = GetVarint(p, &last_doc);
  e->bitmap_len = 0;
  e->skip_shift = 0;
  if (e->doc_freq > kShortList) {
    p = GetVarint(p, &e->bitmap_len);
    e->skip_shift = SkipShift(e->doc_freq, e->pos_len);
  }
  e->tf_width = max_tf < 256 ? 1 : 4;
  e->whole = BlockMax{last_doc, max_tf, min_len, 0};
  e->tfs_off = list_off + static_cast<uint64_t>(p - start);
}

// Where a long list's frozen bitmap starts: after its skip table and block
// maxima, at the next 32-byte boundary.
uint64_t BitmapOffset(const TermEntry& e) {
  const uint64_t tables_end = e.tfs_off + uint64_t{e.doc_freq} * e.tf_width + e.pos_len +
                              4 * SkipEntries(e.doc_freq, e.skip_shift) + sizeof(BlockMax) * BlockCount(e.doc_freq);
  return (tables_end + 31) / 32 * 32;
}

// Whether the list at `off` lies within the first `size` bytes of the file
// at `b`: its header, arrays and bitmap (a short list's chunk pairs take at
// least 4 bytes, its u16 low halves 2 per document).
bool CheckList(const char* b, uint64_t size, uint64_t off) {
  if (off >= size) return false;
  TermEntry e;
  const auto* base = reinterpret_cast<const uint8_t*>(b);
  if (!DecodeHeaderBounded(base + off, base + size, off, &e) || e.doc_freq == 0) return false;
  const uint64_t arrays = uint64_t{e.doc_freq} * e.tf_width + e.pos_len;
  if (e.doc_freq <= kShortList) return e.tfs_off + arrays + 4 + 2 * uint64_t{e.doc_freq} <= size;
  const uint64_t bm = BitmapOffset(e);
  return e.bitmap_len > 0 && bm <= size && e.bitmap_len <= size - bm;
}

// A short list's doc numbers as a roaring bitmap in one allocation, laid
// out as roaring_bitmap_frozen_view lays out a view (bitmap, container
// pointers, array containers, keys, typecodes) whose arrays point at the
// low halves in the file, and flagged frozen, so that roaring_bitmap_free
// frees it with one free() and the library never writes to it. It costs
// what a frozen view of a bitmap in the file did: one malloc, no copy.
// Reads CRoaring's structs, like RankCursor: segments are tied to the
// CRoaring version.
const roaring_bitmap_t* ShortListBitmap(const ShortDocs& d) {
  const size_t c = d.chunks;
  const size_t head = sizeof(roaring_bitmap_t) + c * (sizeof(void*) + sizeof(array_container_t));
  char* arena = static_cast<char*>(std::malloc(head + 3 * c));
  if (arena == nullptr) return nullptr;
  auto* bm = reinterpret_cast<roaring_bitmap_t*>(arena);
  auto** containers = reinterpret_cast<void**>(arena + sizeof(roaring_bitmap_t));
  auto* arrays = reinterpret_cast<array_container_t*>(arena + sizeof(roaring_bitmap_t) + c * sizeof(void*));
  auto* keys = reinterpret_cast<uint16_t*>(arena + head);
  auto* typecodes = reinterpret_cast<uint8_t*>(keys + c);
  roaring_array_t& ra = bm->high_low_container;
  ra.size = ra.allocation_size = static_cast<int32_t>(c);
  ra.containers = containers;
  ra.keys = keys;
  ra.typecodes = typecodes;
  ra.flags = ROARING_FLAG_FROZEN;
  const uint8_t* p = d.pairs;
  const uint16_t* lows = d.lows;
  for (size_t k = 0; k < c; ++k) {
    uint32_t key, count;
    p = GetVarint(p, &key);
    p = GetVarint(p, &count);
    keys[k] = static_cast<uint16_t>(key);
    typecodes[k] = ARRAY_CONTAINER_TYPE_CODE;
    arrays[k] = array_container_t{static_cast<int32_t>(count), static_cast<int32_t>(count), const_cast<uint16_t*>(lows)};
    containers[k] = &arrays[k];
    lows += count;
  }
  return bm;
}

}  // namespace

void AppendFrozenBitmap(std::string& out, std::span<const uint32_t> docs) {
  if (FrozenFastPathAgrees() && AppendFrozenSmall(out, docs)) return;
  AppendFrozenByLibrary(out, docs);
}

SegmentBuilder::SegmentBuilder(uint32_t text_fields, uint32_t numeric_fields)
    : text_(text_fields), lengths_(text_fields), columns_(numeric_fields), numbers_(numeric_fields) {}

void SegmentBuilder::Reset() {
  pending_begin_ = pending_size_ = 0;  // tokens added since the last Encode are dropped with the rest
  for (FieldBuild& fb : text_) {
    for (auto& l : fb.lists)
      if (l) l->Clear();
    fb.log.clear();
    fb.log_docs.clear();
    fb.from_log = true;
  }
  ids_.clear();
  stored_.clear();
  stored_ends_.clear();
  for (auto& l : lengths_) l.clear();
  for (auto& c : columns_) c.clear();
  for (auto& n : numbers_) n.clear();
  memory_ = 0;
}

void SegmentBuilder::ReleaseBuffers() {
  for (FieldBuild& fb : text_) {
    std::vector<LogEntry>().swap(fb.log);
    std::vector<LogDoc>().swap(fb.log_docs);
    for (auto& l : fb.lists) l.reset();
  }
  std::vector<uint32_t>().swap(count_buf_);
  std::vector<uint64_t>().swap(sort_buf_);
  std::vector<uint32_t>().swap(local_terms_);
  std::vector<uint32_t>().swap(local_of_);
  scratch_ = Lists();
  std::vector<uint8_t>().swap(common_of_);
  std::vector<BlockMax>().swap(blocks_);
  std::string().swap(bitmap_);
}

size_t SegmentBuilder::RetainedBytes() const {
  size_t bytes = 0;
  bytes += 8 * dict_.slots.capacity() + 4 * dict_.by_name.capacity() + dict_.terms.names.capacity() +
           4 * dict_.terms.name_end.capacity();
  for (const FieldBuild& fb : text_) {
    bytes += 8 * fb.lists.capacity() + fb.own.names.capacity() + 4 * fb.own.name_end.capacity() +
             sizeof(LogEntry) * fb.log.capacity() + sizeof(LogDoc) * fb.log_docs.capacity();
    for (const auto& l : fb.lists)
      if (l) bytes += sizeof(Lists) + l->pos.capacity() + 4 * (l->docs.capacity() + l->tfs.capacity());
  }
  for (const auto& id : ids_) bytes += id.capacity() > 15 ? id.capacity() : 0;
  bytes += stored_.capacity() + 8 * stored_ends_.capacity();
  bytes += sizeof(std::string) * ids_.capacity() + 4 * count_buf_.capacity() + 8 * sort_buf_.capacity() +
           4 * (local_terms_.capacity() + local_of_.capacity()) +
           scratch_.pos.capacity() + 4 * (scratch_.docs.capacity() + scratch_.tfs.capacity()) +
           sizeof(BlockMax) * blocks_.capacity() + bitmap_.capacity();
  bytes += common_of_.capacity();
  for (const auto& l : lengths_) bytes += 4 * l.capacity();
  for (const auto& c : columns_) bytes += 8 * c.capacity();
  for (const auto& n : numbers_) bytes += sizeof(NumEntry) * n.capacity();
  return bytes;
}

const std::vector<uint32_t>& SegmentBuilder::SortedTerms() {
  std::vector<uint32_t>& order = dict_.by_name;
  const TermPool& pool = dict_.terms;
  const size_t old = order.size();
  if (old == pool.size()) return order;
  for (size_t t = old; t < pool.size(); ++t) order.push_back(static_cast<uint32_t>(t));
  // Only the new terms are sorted; then one linear merge. Each carries its
  // first 8 bytes as a big-endian integer (zero-padded): a strictly smaller
  // key means a bytewise smaller name, so most comparisons are one integer
  // compare and only equal keys compare the names.
  struct Keyed {
    uint64_t key;
    uint32_t term;
  };
  std::vector<Keyed> fresh;
  fresh.reserve(order.size() - old);
  for (size_t i = old; i < order.size(); ++i) {
    fresh.push_back(Keyed{TermKey(pool.Name(order[i])), order[i]});
  }
  // By key: a stable LSD radix sort, a byte per pass (skipping bytes every
  // key shares); then each run of equal keys by name. A comparison sort
  // mispredicted about every other comparison, and when the index has
  // dropped the builder (SearchIndexImpl::TrimBuilder) every term is new.
  std::vector<Keyed> tmp(fresh.size());
  for (int shift = 0; shift < 64; shift += 8) {
    size_t count[257] = {};
    for (const Keyed& k : fresh) ++count[((k.key >> shift) & 0xFF) + 1];
    if (std::find(count + 1, count + 257, fresh.size()) != count + 257) continue;
    for (int b = 1; b < 257; ++b) count[b] += count[b - 1];
    for (const Keyed& k : fresh) tmp[count[(k.key >> shift) & 0xFF]++] = k;
    fresh.swap(tmp);
  }
  for (size_t i = 0; i < fresh.size();) {
    size_t j = i + 1;
    while (j < fresh.size() && fresh[j].key == fresh[i].key) ++j;
    if (j - i > 1)
      std::sort(fresh.begin() + static_cast<std::ptrdiff_t>(i), fresh.begin() + static_cast<std::ptrdiff_t>(j),
                [&](const Keyed& a, const Keyed& b) { return pool.Name(a.term) < pool.Name(b.term); });
    i = j;
  }
  for (size_t i = 0; i < fresh.size(); ++i) order[old + i] = fresh[i].term;
  std::inplace_merge(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(old), order.end(),
                     [&](uint32_t a, uint32_t b) { return pool.Name(a) < pool.Name(b); });
  return order;
}

uint32_t SegmentBuilder::AddDoc(std::string_view id, std::string_view stored) {
  ids_.emplace_back(id);
  stored_ += stored;
  stored_ends_.push_back(stored_.size());
  for (auto& l : lengths_) l.push_back(0);
  for (auto& c : columns_) c.push_back(std::numeric_limits<double>::quiet_NaN());
  memory_ += id.size() + stored.size() + 24 + 4 * lengths_.size() + 8 * columns_.size();
  return static_cast<uint32_t>(ids_.size() - 1);
}

namespace {
inline bool SameTerm(std::string_view a, std::string_view b) {
  // Fixed-size (overlapping) loads, as TermHash reads: most terms are
  // shorter than 8 bytes, and a byte loop mispredicts on every length.
  const size_t n = b.size();
  if (a.size() != n) return false;
  const char* x = a.data();
  const char* y = b.data();
  if (n >= 8) {
    uint64_t u, v;
    for (size_t i = 0; i + 8 <= n; i += 8) {
      std::memcpy(&u, x + i, 8);
      std::memcpy(&v, y + i, 8);
      if (u != v) return false;
    }
    std::memcpy(&u, x + n - 8, 8);
    std::memcpy(&v, y + n - 8, 8);
    return u == v;
  }
  if (n >= 4) {
    uint32_t u1, v1, u2, v2;
    std::memcpy(&u1, x, 4);
    std::memcpy(&v1, y, 4);
    std::memcpy(&u2, x + n - 4, 4);
    std::memcpy(&v2, y + n - 4, 4);
    return ((u1 ^ v1) | (u2 ^ v2)) == 0;
  }
  if (n == 0) return true;
  return x[0] == y[0] && x[n / 2] == y[n / 2] && x[n - 1] == y[n - 1];
}
}  // namespace

// The probe is inlined into AddToken; inserting a term is not.
inline uint32_t SegmentBuilder::TermIndex(std::string_view term, uint64_t h) {
  const uint64_t tag = h >> 32;
  const size_t mask = dict_.slots.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const uint64_t s = dict_.slots[i];
    if (s == 0) return InsertTerm(term, tag, i);
    if ((s >> 32) == tag) {
      const uint32_t idx = static_cast<uint32_t>(s) - 1;
      if (SameTerm(dict_.terms.Name(idx), term)) return idx;
    }
  }
}

uint32_t SegmentBuilder::InsertTerm(std::string_view term, uint64_t tag, size_t slot) {
  const TermPool& pool = dict_.terms;
  const uint32_t index = NewTerm(dict_.terms, term);
  dict_.slots[slot] = (tag << 32) | (index + 1);
  if (pool.size() * 2 > dict_.slots.size()) {
    std::vector<uint64_t> bigger(dict_.slots.size() * 2, 0);
    const size_t m2 = bigger.size() - 1;
    for (uint32_t t = 0; t < pool.size(); ++t) {
      uint64_t h2 = TermHash(pool.Name(t));
      size_t j = h2 & m2;
      while (bigger[j] != 0) j = (j + 1) & m2;
      bigger[j] = ((h2 >> 32) << 32) | (t + 1);
    }
    memory_ += 8 * dict_.slots.size();
    dict_.slots.swap(bigger);
  }
  return index;
}

uint32_t SegmentBuilder::NewTerm(TermPool& pool, std::string_view term) {
  pool.names.append(term);
  pool.name_end.push_back(static_cast<uint32_t>(pool.names.size()));
  memory_ += term.size() + 12;
  return static_cast<uint32_t>(pool.size() - 1);
}

SegmentBuilder::Lists& SegmentBuilder::TermLists(uint32_t field, std::string_view term) {
  ResolvePending();
  FieldBuild& fb = text_[field];
  FlushLog(fb);  // postings added directly go after the logged ones
  return ListsOf(fb, TermIndex(term, TermHash(term)));
}

inline void SegmentBuilder::Log(FieldBuild& fb, uint32_t doc, uint32_t term, uint32_t position) {
  if (fb.log_docs.empty() || fb.log_docs.back().doc != doc)
    fb.log_docs.push_back(LogDoc{doc, static_cast<uint32_t>(fb.log.size())});
  fb.log.push_back(LogEntry{term, position});
}

void SegmentBuilder::SortLog(const FieldBuild& fb) {
  const size_t n = fb.log.size();
  // Local indexes, so that the counts and the encoding cost the field's
  // terms, not the dictionary's (fields of different vocabularies share
  // it). The previous field's entries are cleared first.
  for (uint32_t g : local_terms_) local_of_[g] = 0;
  local_terms_.clear();
  local_of_.resize(dict_.terms.size(), 0);
  count_buf_.assign(1, 0);
  for (const LogEntry& e : fb.log) {
    uint32_t& l = local_of_[e.term];
    if (l == 0) {
      local_terms_.push_back(e.term);
      l = static_cast<uint32_t>(local_terms_.size());
      count_buf_.push_back(0);
    }
    ++count_buf_[l];
  }
  for (size_t t = 1; t < count_buf_.size(); ++t) count_buf_[t] += count_buf_[t - 1];
  sort_buf_.resize(n);
  for (size_t d = 0; d < fb.log_docs.size(); ++d) {
    const uint64_t doc = uint64_t{fb.log_docs[d].doc} << 32;
    const size_t end = d + 1 < fb.log_docs.size() ? fb.log_docs[d + 1].first : n;
    for (size_t i = fb.log_docs[d].first; i < end; ++i) {
      const LogEntry e = fb.log[i];
      sort_buf_[count_buf_[local_of_[e.term] - 1]++] = doc | e.position;
    }
  }
  // count_buf_[t] is now the end of local term t's run (and the start of t + 1's).
}

void SegmentBuilder::SortedLocalTerms(std::vector<uint32_t>& out) {
  out.clear();
  if (local_terms_.size() * 16 >= dict_.terms.size()) {
    // Most of the dictionary: pick the field's terms from its name order.
    for (uint32_t g : SortedTerms())
      if (local_of_[g] != 0) out.push_back(local_of_[g] - 1);
    return;
  }
  // A small part of it: sort them.
  for (uint32_t t = 0; t < local_terms_.size(); ++t) out.push_back(t);
  const TermPool& pool = dict_.terms;
  std::sort(out.begin(), out.end(),
            [&](uint32_t a, uint32_t b) { return pool.Name(local_terms_[a]) < pool.Name(local_terms_[b]); });
}

inline size_t SegmentBuilder::Lists::AddToken(uint32_t doc, uint32_t position) {
  size_t added = 0;
  if (docs.empty() || docs.back() != doc) {
    docs.push_back(doc);
    tfs.push_back(0);
    last_pos = 0;
    added = 8;
  }
  ++tfs.back();
  const uint32_t v = position - last_pos;
  last_pos = position;
  const size_t before = pos.size();
  if (v < 0x80)
    pos.push_back(static_cast<char>(v));
  else
    PutVarint(pos, v);
  return added + (pos.size() - before);
}

void SegmentBuilder::FlushLog(FieldBuild& fb) {
  fb.from_log = false;
  const size_t n = fb.log.size();
  if (n == 0) return;
  SortLog(fb);
  size_t i = 0;
  for (uint32_t t = 0; t < local_terms_.size(); ++t) {
    const size_t end = count_buf_[t];
    Lists& l = ListsOf(fb, local_terms_[t]);
    for (; i < end; ++i)
      memory_ += l.AddToken(static_cast<uint32_t>(sort_buf_[i] >> 32), static_cast<uint32_t>(sort_buf_[i]));
  }
  memory_ -= sizeof(LogEntry) * n;
  fb.log.clear();
  fb.log_docs.clear();
}

void SegmentBuilder::RunToLists(uint32_t t, Lists& out) const {
  out.Clear();
  for (size_t i = t == 0 ? 0 : count_buf_[t - 1]; i < count_buf_[t]; ++i)
    out.AddToken(static_cast<uint32_t>(sort_buf_[i] >> 32), static_cast<uint32_t>(sort_buf_[i]));
}


inline void SegmentBuilder::ProbeAndLog(uint32_t field, uint32_t doc, std::string_view term, uint64_t hash,
                                        uint32_t position) {
  FieldBuild& fb = text_[field];
  Log(fb, doc, TermIndex(term, hash), position);
  memory_ += sizeof(LogEntry);
  if (fb.log.size() >= kMaxLogTokens) FlushLog(fb);
}

void SegmentBuilder::ResolveOldest() {
  const Pending& p = pending_[pending_begin_];
  pending_begin_ = (pending_begin_ + 1) % kPendingTokens;
  --pending_size_;
  ProbeAndLog(p.field, p.doc, std::string_view(p.bytes, p.size), p.hash, p.position);
}

void SegmentBuilder::AddToken(uint32_t field, uint32_t doc, std::string_view term, uint32_t position) {
  if (term.size() > kPendingTermBytes) {
    ResolvePending();  // the log keeps the order tokens came in
    ProbeAndLog(field, doc, term, TermHash(term), position);
    return;
  }
  if (pending_size_ == kPendingTokens) ResolveOldest();
  Pending& p = pending_[(pending_begin_ + pending_size_) % kPendingTokens];
  ++pending_size_;
  p.hash = TermHash(term);
  p.field = field;
  p.doc = doc;
  p.position = position;
  p.size = static_cast<uint32_t>(term.size());
  std::memcpy(p.bytes, term.data(), term.size());
  const std::vector<uint64_t>& slots = dict_.slots;
  const TermPool& pool = dict_.terms;
  __builtin_prefetch(&slots[p.hash & (slots.size() - 1)]);
  // The probe's three dependent loads are prefetched a stage apart, each
  // stage reading only what the one before prefetched: a third of a window
  // later the slot is in cache, so prefetch the term's name_end entries; two
  // thirds later those are, so prefetch the name. (Reading name_end
  // unprefetched stalled AddToken when each field had its own dictionary
  // and together they outgrew the cache; with one dictionary, keeping only
  // the slot stage ran 5% fewer instructions but no faster: RESULTS.md.)
  auto term_of = [&](size_t ago) -> uint32_t {  // index + 1, or 0 if none yet
    const Pending& q = pending_[(pending_begin_ + pending_size_ - 1 - ago) % kPendingTokens];
    const auto idx = static_cast<uint32_t>(slots[q.hash & (slots.size() - 1)]);
    return idx <= pool.size() ? idx : 0;
  };
  if (pending_size_ > kPendingTokens / 3) {
    const uint32_t t = term_of(kPendingTokens / 3);
    if (t > 1) __builtin_prefetch(&pool.name_end[t - 2]);
  }
  if (pending_size_ > 2 * kPendingTokens / 3) {
    const uint32_t t = term_of(2 * kPendingTokens / 3);
    if (t != 0) __builtin_prefetch(pool.names.data() + (t == 1 ? 0 : pool.name_end[t - 2]));
  }
}

void SegmentBuilder::AddPosting(uint32_t field, uint32_t doc, std::string_view term, std::span<const uint32_t> positions) {
  const auto tf = static_cast<uint32_t>(positions.size());
  AddPostings(field, term, std::span<const uint32_t>(&doc, 1), std::span<const uint32_t>(&tf, 1), positions);
}

void SegmentBuilder::AddPostings(uint32_t field, std::string_view term, std::span<const uint32_t> docs,
                                 std::span<const uint32_t> tfs, std::span<const uint32_t> positions) {
  Lists& l = TermLists(field, term);
  const size_t before = l.pos.size();
  size_t p = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    l.docs.push_back(docs[i]);
    l.tfs.push_back(tfs[i]);
    uint32_t prev = 0;
    for (uint32_t k = 0; k < tfs[i]; ++k, ++p) {
      PutVarint(l.pos, positions[p] - prev);
      prev = positions[p];
    }
    l.last_pos = prev;
  }
  memory_ += 8 * docs.size() + (l.pos.size() - before);
}

uint32_t SegmentBuilder::AppendTerm(uint32_t field, std::string_view term) {
  ResolvePending();
  FieldBuild& fb = text_[field];
  FlushLog(fb);
  fb.presorted = true;
  return NewTerm(fb.own, term);
}

void SegmentBuilder::AddEncodedPostings(uint32_t field, uint32_t index, std::span<const uint32_t> docs,
                                        std::span<const uint32_t> tfs, std::string_view bytes) {
  Lists& l = ListsOf(text_[field], index);
  l.docs.insert(l.docs.end(), docs.begin(), docs.end());
  l.tfs.insert(l.tfs.end(), tfs.begin(), tfs.end());
  l.pos.append(bytes);
  memory_ += 8 * docs.size() + bytes.size();
}

void SegmentBuilder::AddNumber(uint32_t slot, uint32_t doc, Number v) {
  // The smallest value's double is the smallest double (rounding to the
  // nearest double keeps order): the column needs no residual.
  double& c = columns_[slot][doc];
  if (std::isnan(c) || v.value < c) c = v.value;
  numbers_[slot].push_back(NumEntry{v.value, doc, v.residual});
  memory_ += 16;
}

namespace {

// Appends one term's posting list (header, tfs, positions, then the doc
// numbers as varints or the skip table, block maxima and aligned frozen
// bitmap) to `out`; `bitmap` is scratch for a long list's bitmap.
void EncodeTerm(std::string& out, std::span<const uint32_t> docs, std::span<const uint32_t> tfs, std::string_view pos,
                const uint32_t* lens, std::vector<BlockMax>& blocks, std::string& bitmap) {
  const auto df = static_cast<uint32_t>(docs.size());
  if (df <= kShortList) {
    AppendShortList(out, 0, docs.data(), tfs.data(), df, [&](uint32_t i) { return lens[docs[i]]; }, pos.size(), [&](char* q) {
      std::memcpy(q, pos.data(), pos.size());
      return q + pos.size();
    });
    return;
  }
  blocks.clear();
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i % kPostingBlock == 0) blocks.push_back(BlockMax{0, 0, std::numeric_limits<uint32_t>::max(), 0});
    BlockMax& b = blocks.back();
    b.last_doc = docs[i];
    b.max_tf = std::max(b.max_tf, tfs[i]);
    b.min_len = std::min(b.min_len, lens[docs[i]]);
  }
  uint32_t max_tf = 0, min_len = std::numeric_limits<uint32_t>::max();
  for (const BlockMax& b : blocks) {
    max_tf = std::max(max_tf, b.max_tf);
    min_len = std::min(min_len, b.min_len);
  }
  PutVarint(out, df);
  PutVarint(out, static_cast<uint32_t>(pos.size()));
  PutVarint(out, max_tf);
  PutVarint(out, min_len);
  PutVarint(out, docs.back());
  bitmap.clear();
  AppendFrozenBitmap(bitmap, docs);
  PutVarint(out, static_cast<uint32_t>(bitmap.size()));
  if (max_tf < 256) {
    const size_t at_tf = out.size();
    out.resize(at_tf + tfs.size());
    char* q = out.data() + at_tf;
    for (uint32_t tf : tfs) *q++ = static_cast<char>(tf);
  } else {
    PutArray(out, tfs.data(), tfs.size());
  }
  out += pos;
  AppendSkipTable(out, tfs, reinterpret_cast<const uint8_t*>(pos.data()), pos.size());
  PutArray(out, blocks.data(), blocks.size());
  Align(out);  // frozen views need 32-byte alignment
  out += bitmap;
}

// A short list straight from the term's run of the sorted log (`n`
// entries doc << 32 | position, in doc order, positions ascending within a
// doc), without building its lists first. Returns the list's doc_freq, or
// 0 (writing nothing) if it is not short.
uint32_t EncodeShortRun(std::string& out, const uint64_t* run, size_t n, const uint32_t* lens) {
  uint32_t docs[kShortList], tfs[kShortList];
  uint32_t df = 0, last_pos = 0;
  size_t pos_len = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto doc = static_cast<uint32_t>(run[i] >> 32);
    const auto position = static_cast<uint32_t>(run[i]);
    if (df == 0 || docs[df - 1] != doc) {
      if (df == kShortList) return 0;
      docs[df] = doc;
      tfs[df++] = 0;
      last_pos = 0;
    }
    ++tfs[df - 1];
    pos_len += VarintSize(position - last_pos);
    last_pos = position;
  }
  AppendShortList(out, 0, docs, tfs, df, [&](uint32_t i) { return lens[docs[i]]; }, pos_len, [&](char* q) {
    // Per posting, tf varints of position deltas, the first from 0.
    for (size_t i = 0; i < n; ++i) {
      const auto position = static_cast<uint32_t>(run[i]);
      const bool first = i == 0 || (run[i] >> 32) != (run[i - 1] >> 32);
      q = WriteVarint(q, first ? position : position - static_cast<uint32_t>(run[i - 1]));
    }
    return q;
  });
  return df;
}

}  // namespace

void SegmentBuilder::EncodeText(size_t f, std::string& out, std::string& dir) {
  FieldBuild& fb = text_[f];
  if (fb.from_log)
    SortLog(fb);
  else
    FlushLog(fb);
  const bool from_log = fb.from_log;
  // The field's terms with postings, by name: local indexes (SortLog) for
  // a field from the log, indexes of `lists` otherwise.
  std::vector<uint32_t> sorted;
  if (from_log) {
    SortedLocalTerms(sorted);
  } else {
    auto has_postings = [&](uint32_t t) {
      return t < fb.lists.size() && fb.lists[t] != nullptr && !fb.lists[t]->docs.empty();
    };
    if (fb.presorted) {
      for (uint32_t t = 0; t < fb.own.size(); ++t)
        if (has_postings(t)) sorted.push_back(t);
    } else {
      for (uint32_t t : SortedTerms())
        if (has_postings(t)) sorted.push_back(t);
    }
  }
  auto name = [&](uint32_t t) {
    if (from_log) return dict_.terms.Name(local_terms_[t]);
    return fb.presorted ? fb.own.Name(t) : dict_.terms.Name(t);
  };
  // Term t's postings: its run of the sorted log, or its lists.
  auto lists = [&](uint32_t t) -> const Lists& {
    if (!from_log) return *fb.lists[t];
    RunToLists(t, scratch_);
    return scratch_;
  };
  const auto& lens = lengths_[f];
  uint64_t sum_len = 0;
  uint32_t with_tokens = 0;
  for (uint32_t l : lens) {
    sum_len += l;
    with_tokens += l > 0;
  }
  Align(out);
  uint64_t lengths_off = out.size();
  PutArray(out, lens.data(), lens.size());
  Align(out);
  const uint32_t nt = static_cast<uint32_t>(sorted.size());
  uint64_t term_offs_off = out.size();
  {
    uint32_t o = 0;
    PutFixed<uint32_t>(out, 0);
    for (uint32_t t : sorted) {
      o += static_cast<uint32_t>(name(t).size());
      PutFixed<uint32_t>(out, o);
    }
    Align(out);
  }
  uint64_t term_blob_off = out.size();
  for (uint32_t t : sorted) out += name(t);
  Align(out);
  uint64_t list_offs_off = out.size();
  out.append(static_cast<size_t>(nt) * 8, '\0');
  std::vector<uint32_t> dfs(nt);
  for (uint32_t ti = 0; ti < nt; ++ti) {
    const uint64_t off = out.size();
    std::memcpy(out.data() + list_offs_off + 8 * uint64_t{ti}, &off, 8);
    if (from_log) {
      const uint32_t t = sorted[ti];
      const size_t begin = t == 0 ? 0 : count_buf_[t - 1];
      dfs[ti] = EncodeShortRun(out, sort_buf_.data() + begin, count_buf_[t] - begin, lens.data());
      if (dfs[ti] != 0) continue;  // a longer run goes through its lists
    }
    const Lists& l = lists(sorted[ti]);
    EncodeTerm(out, l.docs, l.tfs, l.pos, lens.data(), blocks_, bitmap_);
    dfs[ti] = static_cast<uint32_t>(l.docs.size());
  }
  PutTextFieldDir(dir, TextFieldDir{lengths_off, sum_len, with_tokens, nt, term_offs_off, term_blob_off, list_offs_off});
  const std::vector<uint32_t> common =
      doc_count() >= kMinPairTableDocs ? ChooseCommonTerms(dfs, doc_count()) : std::vector<uint32_t>();
  std::vector<PairList> pairs;
  if (common.empty()) {
    // No common terms: no pairs to look for.
  } else if (from_log) {
    common_of_.resize(dict_.terms.size(), 0);
    for (size_t c = 0; c < common.size(); ++c) common_of_[local_terms_[sorted[common[c]]]] = static_cast<uint8_t>(c + 1);
    pairs = BuildPairsFromLog(fb.log, fb.log_docs, common_of_, common.size());
    for (uint32_t c : common) common_of_[local_terms_[sorted[c]]] = 0;
  } else {
    std::vector<PairSource> sources;
    for (uint32_t c : common) {
      const Lists& l = *fb.lists[sorted[c]];
      sources.push_back(PairSource{l.docs, l.tfs, reinterpret_cast<const uint8_t*>(l.pos.data())});
    }
    pairs = BuildPairs(sources);
  }
  PutFixed<uint64_t>(dir, AppendPairSection(out, common, pairs));
}

std::string SegmentBuilder::Encode(uint64_t fingerprint) {
  std::string out;
  Encode(fingerprint, out);
  return out;
}

void SegmentBuilder::Encode(uint64_t fingerprint, std::string& out) {
  ResolvePending();
  const uint32_t n = doc_count();
  out.assign(kHeaderBytes, '\0');
  std::string dir;
  // Ids.
  {
    std::vector<uint32_t> offs(n + 1, 0);
    for (uint32_t i = 0; i < n; ++i) offs[i + 1] = offs[i] + static_cast<uint32_t>(ids_[i].size());
    PutFixed<uint64_t>(dir, out.size());
    PutArray(out, offs.data(), offs.size());
    Align(out);
    PutFixed<uint64_t>(dir, out.size());
    for (const auto& id : ids_) out += id;
    Align(out);
  }
  // Stored fields, if any document has some.
  if (stored_.empty()) {
    PutFixed<uint64_t>(dir, 0);
    PutFixed<uint64_t>(dir, 0);
  } else {
    PutFixed<uint64_t>(dir, out.size());
    PutFixed<uint64_t>(out, 0);
    PutArray(out, stored_ends_.data(), stored_ends_.size());
    Align(out);
    PutFixed<uint64_t>(dir, out.size());
    out += stored_;
    Align(out);
  }
  // Id order and id filter.
  {
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return ids_[a] < ids_[b]; });
    PutFixed<uint64_t>(dir, out.size());
    PutArray(out, order.data(), order.size());
    Align(out);
    const uint64_t blocks = IdFilterBlocks(n);
    PutFixed<uint64_t>(dir, out.size());
    PutFixed<uint64_t>(dir, blocks);
    const size_t at = out.size();
    out.append(blocks * kIdFilterBlockBytes, '\0');
    for (const auto& id : ids_) IdFilterAdd(out.data() + at, blocks, id);
  }
  {
    // One allocation for the image: an upper bound of its size.
    size_t est = out.size() + 8 * n + 72;
    for (size_t f = 0; f < text_.size(); ++f) {
      est += 4 * n + 96;
      const FieldBuild& fb = text_[f];
      // Per term: name offset, list offset, header, alignment, bitmap
      // headers, one skip and block entry; per posting at most 5 bytes of
      // doc number, 4 of tf and 20/64 of skip and block tables; per token
      // at most 5 position bytes.
      // A field's terms are at most the dictionary's and its tokens.
      const TermPool& pool = fb.presorted ? fb.own : dict_.terms;
      est += pool.names.size() +
             std::min(pool.size(), fb.log.size() + fb.lists.size()) * (4 + 8 + 30 + 32 + 64 + 4 + sizeof(BlockMax));
      est += fb.log.size() * (5 + 5 + 4 + 1);
      for (const auto& l : fb.lists)
        if (l) est += l->pos.size() + l->docs.size() * (5 + 4 + 1) + 16 * (l->docs.size() / 4096 + 2);
    }
    for (size_t s = 0; s < columns_.size(); ++s) est += 8 * n + sizeof(NumEntry) * numbers_[s].size() + 96;
    est += 64 * (text_.size() + columns_.size()) + 1024;
    out.reserve(est);
  }
  for (size_t f = 0; f < text_.size(); ++f) EncodeText(f, out, dir);
  for (size_t s = 0; s < columns_.size(); ++s) {
    Align(out);
    uint64_t col_off = out.size();
    PutArray(out, columns_[s].data(), columns_[s].size());
    Align(out);
    std::vector<NumEntry> sorted = numbers_[s];
    std::sort(sorted.begin(), sorted.end(), [](const NumEntry& a, const NumEntry& b) {
      const Number x = a.number(), y = b.number();
      return x < y || (x == y && a.doc < b.doc);
    });
    uint64_t sorted_off = out.size();
    PutArray(out, sorted.data(), sorted.size());
    Align(out);
    PutFixed<uint64_t>(dir, col_off);
    PutFixed<uint64_t>(dir, sorted_off);
    PutFixed<uint64_t>(dir, sorted.size());
  }
  Align(out);
  uint64_t dir_off = out.size();
  out += dir;
  Align(out);
  Header h;
  h.fingerprint = fingerprint;
  h.doc_count = n;
  h.text_fields = static_cast<uint32_t>(text_.size());
  h.numeric_fields = static_cast<uint32_t>(columns_.size());
  h.dir_off = dir_off;
  h.file_len = out.size() + kFooterBytes;
  EncodeHeader(h, out.data());
  PutFixed<uint64_t>(out, FileChecksum(out.data(), out.size()));
  out.append(kFooterMagic, 8);
}

Result<std::shared_ptr<const Segment>> Segment::Open(const std::string& path, uint64_t fingerprint,
                                                     uint32_t text_fields, uint32_t numeric_fields, Checksum checksum) {
  auto mf = MappedFile::Open(path);
  if (!mf.ok()) return mf.status();
  std::shared_ptr<Segment> s(new Segment(std::move(mf).value()));
  const char* b = s->file_.data();
  const size_t size = s->file_.size();
  auto bad = [&](const std::string& why) { return Status::Corruption(path + ": " + why); };
  if (size < kHeaderBytes + 16 || std::memcmp(b, kMagic, 8) != 0 || std::memcmp(b + size - 8, kFooterMagic, 8) != 0)
    return bad("not a segment file");
  if (GetFixed<uint32_t>(b + 8) != kSegmentFormatVersion) return bad(std::string(kOutdatedFormat));
  if (GetFixed<uint32_t>(b + 12) != kRoaringTag) return bad(std::string(kOutdatedRoaring));
  if (GetFixed<uint64_t>(b + 16) != fingerprint) return bad(std::string(kOutdatedDefinition));
  if (GetFixed<uint64_t>(b + 48) != size) return bad("truncated");
  if (checksum == Checksum::kVerify && FileChecksum(b, size - kFooterBytes) != GetFixed<uint64_t>(b + size - kFooterBytes))
    return bad("checksum mismatch");
  s->doc_count_ = GetFixed<uint32_t>(b + 24);
  if (GetFixed<uint32_t>(b + 28) != text_fields || GetFixed<uint32_t>(b + 32) != numeric_fields)
    return bad("field counts differ from the definition");
  uint64_t dir = GetFixed<uint64_t>(b + 40);
  const uint64_t n = s->doc_count_;
  uint64_t need = kFixedDirBytes + text_fields * kTextDirBytes + numeric_fields * kNumericDirBytes;
  if (dir > size - 16 || need > size - 16 - dir) return bad("directory out of bounds");  // no wrap-around
  auto in = [&](uint64_t off, uint64_t bytes) { return off <= size - 16 && bytes <= size - 16 - off; };
  const char* d = b + dir;
  uint64_t ids_off = GetFixed<uint64_t>(d), ids_blob = GetFixed<uint64_t>(d + 8);
  d += 16;
  if (!in(ids_off, 4 * (n + 1)) || ids_off % 4 != 0) return bad("ids out of bounds");
  s->ids_off_ = reinterpret_cast<const uint32_t*>(b + ids_off);
  if (!in(ids_blob, s->ids_off_[n])) return bad("ids out of bounds");
  s->ids_blob_ = b + ids_blob;
  uint64_t stored_off = GetFixed<uint64_t>(d), stored_blob = GetFixed<uint64_t>(d + 8);
  d += 16;
  if (stored_off != 0) {
    if (!in(stored_off, 8 * (n + 1))) return bad("stored fields out of bounds");
    const char* offs = b + stored_off;
    uint64_t prev = GetFixed<uint64_t>(offs);
    for (uint64_t i = 1; i <= n; ++i) {
      const uint64_t end = GetFixed<uint64_t>(offs + 8 * i);
      if (end < prev) return bad("stored fields out of order");
      prev = end;
    }
    if (GetFixed<uint64_t>(offs) != 0 || !in(stored_blob, prev)) return bad("stored fields out of bounds");
    s->stored_off_ = offs;
    s->stored_blob_ = b + stored_blob;
  }
  {
    const uint64_t order_off = GetFixed<uint64_t>(d), filter_off = GetFixed<uint64_t>(d + 8);
    const uint64_t blocks = GetFixed<uint64_t>(d + 16);
    d += 24;
    if (!in(order_off, 4 * n) || order_off % 4 != 0 || blocks != IdFilterBlocks(n) ||
        !in(filter_off, blocks * kIdFilterBlockBytes))
      return bad("id order out of bounds");
    s->id_order_ = reinterpret_cast<const uint32_t*>(b + order_off);
    for (uint64_t i = 0; i < n; ++i)
      if (s->id_order_[i] >= n) return bad("id order out of bounds");
    s->id_filter_ = b + filter_off;
    s->id_filter_blocks_ = blocks;
  }
  for (uint32_t f = 0; f < text_fields; ++f, d += kTextDirBytes) {
    TextField t;
    uint64_t lo = GetFixed<uint64_t>(d);
    t.term_count = GetFixed<uint32_t>(d + 20);
    uint64_t to = GetFixed<uint64_t>(d + 24), tb = GetFixed<uint64_t>(d + 32), te = GetFixed<uint64_t>(d + 40);
    if (!in(lo, 4 * n) || !in(to, 4 * (uint64_t{t.term_count} + 1)) || !in(te, 8 * uint64_t{t.term_count}) ||
        lo % 32 != 0 || to % 32 != 0 || te % 32 != 0)
      return bad("text field out of bounds");
    t.lengths = reinterpret_cast<const uint32_t*>(b + lo);
    t.offs = reinterpret_cast<const uint32_t*>(b + to);
    if (!in(tb, t.offs[t.term_count])) return bad("terms out of bounds");
    t.blob = b + tb;
    t.list_offs = reinterpret_cast<const uint64_t*>(b + te);
    if (!t.pairs.Parse(b, size - 16, GetFixed<uint64_t>(d + 48), t.term_count)) return bad("pair section out of bounds");
    // Names are read as blob[offs[i], offs[i+1]): with the offsets in
    // order and the last one in bounds (above), every name is.
    for (uint32_t i = 0; i < t.term_count; ++i) {
      if (t.offs[i] > t.offs[i + 1]) return bad("term offsets out of order");
      if (!CheckList(b, size - 16, t.list_offs[i])) return bad("posting list out of bounds");
    }
    t.keys.reserve(t.term_count / kKeyStride + 1);
    for (uint32_t i = 0; i < t.term_count; i += kKeyStride)
      t.keys.push_back(TermKey(std::string_view(t.blob + t.offs[i], t.offs[i + 1] - t.offs[i])));
    s->text_.push_back(std::move(t));
  }
  for (uint32_t f = 0; f < numeric_fields; ++f, d += kNumericDirBytes) {
    NumericField nf;
    uint64_t co = GetFixed<uint64_t>(d), so = GetFixed<uint64_t>(d + 8);
    nf.sorted_count = GetFixed<uint64_t>(d + 16);
    if (!in(co, 8 * n) || !in(so, sizeof(NumEntry) * nf.sorted_count) || co % 32 != 0 || so % 32 != 0)
      return bad("numeric field out of bounds");
    nf.column = reinterpret_cast<const double*>(b + co);
    nf.sorted = reinterpret_cast<const NumEntry*>(b + so);
    uint64_t with_value = 0;
    for (uint32_t doc = 0; doc < n; ++doc) with_value += !std::isnan(nf.column[doc]);
    nf.multi_valued = nf.sorted_count > with_value;
    nf.has_residuals = false;
    for (size_t i = 0; i < nf.sorted_count && !nf.has_residuals; ++i) nf.has_residuals = nf.sorted[i].residual != 0;
    s->numeric_.push_back(nf);
  }
  return std::shared_ptr<const Segment>(std::move(s));
}

std::optional<uint32_t> Segment::FindId(std::string_view id) const {
  if (!IdFilterMayContain(id_filter_, id_filter_blocks_, id)) return std::nullopt;
  uint32_t lo = 0, hi = doc_count_;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (this->id(id_order_[mid]) < id) lo = mid + 1; else hi = mid;
  }
  if (lo < doc_count_ && this->id(id_order_[lo]) == id) return id_order_[lo];
  return std::nullopt;
}

int64_t Segment::FindTerm(uint32_t f, std::string_view term) const {
  uint32_t i = LowerBound(f, term);
  if (i < term_count(f) && this->term(f, i) == term) return i;
  return -1;
}

uint32_t Segment::LowerBound(uint32_t f, std::string_view term) const {
  // The sampled keys narrow the search to the terms between the last
  // sample with a smaller key and the first with a larger one (a smaller
  // key means a smaller name, a larger one a larger name); equal keys
  // (names sharing their first 8 bytes) stay inside the range.
  const std::vector<uint64_t>& keys = text_[f].keys;
  const uint64_t key = TermKey(term);
  const auto below = std::lower_bound(keys.begin(), keys.end(), key);
  const auto above = std::upper_bound(below, keys.end(), key);
  uint32_t lo = below == keys.begin() ? 0 : static_cast<uint32_t>(below - keys.begin() - 1) * kKeyStride + 1;
  uint32_t hi = above == keys.end() ? term_count(f) : static_cast<uint32_t>(above - keys.begin()) * kKeyStride;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (this->term(f, mid) < term) lo = mid + 1; else hi = mid;
  }
  return lo;
}

TermEntry Segment::entry(uint32_t f, uint32_t i) const {
  const uint64_t off = text_[f].list_offs[i];
  TermEntry e;
  DecodeHeader(reinterpret_cast<const uint8_t*>(base() + off), off, &e);  // checked by Open
  return e;
}

const char* Segment::FrozenBitmap(const TermEntry& e) const { return base() + BitmapOffset(e); }

ConstBitmap Segment::Postings(const TermEntry& e) const {
  if (e.bitmap_len > 0) return ConstBitmap(roaring_bitmap_frozen_view(FrozenBitmap(e), e.bitmap_len));
  return ConstBitmap(ShortListBitmap(ParseShortDocs(PositionsStart(e) + e.pos_len, base())));
}

void Segment::Positions(uint32_t f, uint32_t i, uint32_t rank, std::vector<uint32_t>& out) const {
  const TermEntry e = entry(f, i);
  const TfArray tfs = Tfs(e);
  uint32_t r;
  const uint8_t* p = SkipTo(e, rank, &r);
  uint32_t v;
  for (; r < rank; ++r)
    for (uint32_t k = tfs[r]; k > 0; --k) p = GetVarint(p, &v);
  out.clear();
  uint32_t acc = 0;
  for (uint32_t k = tfs[rank]; k > 0; --k) {
    p = GetVarint(p, &v);
    acc += v;
    out.push_back(acc);
  }
}

}  // namespace corvid::postings
