// Segments: the immutable unit of the inverted index. SegmentBuilder
// accumulates documents in memory (the mutable segment) and serializes them
// to a segment file; Segment memory-maps such a file and serves postings,
// field lengths, numeric columns and ids straight from the map (zero-copy;
// roaring bitmaps are "frozen" views into the file). The builder is in
// segment_builder.cc, its encoder in segment_encoder.cc, the reader in
// segment.cc; the format is documented in segment_format.h.
#pragma once

#include <roaring/roaring.h>

#include <bit>
#include <compare>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "postings/file_util.h"
#include "postings/pairs.h"
#include "postings/roaring_layout.h"

namespace corvid::postings {

inline constexpr uint32_t kSegmentFormatVersion = 8;
// The frozen roaring layout is tied to the library version (DESIGN.md):
// a segment written by another CRoaring is "unknown" and rebuilt.
inline constexpr uint32_t kRoaringTag = ROARING_VERSION_MAJOR * 10000 + ROARING_VERSION_MINOR * 100 + ROARING_VERSION_REVISION;
inline constexpr uint32_t kPostingBlock = 64;  // postings per block-max entry
// A long list's skip table has the positions offset of every stride-th
// posting: a phrase verifying a candidate skips the positions of fewer
// than a stride of postings before it. The stride, 1 << SkipShift(doc_freq,
// pos_len), is the largest power of two up to 1 << kMaxSkipShift whose
// postings' positions average at most kStrideBytes: 16 postings of a word
// seen once or twice per document, one of a word repeated through every
// document (W2's "aa": ~35 bytes a posting, whose phrases beside rarer
// words read thousands of candidates).
inline constexpr uint32_t kMaxSkipShift = 4;
inline constexpr uint64_t kStrideBytes = 64;
inline uint32_t SkipShift(uint32_t doc_freq, uint32_t pos_len) {
  uint32_t shift = kMaxSkipShift;
  while (shift > 0 && (uint64_t{pos_len} << shift) > kStrideBytes * doc_freq) --shift;
  return shift;
}
// Entries in a long list's skip table, and its blocks (of kPostingBlock).
inline uint64_t SkipEntries(uint32_t doc_freq, uint32_t skip_shift) {
  return (uint64_t{doc_freq} + (uint64_t{1} << skip_shift) - 1) >> skip_shift;
}
inline uint64_t BlockCount(uint32_t doc_freq) { return (uint64_t{doc_freq} + kPostingBlock - 1) / kPostingBlock; }
// A list of at most kPostingBlock postings (most terms of a segment) is
// "short": its doc numbers are 16-bit low halves by chunk, not a frozen
// roaring bitmap (no alignment, no bitmap header; segment.cc).
inline constexpr uint32_t kShortList = kPostingBlock;
// A builder's field logs at most this many tokens (8 bytes each, plus as
// much to sort them: 128 MB at most); beyond, the field moves its log to
// per-term lists, the slower path merges use (SegmentBuilder). The index
// engine's batches (< 64 MiB of JSON) reach it only in a field of mostly
// one- and two-letter words.
inline constexpr size_t kMaxLogTokens = size_t{1} << 23;

// Owns a roaring bitmap (heap or frozen view); frees it on destruction.
struct RoaringDeleter {
  void operator()(const roaring_bitmap_t* b) const { roaring_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<roaring_bitmap_t, RoaringDeleter>;
using ConstBitmap = std::unique_ptr<const roaring_bitmap_t, RoaringDeleter>;
inline Bitmap NewBitmap() { return Bitmap(roaring_bitmap_create()); }

#pragma pack(push, 1)
struct BlockMax {
  uint32_t last_doc;  // last doc number in the block
  uint32_t max_tf;    // largest tf in the block
  uint32_t min_len;   // smallest field length in the block
  uint32_t reserved;
};
#pragma pack(pop)
// A term's posting list as Segment::entry decodes it from the list's
// header (the layout is in segment_format.h): doc_freq term
// frequencies, tf_width bytes each, in doc order, at tfs_off; then the
// positions (pos_len bytes: per posting, tf varints of position deltas,
// the first from 0). Short lists (doc_freq <= kShortList) then have their
// doc numbers as chunk varints and u16 low halves; longer ones a skip table (u32 per
// 1 << skip_shift postings: byte offset of the first one's positions),
// BlockMax per block of kPostingBlock postings and a 32-byte aligned frozen roaring
// bitmap of bitmap_len bytes. `whole` bounds the whole list (a short list
// is one block: `whole` is its BlockMax).
struct TermEntry {
  uint64_t tfs_off;
  uint32_t doc_freq;
  uint32_t pos_len;
  uint32_t tf_width;    // 1 or 4
  uint32_t bitmap_len;  // 0 for a short list
  uint32_t skip_shift;  // a long list's SkipShift (0 for a short list)
  BlockMax whole;
};
// A number as a number field indexes it: a double and, for an integer
// beyond 2^53 that no double holds, the integer minus its nearest double
// (|residual| <= 2^11 for 64-bit integers; 0 for everything else). JSON
// integers are then exact up to 64 bits, as Elasticsearch's `long`, and
// (value, residual) order is the numbers' order: rounding to the nearest
// double never reverses two integers, and integers rounding to the same
// double differ by their residuals.
struct Number {
  double value = 0;
  int32_t residual = 0;
  static Number Of(int64_t v) { return FromInteger(v); }
  static Number Of(uint64_t v) { return FromInteger(v); }
  friend auto operator<=>(const Number&, const Number&) = default;

 private:
  __extension__ using Int128 = __int128;
  static Number FromInteger(Int128 v) {
    const double d = static_cast<double>(v);  // the nearest double (ties to even)
    return Number{d, static_cast<int32_t>(v - static_cast<Int128>(d))};
  }
};
#pragma pack(push, 1)
struct NumEntry {
  double value;
  uint32_t doc;
  int32_t residual;  // Number::residual (written as 0 before integers were exact)
  Number number() const { return Number{value, residual}; }
};
#pragma pack(pop)

// A short list's doc numbers (segment_format.h has the format): chunks of equal
// high 16 bits, each a (key, count) pair of varints, then the low 16 bits
// of every doc number at an even file offset.
struct ShortDocs {
  uint32_t chunks;
  const uint8_t* pairs;  // the (key, count) varints
  const uint16_t* lows;
};
inline ShortDocs ParseShortDocs(const uint8_t* p, const char* file_base) {
  ShortDocs d;
  p = GetVarint(p, &d.chunks);
  d.pairs = p;
  p = SkipVarints(p, 2 * size_t{d.chunks});
  p += (p - reinterpret_cast<const uint8_t*>(file_base)) % 2;
  d.lows = reinterpret_cast<const uint16_t*>(p);
  return d;
}

// Term frequencies of one posting list, indexed by rank (doc order).
struct TfArray {
  const uint8_t* data = nullptr;
  uint32_t width = 1;
  uint32_t operator[](size_t i) const {
    if (width == 1) return data[i];
    uint32_t v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  }
};

// The mutable in-memory segment. Not thread-safe; owned by the index worker.
// Reusable: Reset() after Encode keeps the term dictionary and the arrays'
// capacity, so later batches allocate almost nothing per term or token.
class SegmentBuilder {
 public:
  SegmentBuilder(uint32_t text_fields, uint32_t numeric_fields);
  // Forgets every document and posting; keeps the term dictionary and the
  // capacity of its arrays (terms without postings are not encoded). A
  // caller bounds the memory kept by dropping the builder instead.
  void Reset();
  // Heap bytes held (used or retained for reuse); O(terms).
  size_t RetainedBytes() const;
  // After Reset: frees the buffers a batch fills (token logs, sort and
  // scratch buffers, per-term lists) and keeps the dictionary.
  void ReleaseBuffers();
  // A new document: its id and its stored fields (the JSON object a hit
  // returns as "fields", SearchDefinitionImpl::store; empty if the
  // definition stores none in segments).
  uint32_t AddDoc(std::string_view id, std::string_view stored = {});
  // Tokens of one document and field must come with non-decreasing doc
  // numbers per term and increasing positions within a document. A token
  // costs a probe of the dictionary (one for all fields) and a log entry;
  // Encode does the rest per term. The probe waits until kPendingTokens
  // more tokens have come, so that its cache misses overlap theirs (its
  // slot and name are prefetched meanwhile): a large vocabulary does not
  // stay in cache.
  void AddToken(uint32_t field, uint32_t doc, std::string_view term, uint32_t position);
  // Merges without hashing: a field filled only through AppendTerm takes
  // its terms in strictly increasing bytewise order (the sorted
  // dictionaries of the merged segments, merged), so Encode needs no sort.
  // Returns the term's index for AddEncodedPostings. Do not mix with
  // AddToken on the same field.
  uint32_t AppendTerm(uint32_t field, std::string_view term);
  // Capacity for `docs` more postings and `bytes` more position bytes of term `index`.
  void ReservePostings(uint32_t field, uint32_t index, size_t docs, size_t bytes) {
    Lists& l = ListsOf(text_[field], index);
    l.docs.reserve(l.docs.size() + docs);
    l.tfs.reserve(l.tfs.size() + docs);
    l.pos.reserve(l.pos.size() + bytes);
  }
  // Postings of term `index` already in the segment's position encoding
  // (per posting, tf varints of deltas from 0): `bytes` holds exactly the
  // postings' positions, in order. Docs ascending and above the term's
  // previous ones.
  void AddEncodedPostings(uint32_t field, uint32_t index, std::span<const uint32_t> docs, std::span<const uint32_t> tfs,
                          std::string_view bytes);
  void SetLength(uint32_t field, uint32_t doc, uint32_t length) { lengths_[field][doc] = length; }
  void AddNumber(uint32_t slot, uint32_t doc, Number v);
  uint32_t doc_count() const { return static_cast<uint32_t>(ids_.size()); }
  size_t MemoryBytes() const { return memory_; }
  // Serializes to the segment format. Cost: O(tokens + postings + terms)
  // plus sorting the terms added since the previous Encode; the pair
  // tables (pairs.h) cost O(tokens) for fields built from the log, and
  // O(positions of the common terms) for fields built from lists. Not
  // const: it probes the waiting tokens and sorts the fields' logs.
  std::string Encode(uint64_t fingerprint);
  // The same into `out` (replacing its contents, reusing its capacity: a
  // builder reused across batches can reuse one buffer too).
  void Encode(uint64_t fingerprint, std::string& out);

 private:
  // Tokens are not added to their terms one by one: a token costs a
  // dictionary probe (dense arrays: slots and a names pool) and an entry
  // in its field's log. Encode sorts the log by term (a
  // counting sort) and writes each term's postings from its run, so each
  // term is touched once per batch, not once per token (random accesses
  // to ~100 bytes per term were half of indexing). A field given whole
  // postings (merges: AppendTerm, AddEncodedPostings), or whose log outgrows
  // kMaxLogTokens, keeps per-term lists instead (FlushLog).
  struct Lists {
    std::string pos;                  // positions encoded as written (varint deltas per posting)
    std::vector<uint32_t> docs, tfs;  // the skip table is derived by Encode
    uint32_t last_pos = 0;            // the last position of the last posting (docs.back())
    // Appends a token of `doc` (a new posting unless doc is docs.back());
    // returns the bytes added.
    size_t AddToken(uint32_t doc, uint32_t position);
    void Clear() {
      pos.clear();
      docs.clear();
      tfs.clear();
      last_pos = 0;
    }
  };
  using LogEntry = TextToken;  // pairs.h: the log is also what pair tables are built from
  using LogDoc = DocStart;
  // Terms by index, their names back to back.
  struct TermPool {
    std::string names;
    std::vector<uint32_t> name_end;  // term i is names[name_end[i - 1] (0 for i = 0), name_end[i])
    size_t size() const { return name_end.size(); }
    std::string_view Name(uint32_t i) const {
      const uint32_t start = i == 0 ? 0 : name_end[i - 1];
      return std::string_view(names.data() + start, name_end[i] - start);
    }
  };
  // One dictionary for every field: the fields of a document set share
  // most of their words, and one table of the vocabulary stays in cache
  // where a table per field did not (W3's 100 fields of one vocabulary:
  // ~90 MB of tables, far past the caches). Open addressing (linear
  // probing) from a term to its index: a slot holds the hash's high 32
  // bits and index + 1 (0: empty); load <= 1/2.
  struct Dictionary {
    std::vector<uint64_t> slots = std::vector<uint64_t>(1024, 0);
    TermPool terms;
    // Term indexes [0, by_name.size()) ordered by name; Encode merges the
    // terms added since into it (kept across batches).
    std::vector<uint32_t> by_name;
  };
  struct FieldBuild {
    // Per term (a dictionary index; an index into `own` if presorted),
    // only for fields built from lists.
    std::vector<std::unique_ptr<Lists>> lists;
    std::vector<LogEntry> log;  // the tokens, in the order added; terms are dictionary indexes
    std::vector<LogDoc> log_docs;
    bool from_log = true;    // every posting is in the log (not in `lists`)
    bool presorted = false;  // filled by AppendTerm: its terms are `own`, already sorted
    TermPool own;
  };
  // The dictionary's terms ordered by name (brings by_name up to date).
  const std::vector<uint32_t>& SortedTerms();
  static Lists& ListsOf(FieldBuild& fb, uint32_t term) {
    if (term >= fb.lists.size()) fb.lists.resize(term + 1);
    if (!fb.lists[term]) fb.lists[term] = std::make_unique<Lists>();
    return *fb.lists[term];
  }
  // Term `term`'s lists, for postings added whole (the log moved to lists first).
  Lists& TermLists(uint32_t field, std::string_view term);
  uint32_t TermIndex(std::string_view term, uint64_t h);
  // Adds `term` at empty slot `slot` (its hash's high bits `tag`); grows the table.
  [[gnu::noinline]] uint32_t InsertTerm(std::string_view term, uint64_t tag, size_t slot);
  // Appends `term` to `pool`; returns its index.
  uint32_t NewTerm(TermPool& pool, std::string_view term);
  // A token waiting for its probe (AddToken); longer terms are probed at once.
  static constexpr size_t kPendingTokens = 16, kPendingTermBytes = 40;
  struct Pending {
    uint64_t hash;
    uint32_t field, doc, position, size;
    char bytes[kPendingTermBytes];
  };
  void ProbeAndLog(uint32_t field, uint32_t doc, std::string_view term, uint64_t hash, uint32_t position);
  void ResolveOldest();
  // Probes and logs every waiting token (before anything reads the logs
  // or the dictionaries).
  void ResolvePending() {
    while (pending_size_ > 0) ResolveOldest();
  }
  Pending pending_[kPendingTokens];
  uint32_t pending_begin_ = 0, pending_size_ = 0;
  void Log(FieldBuild& fb, uint32_t doc, uint32_t term, uint32_t position);
  // Sorts the field's log by term into sort_buf_ (doc << 32 | position,
  // per term in the order added). Terms get local indexes, in order of
  // first appearance in the log: local_terms_[t] is local term t's
  // dictionary index; its run ends at count_buf_[t] and starts at
  // count_buf_[t - 1] (0 for t = 0).
  void SortLog(const FieldBuild& fb);
  // After SortLog: the local terms ordered by name, into `out`.
  void SortedLocalTerms(std::vector<uint32_t>& out);
  // Moves the field's logged tokens to their terms' lists, for good.
  void FlushLog(FieldBuild& fb);
  // Term t's postings from its run in sort_buf_, into the scratch lists.
  void RunToLists(uint32_t t, Lists& out) const;
  void EncodeText(size_t f, std::string& out, std::string& dir);
  Lists scratch_;                 // EncodeText: a term's lists from its run
  std::vector<uint8_t> common_of_;  // EncodeText: per dictionary index, its common-term index + 1, or 0 (all 0 between fields)
  std::vector<BlockMax> blocks_;
  std::string bitmap_;  // EncodeText: a long list's frozen bitmap, written after its header
  std::vector<uint32_t> count_buf_;
  std::vector<uint64_t> sort_buf_;
  std::vector<uint32_t> local_terms_;  // SortLog: local term -> dictionary index
  // SortLog: per dictionary index, its local index + 1 in the field last
  // sorted, or 0 (only local_terms_' entries are nonzero).
  std::vector<uint32_t> local_of_;

  Dictionary dict_;

  std::vector<std::string> ids_;
  std::string stored_;                 // the documents' stored fields, back to back
  std::vector<uint64_t> stored_ends_;  // per doc, where its stored fields end in stored_
  std::vector<FieldBuild> text_;
  std::vector<std::vector<uint32_t>> lengths_;
  std::vector<std::vector<double>> columns_;  // per numeric field, per doc: min value's double or NaN
  std::vector<std::vector<NumEntry>> numbers_;
  size_t memory_ = 0;
};

// A read-only, memory-mapped segment file. Thread-safe (immutable).
class Segment {
 public:
  // Maps and verifies dir/name (magic, version, roaring tag, fingerprint,
  // field counts, length, checksum, directory bounds). Corruption for any
  // mismatch; IOError if it cannot be read. kWrittenByUs skips only the
  // checksum, a pass over the whole file: for a file this process has just
  // written from an image Encode checksummed (its pages are that image).
  //
  // Once open, the mapping reads a page per fault (ReadAdvice::kRandom;
  // Open's own checks read it front to back): a cold page then costs a read
  // of that page, not of the device's readahead window, and evicts no more
  // than it reads.
  enum class Checksum { kVerify, kWrittenByUs };
  static Result<std::shared_ptr<const Segment>> Open(const std::string& path, uint64_t fingerprint,
                                                     uint32_t text_fields, uint32_t numeric_fields,
                                                     Checksum checksum = Checksum::kVerify);
  // This segment's file (at `path`) mapped once more with `advice`, as
  // Open checked it: nothing is read or checked again but the file's
  // length and footer. A merge reads its inputs this way (kSequential).
  // IOError if the file is gone, Corruption if it is another file.
  Result<std::shared_ptr<const Segment>> MapAgain(const std::string& path, ReadAdvice advice) const;

  uint32_t doc_count() const { return doc_count_; }
  size_t file_bytes() const { return file_.size(); }
  // What Open allocated beside the mapping (the sampled term keys).
  size_t memory_bytes() const {
    size_t bytes = sizeof(Segment);
    for (const TextField& t : text_) bytes += sizeof(TextField) + t.keys.capacity() * sizeof(uint64_t);
    return bytes + numeric_.capacity() * sizeof(NumericField);
  }
  // The whole file as mapped (a backup copies it from here).
  std::string_view file() const { return std::string_view(file_.data(), file_.size()); }
  std::string_view id(uint32_t doc) const {
    return std::string_view(ids_blob_ + ids_off_[doc], ids_off_[doc + 1] - ids_off_[doc]);
  }
  // The document whose id is `id`, deleted or not, if the segment has one
  // (ids are unique in a segment). Costs one cache line of the id filter
  // when it has none (most segments, ~99%), else a binary search of the id
  // order through the map.
  std::optional<uint32_t> FindId(std::string_view id) const;
  // The i-th document in id order (bytewise), i < doc_count().
  uint32_t doc_in_id_order(uint32_t i) const { return id_order_[i]; }
  // Whether the segment keeps its documents' stored fields (the
  // definition's "store" lists paths; SearchDefinitionImpl).
  bool has_stored() const { return stored_off_ != nullptr; }
  // A document's stored fields: the JSON object its hits return as
  // "fields", as indexed. Requires has_stored().
  std::string_view stored(uint32_t doc) const {
    uint64_t from, to;
    std::memcpy(&from, stored_off_ + 8 * uint64_t{doc}, 8);
    std::memcpy(&to, stored_off_ + 8 * (uint64_t{doc} + 1), 8);
    return std::string_view(stored_blob_ + from, to - from);
  }
  // Text field `f`:
  const uint32_t* lengths(uint32_t f) const { return text_[f].lengths; }
  uint32_t term_count(uint32_t f) const { return text_[f].term_count; }
  std::string_view term(uint32_t f, uint32_t i) const {
    const auto& t = text_[f];
    return std::string_view(t.blob + t.offs[i], t.offs[i + 1] - t.offs[i]);
  }
  // Term i's posting list, decoded from its header (a few varints: cheap,
  // but a loop over one list should decode it once).
  TermEntry entry(uint32_t f, uint32_t i) const;
  // Its doc_freq alone: the header's first varint (a prefix's expansion
  // reads it for hundreds of terms, and nothing else of most headers).
  uint32_t doc_freq(uint32_t f, uint32_t i) const {
    uint32_t df;
    GetVarint(reinterpret_cast<const uint8_t*>(base() + text_[f].list_offs[i]), &df);
    return df;
  }
  // Index of `term` in field f's sorted dictionary, or -1.
  int64_t FindTerm(uint32_t f, std::string_view term) const;
  // First index whose term is >= `term`.
  uint32_t LowerBound(uint32_t f, std::string_view term) const;
  // Term i's doc numbers as a roaring bitmap: a frozen view of a long
  // list's bitmap, or, for a short list, a bitmap built from its varints
  // in one allocation (as a frozen view costs). Readers that only walk the
  // doc numbers in order should use ForEachDoc, which allocates nothing.
  ConstBitmap Postings(uint32_t f, uint32_t i) const { return Postings(entry(f, i)); }
  // The same for a list whose entry the caller decoded already.
  ConstBitmap Postings(const TermEntry& e) const;
  // Calls fn(doc) for every posting of the list `e` (from entry()), in
  // order, building no bitmap (defined below).
  template <typename F>
  void ForEachDoc(const TermEntry& e, F&& fn) const;
  // Sets the bit of every document of the list in `words`, a dense bitset
  // of at least doc_count() bits: bitset containers are ORed a word at a time.
  void MarkDocs(const TermEntry& e, std::span<uint64_t> words) const;
  // A long list's frozen bitmap (bitmap_len bytes).
  const char* FrozenBitmap(const TermEntry& e) const;
  TfArray Tfs(uint32_t f, uint32_t i) const { return Tfs(entry(f, i)); }
  TfArray Tfs(const TermEntry& e) const {
    return TfArray{reinterpret_cast<const uint8_t*>(base() + e.tfs_off), e.tf_width};
  }
  const uint8_t* PositionsStart(uint32_t f, uint32_t i) const { return PositionsStart(entry(f, i)); }
  const uint8_t* PositionsStart(const TermEntry& e) const {
    return reinterpret_cast<const uint8_t*>(base() + e.tfs_off + uint64_t{e.doc_freq} * e.tf_width);
  }
  // Where reading the positions of posting `rank` of list `e` starts: the
  // nearest posting at or before it that the skip table reaches (a long
  // list has an entry per stride of postings: the offset of that
  // posting's positions from PositionsStart; a short list none, so it is
  // posting 0). Sets *from to that posting's rank; the postings from
  // there to `rank` are then skipped, tf varints each.
  const uint8_t* SkipTo(const TermEntry& e, uint32_t rank, uint32_t* from) const {
    const uint8_t* p = PositionsStart(e);
    *from = SkipFrom(e, rank);
    if (*from == 0) return p;
    uint32_t off;
    std::memcpy(&off, p + e.pos_len + 4 * uint64_t{*from >> e.skip_shift}, 4);
    return p + off;
  }
  // The rank SkipTo(e, rank) starts from, without reading the table.
  static uint32_t SkipFrom(const TermEntry& e, uint32_t rank) {
    return e.bitmap_len == 0 ? 0 : rank >> e.skip_shift << e.skip_shift;
  }
  // The list's BlockMax per block of kPostingBlock postings. A short list
  // has one, stored in its header: it is copied to `whole` and &whole is
  // returned (valid while `whole` is); a longer list's are in the file.
  const BlockMax* Blocks(uint32_t f, uint32_t i, BlockMax& whole) const { return Blocks(entry(f, i), whole); }
  const BlockMax* Blocks(const TermEntry& e, BlockMax& whole) const {
    if (e.bitmap_len == 0) {
      whole = e.whole;
      return &whole;
    }
    return reinterpret_cast<const BlockMax*>(PositionsStart(e) + e.pos_len + 4 * SkipEntries(e.doc_freq, e.skip_shift));
  }
  // If terms i and j of field f are both among its common terms (pairs.h),
  // sets *out to the documents where i is immediately followed by j and
  // returns true; otherwise false.
  bool PairPostings(uint32_t f, uint32_t i, uint32_t j, ConstBitmap* out) const {
    const roaring_bitmap_t* docs;
    if (!text_[f].pairs.Find(i, j, &docs)) return false;
    out->reset(docs != nullptr ? docs : roaring_bitmap_create());
    return true;
  }
  // Numeric field `n`: per-doc minimum value (NaN: none; its double
  // only), and all values sorted by (number, doc).
  const double* column(uint32_t n) const { return numeric_[n].column; }
  std::span<const NumEntry> sorted(uint32_t n) const { return {numeric_[n].sorted, numeric_[n].sorted_count}; }
  // Whether some document has several values in numeric field `n`.
  bool multi_valued(uint32_t n) const { return numeric_[n].multi_valued; }
  // Whether some value of numeric field `n` has a residual (the column's
  // doubles then do not order its documents exactly).
  bool has_residuals(uint32_t n) const { return numeric_[n].has_residuals; }

 private:
  explicit Segment(MappedFile f) : file_(std::move(f)) {}
  void WillNeedLongList(uint32_t f, const TermEntry& e) const;
  const char* base() const { return file_.data(); }
  struct TextField {
    const uint32_t* lengths;
    uint32_t term_count;
    const uint32_t* offs;
    const char* blob;
    const uint64_t* list_offs;  // per term, where its list's header is
    PairTable pairs;
    // TermKey of every kKeyStride-th term (in memory, made by Open):
    // LowerBound searches these integers before it compares any name.
    std::vector<uint64_t> keys;
  };
  static constexpr uint32_t kKeyStride = 16;
  struct NumericField {
    const double* column;
    const NumEntry* sorted;
    size_t sorted_count;
    bool multi_valued;
    bool has_residuals;
  };
  MappedFile file_;
  uint32_t doc_count_ = 0;
  const uint32_t* ids_off_ = nullptr;
  const char* ids_blob_ = nullptr;
  const uint32_t* id_order_ = nullptr;  // doc numbers ordered by id
  const char* id_filter_ = nullptr;     // segment_format.h
  uint64_t id_filter_blocks_ = 0;
  const char* stored_off_ = nullptr;  // u64 per doc + 1, or nullptr: none kept
  const char* stored_blob_ = nullptr;
  std::vector<TextField> text_;
  std::vector<NumericField> numeric_;
};

// Both kinds of list are read in place: a short one chunk by chunk from
// its varints (a prefix's expansion reads hundreds of them: no reader, no
// copy), a long one from its frozen bytes (ForEachFrozen: no view, no
// allocation; unless the reader disagrees with this library, when the
// library's iterator reads it through a view).
template <typename F>
void Segment::ForEachDoc(const TermEntry& e, F&& fn) const {
  if (e.bitmap_len == 0) {
    const ShortDocs d = ParseShortDocs(PositionsStart(e) + e.pos_len, base());
    const uint8_t* p = d.pairs;
    const uint16_t* low = d.lows;
    for (uint32_t c = 0; c < d.chunks; ++c) {
      uint32_t key, count;
      p = GetVarint(p, &key);
      p = GetVarint(p, &count);
      const uint32_t high = key << 16;
      for (const uint16_t* end = low + count; low != end; ++low) fn(high | *low);
    }
    return;
  }
  if (FrozenReaderAgrees()) {
    ForEachFrozen(FrozenBitmap(e), e.bitmap_len, fn);
    return;
  }
  const ConstBitmap view = Postings(e);
  roaring_uint32_iterator_t it;
  roaring_init_iterator(view.get(), &it);
  for (; it.has_value; roaring_advance_uint32_iterator(&it)) fn(it.current_value);
}

inline void Segment::MarkDocs(const TermEntry& e, std::span<uint64_t> words) const {
  auto mark = [words](uint32_t d) { words[d >> 6] |= uint64_t{1} << (d & 63); };
  if (e.bitmap_len > 0 && FrozenReaderAgrees()) {
    ForEachFrozenContainer(FrozenBitmap(e), e.bitmap_len, mark, [words](uint32_t key, const char* bits) {
      // The last chunk's container runs past the segment's documents (its
      // bits there are 0): only the words the bitset has.
      const size_t first = key / 64, count = std::min<size_t>(1024, words.size() - first);
      for (size_t w = 0; w < count; ++w) {
        uint64_t word;
        std::memcpy(&word, bits + 8 * w, 8);
        words[first + w] |= word;
      }
    });
    return;
  }
  ForEachDoc(e, mark);
}

}  // namespace corvid::postings
