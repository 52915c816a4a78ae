// Segment: a segment file memory-mapped and read in place (format:
// segment_format.h), checked at Open.
#include "postings/segment.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "common/resident_pages.h"
#include "postings/segment_format.h"

namespace corvid::postings {
namespace {

using namespace segment_format;

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

}  // namespace

Result<std::shared_ptr<const Segment>> Segment::Open(const std::string& path, uint64_t fingerprint,
                                                     uint32_t text_fields, uint32_t numeric_fields, Checksum checksum) {
  auto mf = MappedFile::Open(path);
  if (!mf.ok()) return mf.status();
  std::shared_ptr<Segment> s(new Segment(std::move(mf).value()));
  s->file_.Advise(ReadAdvice::kSequential);  // the checks below go front to back
  const char* b = s->file_.data();
  const size_t size = s->file_.size();
  auto bad = [&](const std::string& why) { return Status::Corruption(path + ": " + why); };
  if (size < kHeaderBytes + 16 || std::memcmp(b, kMagic, 8) != 0 || std::memcmp(b + size - 8, kFooterMagic, 8) != 0)
    return bad("not a segment file");
  // Checked (kVerify), a header that says "another format, CRoaring or
  // definition" is believed only if the file passes this format's checksum
  // (which covers the header) or names an older format (whose checksum may
  // differ): a flipped bit in those fields is damage, not a reason to
  // rebuild quietly.
  std::optional<bool> sums;
  auto sound = [&] {
    if (!sums) sums = FileChecksum(b, size - kFooterBytes) == GetFixed<uint64_t>(b + size - kFooterBytes);
    return *sums;
  };
  const bool checked = checksum == Checksum::kVerify;
  const uint32_t version = GetFixed<uint32_t>(b + 8);
  if (version != kSegmentFormatVersion) {
    if (checked && (version > kSegmentFormatVersion || version == 0) && !sound())
      return bad("checksum mismatch (and its format version, " + std::to_string(version) + ", is not this build's)");
    return bad(std::string(kOutdatedFormat));
  }
  if (GetFixed<uint32_t>(b + 12) != kRoaringTag) {
    if (checked && !sound()) return bad("checksum mismatch (and another CRoaring tag)");
    return bad(std::string(kOutdatedRoaring));
  }
  if (GetFixed<uint64_t>(b + 16) != fingerprint) {
    if (checked && !sound()) return bad("checksum mismatch (and another definition's fingerprint)");
    return bad(std::string(kOutdatedDefinition));
  }
  if (GetFixed<uint64_t>(b + 48) != size) return bad("truncated");
  if (checked && !sound()) return bad("checksum mismatch");
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
  s->file_.Advise(ReadAdvice::kRandom);
  return std::shared_ptr<const Segment>(std::move(s));
}

Result<std::shared_ptr<const Segment>> Segment::MapAgain(const std::string& path, ReadAdvice advice) const {
  auto mf = MappedFile::Open(path);
  if (!mf.ok()) return mf.status();
  const size_t size = file_.size();
  if (mf->size() != size || std::memcmp(mf->data() + size - kFooterBytes, base() + size - kFooterBytes, kFooterBytes) != 0)
    return Status::Corruption(path + ": not the segment file that was opened");
  mf->Advise(advice);
  std::shared_ptr<Segment> s(new Segment(std::move(mf).value()));
  const char* to = s->base();
  auto moved = [&](auto* p) { return p == nullptr ? p : reinterpret_cast<decltype(p)>(to + (reinterpret_cast<const char*>(p) - base())); };
  s->doc_count_ = doc_count_;
  s->ids_off_ = moved(ids_off_);
  s->ids_blob_ = moved(ids_blob_);
  s->id_order_ = moved(id_order_);
  s->id_filter_ = moved(id_filter_);
  s->id_filter_blocks_ = id_filter_blocks_;
  s->stored_off_ = moved(stored_off_);
  s->stored_blob_ = moved(stored_blob_);
  s->text_ = text_;
  for (TextField& t : s->text_) {
    t.lengths = moved(t.lengths);
    t.offs = moved(t.offs);
    t.blob = moved(t.blob);
    t.list_offs = moved(t.list_offs);
    t.pairs = t.pairs.Rebased(to);
  }
  s->numeric_ = numeric_;
  for (NumericField& n : s->numeric_) {
    n.column = moved(n.column);
    n.sorted = moved(n.sorted);
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
  if (e.bitmap_len > 0) WillNeedLongList(f, e);
  return e;
}

// A query's mapping reads a page per fault (Open): a scorer walking a long
// list page by page would wait for one read per 4 KiB of a cold list. So
// the parts of it a scorer reads (the tfs; the skip table, block maxima and
// bitmap), and the field's lengths when the list touches most of their
// pages, are asked for at once, each in one request, when they span enough
// pages for that to matter; the syscall is then small beside the walk.
void Segment::WillNeedLongList(uint32_t f, const TermEntry& e) const {
  constexpr uint64_t kMinBytes = 16 << 10;
  const uint64_t tfs = uint64_t{e.doc_freq} * e.tf_width;
  if (tfs >= kMinBytes) WillNeed(base() + e.tfs_off, tfs);
  const uint64_t tail = e.tfs_off + tfs + e.pos_len;
  const uint64_t end = BitmapOffset(e) + e.bitmap_len;
  if (end - tail >= kMinBytes) WillNeed(base() + tail, end - tail);
  const uint64_t lengths = 4 * uint64_t{doc_count_};
  if (lengths >= kMinBytes && uint64_t{e.doc_freq} * 16 >= doc_count_) WillNeed(text_[f].lengths, lengths);
}

const char* Segment::FrozenBitmap(const TermEntry& e) const { return base() + BitmapOffset(e); }

ConstBitmap Segment::Postings(const TermEntry& e) const {
  if (e.bitmap_len > 0) return ConstBitmap(roaring_bitmap_frozen_view(FrozenBitmap(e), e.bitmap_len));
  const ShortDocs d = ParseShortDocs(PositionsStart(e) + e.pos_len, base());
  return ConstBitmap(ShortListBitmap(d.chunks, d.pairs, d.lows));
}

}  // namespace corvid::postings
