// The streaming merger (segment_merger.h). It writes the segment format of
// segment.cc, its sections in this order: ids, stored fields, id order,
// id filter; per text field its lengths, its posting lists (one k-way
// merge of the inputs' sorted dictionaries), the term offsets and names
// (the same merge again: the names are read twice rather than held), the
// list offsets (spilled to a temporary file while the lists were written)
// and the pair section; the number columns; the directory. The header is
// written last, over the zeros that held its place.
#include "postings/segment_merger.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <queue>

#include "postings/file_writer.h"
#include "postings/pairs.h"
#include "postings/segment_format.h"
#include "postings/term_merge.h"

namespace corvid::postings {

using namespace segment_format;

DocRemap::DocRemap(const roaring_bitmap_t* deleted, uint32_t doc_count, uint32_t base) : base_(base) {
  uint64_t dead = 0;
  if (deleted != nullptr) {
    Bitmap in_range(roaring_bitmap_copy(deleted));
    roaring_bitmap_remove_range(in_range.get(), doc_count, uint64_t{1} << 32);
    dead = roaring_bitmap_get_cardinality(in_range.get());
    if (dead > 0) {
      words_.assign((uint64_t{doc_count} + 63) / 64, 0);
      roaring_uint32_iterator_t it;
      roaring_init_iterator(in_range.get(), &it);
      for (; it.has_value; roaring_advance_uint32_iterator(&it))
        words_[it.current_value >> 6] |= uint64_t{1} << (it.current_value & 63);
      before_.resize(words_.size());
      uint32_t sum = 0;
      for (size_t w = 0; w < words_.size(); ++w) {
        before_[w] = sum;
        sum += static_cast<uint32_t>(std::popcount(words_[w]));
      }
    }
  }
  live_ = doc_count - static_cast<uint32_t>(dead);
}

namespace {

// Pair tables are built a chunk of input documents at a time: the first
// kFirstPairChunkDocs, then as many as hold about kPairChunkBytes of the
// common terms' postings (a common term may have dozens of positions in
// every document), at most kMaxPairChunkDocs.
constexpr uint64_t kFirstPairChunkDocs = 256;
constexpr uint64_t kPairChunkBytes = uint64_t{1} << 20;
constexpr uint64_t kMaxPairChunkDocs = uint64_t{1} << 16;

struct Input {
  const Segment* seg;
  DocRemap remap;
};

// Calls fn(new_doc, tf, positions, positions_end, old_doc) for every live
// posting of list `e` of `in`, in doc order.
template <typename F>
void ForEachLive(const Input& in, const TermEntry& e, F&& fn) {
  const TfArray tfs = in.seg->Tfs(e);
  const uint8_t* p = in.seg->PositionsStart(e);
  uint32_t r = 0;
  in.seg->ForEachDoc(e, [&](uint32_t d) {
    const uint32_t tf = tfs[r++];
    const uint8_t* q = SkipVarints(p, tf);
    if (in.remap.live(d)) fn(in.remap(d), tf, p, q, d);
    p = q;
  });
}

// The inputs' dictionaries of one field, merged by TermMerge (the
// sources' index is the term's index in that input's dictionary).
struct FieldDictionaries {
  const std::vector<Input>& inputs;
  uint32_t field;
  size_t count() const { return inputs.size(); }
  uint32_t size(size_t k) const { return inputs[k].seg->term_count(field); }
  std::string_view term(size_t k, uint32_t i) const { return inputs[k].seg->term(field, i); }
};
using DictionaryMerge = TermMerge<FieldDictionaries>;

struct CommonTerm {
  uint32_t df, index;  // index: in the merged dictionary
  std::string name;
};

class Merger {
 public:
  Merger(std::vector<Input> inputs, FileWriter& out, std::string spill_dir, const std::atomic<bool>& cancel)
      : in_(std::move(inputs)), w_(out), spill_dir_(std::move(spill_dir)), cancel_(cancel) {
    for (const Input& i : in_) n_ += i.remap.live_count();
  }
  uint32_t doc_count() const { return n_; }
  Status Run(uint64_t fingerprint, uint32_t text_fields, uint32_t numeric_fields);
  std::vector<DocRemap> TakeRemaps() {
    std::vector<DocRemap> out;
    for (Input& i : in_) out.push_back(std::move(i.remap));
    return out;
  }

 private:
  bool Cancelled() const { return cancel_.load(std::memory_order_relaxed); }
  // fn(input, old_doc) for every live document, in merged order.
  template <typename F>
  void ForEachLiveDoc(F&& fn) const {
    for (const Input& in : in_)
      for (uint32_t d = 0; d < in.seg->doc_count(); ++d)
        if (in.remap.live(d)) fn(in, d);
  }
  void WriteIds();
  void WriteStored();
  void WriteIdOrder();
  Status WriteTextField(uint32_t f);
  // Writes the merged list of the current term of `dm`; its doc_freq (0:
  // no live posting, nothing written).
  uint32_t WriteList(uint32_t f, const DictionaryMerge& dm);
  void WriteLongList(uint32_t f, const DictionaryMerge& dm, uint32_t df, uint64_t pos_len, uint32_t max_tf,
                     uint32_t min_len, uint32_t last_doc);
  Status WritePairs(uint32_t f, const std::vector<CommonTerm>& common);
  void WriteNumeric(uint32_t n);

  std::vector<Input> in_;
  FileWriter& w_;
  const std::string spill_dir_;  // where list offsets are spilled
  const std::atomic<bool>& cancel_;
  uint32_t n_ = 0;
  std::string dir_;  // the directory, written at the end
  std::string scratch_;
  std::vector<uint32_t> docs_, tfs_, lens_;
  std::vector<uint32_t> batch_;
  std::string bitmap_;     // a long list's frozen bitmap
  std::string positions_;  // a short list's positions
};

void Merger::WriteIds() {
  PutFixed<uint64_t>(dir_, w_.offset());
  uint32_t off = 0;
  w_.Put<uint32_t>(0);
  ForEachLiveDoc([&](const Input& in, uint32_t d) {
    off += static_cast<uint32_t>(in.seg->id(d).size());
    w_.Put<uint32_t>(off);
  });
  w_.AlignTo(32);
  PutFixed<uint64_t>(dir_, w_.offset());
  ForEachLiveDoc([&](const Input& in, uint32_t d) { w_.Append(in.seg->id(d)); });
  w_.AlignTo(32);
}

void Merger::WriteStored() {
  uint64_t total = 0;
  ForEachLiveDoc([&](const Input& in, uint32_t d) {
    if (in.seg->has_stored()) total += in.seg->stored(d).size();
  });
  if (total == 0) {
    PutFixed<uint64_t>(dir_, 0);
    PutFixed<uint64_t>(dir_, 0);
    return;
  }
  PutFixed<uint64_t>(dir_, w_.offset());
  uint64_t off = 0;
  w_.Put<uint64_t>(0);
  ForEachLiveDoc([&](const Input& in, uint32_t d) {
    if (in.seg->has_stored()) off += in.seg->stored(d).size();
    w_.Put<uint64_t>(off);
  });
  w_.AlignTo(32);
  PutFixed<uint64_t>(dir_, w_.offset());
  ForEachLiveDoc([&](const Input& in, uint32_t d) {
    if (in.seg->has_stored()) w_.Append(in.seg->stored(d));
  });
  w_.AlignTo(32);
}

void Merger::WriteIdOrder() {
  // A k-way merge of the inputs' id orders, live documents only.
  std::vector<uint32_t> cursor(in_.size(), 0);
  auto advance = [&](size_t k) {
    const Input& in = in_[k];
    while (cursor[k] < in.seg->doc_count() && !in.remap.live(in.seg->doc_in_id_order(cursor[k]))) ++cursor[k];
  };
  auto id_at = [&](size_t k) { return in_[k].seg->id(in_[k].seg->doc_in_id_order(cursor[k])); };
  auto later = [&](size_t a, size_t b) { return id_at(a) > id_at(b); };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later)> heap(later);
  for (size_t k = 0; k < in_.size(); ++k) {
    advance(k);
    if (cursor[k] < in_[k].seg->doc_count()) heap.push(k);
  }
  PutFixed<uint64_t>(dir_, w_.offset());
  while (!heap.empty()) {
    const size_t k = heap.top();
    heap.pop();
    w_.Put<uint32_t>(in_[k].remap(in_[k].seg->doc_in_id_order(cursor[k])));
    ++cursor[k];
    advance(k);
    if (cursor[k] < in_[k].seg->doc_count()) heap.push(k);
  }
  w_.AlignTo(32);
  const uint64_t blocks = IdFilterBlocks(n_);
  std::string filter(blocks * kIdFilterBlockBytes, '\0');
  ForEachLiveDoc([&](const Input& in, uint32_t d) { IdFilterAdd(filter.data(), blocks, in.seg->id(d)); });
  PutFixed<uint64_t>(dir_, w_.offset());
  PutFixed<uint64_t>(dir_, blocks);
  w_.Append(filter);
  w_.AlignTo(32);
}

uint32_t Merger::WriteList(uint32_t f, const DictionaryMerge& dm) {
  // The list's header figures: from the inputs' headers where nothing is
  // deleted, else from their live postings.
  uint32_t df = 0, max_tf = 0, min_len = std::numeric_limits<uint32_t>::max(), last_doc = 0;
  uint64_t pos_len = 0;
  for (const auto& src : dm.at) {
    const Input& in = in_[src.list];
    const TermEntry e = in.seg->entry(f, src.index);
    if (!in.remap.has_deletes()) {
      df += e.doc_freq;
      pos_len += e.pos_len;
      max_tf = std::max(max_tf, e.whole.max_tf);
      min_len = std::min(min_len, e.whole.min_len);
      last_doc = in.remap(e.whole.last_doc);
      continue;
    }
    const uint32_t* lens = in.seg->lengths(f);
    ForEachLive(in, e, [&](uint32_t nd, uint32_t tf, const uint8_t* p, const uint8_t* q, uint32_t d) {
      ++df;
      pos_len += static_cast<uint64_t>(q - p);
      max_tf = std::max(max_tf, tf);
      min_len = std::min(min_len, lens[d]);
      last_doc = nd;
    });
  }
  if (df == 0) return 0;
  if (df > kShortList) {
    WriteLongList(f, dm, df, pos_len, max_tf, min_len, last_doc);
    return df;
  }
  // A short list: gathered (at most kShortList postings), then encoded as the builder does.
  docs_.clear();
  tfs_.clear();
  lens_.clear();
  positions_.clear();
  for (const auto& src : dm.at) {
    const Input& in = in_[src.list];
    const uint32_t* lens = in.seg->lengths(f);
    ForEachLive(in, in.seg->entry(f, src.index),
                [&](uint32_t nd, uint32_t tf, const uint8_t* p, const uint8_t* q, uint32_t d) {
                  docs_.push_back(nd);
                  tfs_.push_back(tf);
                  lens_.push_back(lens[d]);
                  positions_.append(reinterpret_cast<const char*>(p), static_cast<size_t>(q - p));
                });
  }
  scratch_.clear();
  AppendShortList(scratch_, w_.offset(), docs_.data(), tfs_.data(), df, [&](uint32_t i) { return lens_[i]; },
                  positions_.size(), [&](char* q) {
                    std::memcpy(q, positions_.data(), positions_.size());
                    return q + positions_.size();
                  });
  w_.Append(scratch_);
  return df;
}

// A long list, streamed: one pass over its sources per part (bitmap, tfs,
// positions, skip table, block maxima) in the order the format has them.
void Merger::WriteLongList(uint32_t f, const DictionaryMerge& dm, uint32_t df, uint64_t pos_len, uint32_t max_tf,
                           uint32_t min_len, uint32_t last_doc) {
  auto each = [&](auto&& fn) {
    for (const auto& src : dm.at) {
      const Input& in = in_[src.list];
      ForEachLive(in, in.seg->entry(f, src.index),
                  [&](uint32_t nd, uint32_t tf, const uint8_t* p, const uint8_t* q, uint32_t d) {
                    fn(in, nd, tf, p, q, d);
                  });
    }
  };
  {
    Bitmap bm = NewBitmap();
    batch_.clear();
    each([&](const Input&, uint32_t nd, uint32_t, const uint8_t*, const uint8_t*, uint32_t) {
      batch_.push_back(nd);
      if (batch_.size() == 4096) {
        roaring_bitmap_add_many(bm.get(), batch_.size(), batch_.data());
        batch_.clear();
      }
    });
    roaring_bitmap_add_many(bm.get(), batch_.size(), batch_.data());
    roaring_bitmap_run_optimize(bm.get());
    bitmap_.resize(roaring_bitmap_frozen_size_in_bytes(bm.get()));
    roaring_bitmap_frozen_serialize(bm.get(), bitmap_.data());
  }
  scratch_.clear();
  PutVarint(scratch_, df);
  PutVarint(scratch_, static_cast<uint32_t>(pos_len));
  PutVarint(scratch_, max_tf);
  PutVarint(scratch_, min_len);
  PutVarint(scratch_, last_doc);
  PutVarint(scratch_, static_cast<uint32_t>(bitmap_.size()));
  w_.Append(scratch_);
  // Term frequencies.
  each([&](const Input&, uint32_t, uint32_t tf, const uint8_t*, const uint8_t*, uint32_t) {
    if (max_tf < 256)
      w_.Put<uint8_t>(static_cast<uint8_t>(tf));
    else
      w_.Put<uint32_t>(tf);
  });
  // Positions: whole where nothing is deleted.
  for (const auto& src : dm.at) {
    const Input& in = in_[src.list];
    const TermEntry e = in.seg->entry(f, src.index);
    if (!in.remap.has_deletes()) {
      w_.Append(in.seg->PositionsStart(e), e.pos_len);
      continue;
    }
    ForEachLive(in, e, [&](uint32_t, uint32_t, const uint8_t* p, const uint8_t* q, uint32_t) {
      w_.Append(p, static_cast<size_t>(q - p));
    });
  }
  // Skip table: the positions offset of every stride-th posting.
  const uint32_t stride_mask = (1u << SkipShift(df, static_cast<uint32_t>(pos_len))) - 1;
  uint32_t rank = 0;
  uint32_t at = 0;
  each([&](const Input&, uint32_t, uint32_t, const uint8_t* p, const uint8_t* q, uint32_t) {
    if ((rank++ & stride_mask) == 0) w_.Put<uint32_t>(at);
    at += static_cast<uint32_t>(q - p);
  });
  // Block maxima.
  BlockMax block{0, 0, std::numeric_limits<uint32_t>::max(), 0};
  rank = 0;
  each([&](const Input& in, uint32_t nd, uint32_t tf, const uint8_t*, const uint8_t*, uint32_t d) {
    block.last_doc = nd;
    block.max_tf = std::max(block.max_tf, tf);
    block.min_len = std::min(block.min_len, in.seg->lengths(f)[d]);
    if (++rank % kPostingBlock == 0) {
      w_.Put(block);
      block = BlockMax{0, 0, std::numeric_limits<uint32_t>::max(), 0};
    }
  });
  if (rank % kPostingBlock != 0) w_.Put(block);
  w_.AlignTo(32);  // frozen views need 32-byte alignment
  w_.Append(bitmap_);
}

Status Merger::WriteTextField(uint32_t f) {
  w_.AlignTo(32);
  const uint64_t lengths_off = w_.offset();
  uint64_t sum_len = 0;
  uint32_t with_tokens = 0;
  ForEachLiveDoc([&](const Input& in, uint32_t d) {
    const uint32_t l = in.seg->lengths(f)[d];
    sum_len += l;
    with_tokens += l > 0;
    w_.Put<uint32_t>(l);
  });
  // The lists, in term order; their offsets go to a spill file, and which
  // merged terms have live postings to `kept` (a bit per term).
  auto spilled = FileWriter::Temporary(spill_dir_);
  if (!spilled.ok()) return spilled.status();
  FileWriter& spill = *spilled;
  std::vector<bool> kept;
  uint32_t nt = 0;
  // The common terms (pairs.h, ChooseCommonTerms): the kMaxCommonTerms
  // largest doc_freqs at or above min_df, ties to the lower index, kept
  // as a bounded candidate list.
  const uint32_t min_df = std::max<uint32_t>(1, n_ / 64);
  std::vector<CommonTerm> candidates;
  auto trim_candidates = [&] {
    std::sort(candidates.begin(), candidates.end(), [](const CommonTerm& a, const CommonTerm& b) {
      return a.df != b.df ? a.df > b.df : a.index < b.index;
    });
    if (candidates.size() > kMaxCommonTerms) candidates.resize(kMaxCommonTerms);
  };
  {
    const FieldDictionaries dicts{in_, f};
    DictionaryMerge dm(dicts);
    while (dm.Next()) {
      if (Cancelled()) return Status::ShuttingDown("merge cancelled");
      const uint64_t off = w_.offset();
      const uint32_t df = WriteList(f, dm);
      kept.push_back(df > 0);
      if (df == 0) continue;
      spill.Put<uint64_t>(off);
      if (n_ >= kMinPairTableDocs && df >= min_df) {
        candidates.push_back(CommonTerm{df, nt, std::string(dm.term)});
        if (candidates.size() >= 16 * kMaxCommonTerms) trim_candidates();
      }
      ++nt;
    }
  }
  trim_candidates();
  std::sort(candidates.begin(), candidates.end(), [](const CommonTerm& a, const CommonTerm& b) { return a.index < b.index; });
  w_.AlignTo(32);
  const uint64_t term_offs_off = w_.offset();
  {
    uint32_t o = 0;
    size_t i = 0;
    w_.Put<uint32_t>(0);
    const FieldDictionaries dicts{in_, f};
    DictionaryMerge dm(dicts);
    while (dm.Next()) {
      if (!kept[i++]) continue;
      o += static_cast<uint32_t>(dm.term.size());
      w_.Put<uint32_t>(o);
    }
  }
  w_.AlignTo(32);
  const uint64_t term_blob_off = w_.offset();
  {
    size_t i = 0;
    const FieldDictionaries dicts{in_, f};
    DictionaryMerge dm(dicts);
    while (dm.Next())
      if (kept[i++]) w_.Append(dm.term);
  }
  w_.AlignTo(32);
  const uint64_t list_offs_off = w_.offset();
  spill.CopyTo(w_);
  if (!spill.status().ok()) return spill.status();
  PutTextFieldDir(dir_, TextFieldDir{lengths_off, sum_len, with_tokens, nt, term_offs_off, term_blob_off, list_offs_off});
  return WritePairs(f, candidates);
}

// The pair tables of the merged field: each input's common-term postings
// are read a chunk of kPairChunkDocs documents at a time (so the memory is
// bounded by the chunk, not the segment), their pairs found as a batch's
// are (BuildPairs), and added to one bitmap per pair.
Status Merger::WritePairs(uint32_t f, const std::vector<CommonTerm>& common) {
  const size_t k = common.size();
  std::vector<Bitmap> found(k * k);
  if (k > 0) {
    struct Cursor {
      ConstBitmap docs;
      roaring_uint32_iterator_t it;
      TfArray tfs;
      const uint8_t* pos = nullptr;
      uint32_t rank = 0;
    };
    std::vector<std::vector<uint32_t>> docs(k), tfs(k);
    std::vector<std::string> pos(k);
    std::vector<PairSource> sources(k);
    for (const Input& in : in_) {
      std::vector<Cursor> cursors(k);
      for (size_t c = 0; c < k; ++c) {
        const int64_t t = in.seg->FindTerm(f, common[c].name);
        if (t < 0) continue;
        const TermEntry e = in.seg->entry(f, static_cast<uint32_t>(t));
        Cursor& cur = cursors[c];
        cur.docs = in.seg->Postings(e);
        if (!cur.docs) return Status::IOError("out of memory reading a posting list");
        roaring_init_iterator(cur.docs.get(), &cur.it);
        cur.tfs = in.seg->Tfs(e);
        cur.pos = in.seg->PositionsStart(e);
      }
      // Chunks sized from the previous one's bytes per document, so that
      // each holds about kPairChunkBytes of postings.
      uint64_t chunk = kFirstPairChunkDocs;
      for (uint64_t lo = 0, hi = 0; lo < in.seg->doc_count(); lo = hi) {
        if (Cancelled()) return Status::ShuttingDown("merge cancelled");
        hi = lo + chunk;
        for (size_t c = 0; c < k; ++c) {
          docs[c].clear();
          tfs[c].clear();
          pos[c].clear();
          Cursor& cur = cursors[c];
          if (!cur.docs) continue;
          for (; cur.it.has_value && cur.it.current_value < hi; roaring_advance_uint32_iterator(&cur.it)) {
            const uint32_t d = cur.it.current_value, tf = cur.tfs[cur.rank++];
            const uint8_t* q = SkipVarints(cur.pos, tf);
            if (in.remap.live(d)) {
              docs[c].push_back(in.remap(d));
              tfs[c].push_back(tf);
              pos[c].append(reinterpret_cast<const char*>(cur.pos), static_cast<size_t>(q - cur.pos));
            }
            cur.pos = q;
          }
        }
        // What the chunk holds: its postings, and BuildPairs' occurrences
        // (at most one per common token, 8 bytes, then 4 more in its lists).
        uint64_t bytes = 0;
        for (size_t c = 0; c < k; ++c) {
          sources[c] = PairSource{docs[c], tfs[c], reinterpret_cast<const uint8_t*>(pos[c].data())};
          bytes += 8 * docs[c].size() + pos[c].size();
          for (uint32_t tf : tfs[c]) bytes += 12 * uint64_t{tf};
        }
        const uint64_t per_doc = std::max<uint64_t>(1, bytes / (hi - lo));
        chunk = std::clamp<uint64_t>(kPairChunkBytes / per_doc, 16, kMaxPairChunkDocs);
        for (const PairList& pl : BuildPairs(sources)) {
          Bitmap& b = found[size_t{pl.first} * k + pl.second];
          if (!b) b = NewBitmap();
          roaring_bitmap_add_many(b.get(), pl.docs.size(), pl.docs.data());
        }
      }
    }
  }
  std::vector<uint32_t> indexes;
  for (const CommonTerm& c : common) indexes.push_back(c.index);
  std::vector<PairBitmap> pairs;
  for (size_t i = 0; i < found.size(); ++i) {
    if (!found[i]) continue;
    roaring_bitmap_run_optimize(found[i].get());
    pairs.push_back(PairBitmap{static_cast<uint16_t>(i / k), static_cast<uint16_t>(i % k), found[i].get()});
  }
  w_.AlignTo(32);
  scratch_.clear();
  PutFixed<uint64_t>(dir_, AppendPairSection(scratch_, w_.offset(), indexes, pairs));
  w_.Append(scratch_);
  return w_.status();
}

void Merger::WriteNumeric(uint32_t n) {
  w_.AlignTo(32);
  const uint64_t col_off = w_.offset();
  ForEachLiveDoc([&](const Input& in, uint32_t d) { w_.Put<double>(in.seg->column(n)[d]); });
  w_.AlignTo(32);
  const uint64_t sorted_off = w_.offset();
  // A k-way merge of the inputs' sorted values, live documents only: by
  // number, then input (an earlier input's documents come first), then doc.
  std::vector<size_t> cursor(in_.size(), 0);
  auto advance = [&](size_t k) {
    const auto sorted = in_[k].seg->sorted(n);
    while (cursor[k] < sorted.size() && !in_[k].remap.live(sorted[cursor[k]].doc)) ++cursor[k];
    return cursor[k] < sorted.size();
  };
  auto later = [&](size_t a, size_t b) {
    const Number x = in_[a].seg->sorted(n)[cursor[a]].number(), y = in_[b].seg->sorted(n)[cursor[b]].number();
    return x != y ? x > y : a > b;
  };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later)> heap(later);
  for (size_t k = 0; k < in_.size(); ++k)
    if (advance(k)) heap.push(k);
  uint64_t count = 0;
  while (!heap.empty()) {
    const size_t k = heap.top();
    heap.pop();
    NumEntry e = in_[k].seg->sorted(n)[cursor[k]];
    e.doc = in_[k].remap(e.doc);
    w_.Put(e);
    ++count;
    ++cursor[k];
    if (advance(k)) heap.push(k);
  }
  w_.AlignTo(32);
  PutFixed<uint64_t>(dir_, col_off);
  PutFixed<uint64_t>(dir_, sorted_off);
  PutFixed<uint64_t>(dir_, count);
}

Status Merger::Run(uint64_t fingerprint, uint32_t text_fields, uint32_t numeric_fields) {
  w_.Zeros(kHeaderBytes);  // the header's place, written last
  w_.HashFrom(kHeaderBytes);
  WriteIds();
  WriteStored();
  WriteIdOrder();
  for (uint32_t f = 0; f < text_fields; ++f) {
    Status st = WriteTextField(f);
    if (!st.ok()) return st;
  }
  for (uint32_t n = 0; n < numeric_fields; ++n) WriteNumeric(n);
  if (Cancelled()) return Status::ShuttingDown("merge cancelled");
  w_.AlignTo(32);
  Header h;
  h.fingerprint = fingerprint;
  h.doc_count = n_;
  h.text_fields = text_fields;
  h.numeric_fields = numeric_fields;
  h.dir_off = w_.offset();
  w_.Append(dir_);
  w_.AlignTo(32);
  h.file_len = w_.offset() + kFooterBytes;
  char header[kHeaderBytes];
  EncodeHeader(h, header);
  w_.Flush();
  w_.Put<uint64_t>(CombineChecksums(XXH3_64bits(header, kHeaderBytes), w_.Hash()));
  w_.Append(kFooterMagic, 8);
  w_.WriteAt(0, header, kHeaderBytes);
  return w_.Sync();
}

}  // namespace

Result<uint32_t> MergeSegments(std::span<const MergeInput> inputs, const std::string& dir, const std::string& name,
                               uint64_t fingerprint, uint32_t text_fields, uint32_t numeric_fields,
                               const std::atomic<bool>& cancel, std::vector<DocRemap>* remaps) {
  std::vector<Input> in;
  uint32_t base = 0;
  for (const MergeInput& mi : inputs) {
    DocRemap remap(mi.deleted, mi.segment->doc_count(), base);
    base += remap.live_count();
    in.push_back(Input{mi.segment, std::move(remap)});
  }
  const std::string tmp = dir + "/" + name + ".tmp";
  Status st;
  uint32_t docs = 0;
  {
    auto out = FileWriter::Create(tmp);
    if (!out.ok()) return out.status();
    Merger m(std::move(in), *out, dir, cancel);
    docs = m.doc_count();
    st = m.Run(fingerprint, text_fields, numeric_fields);
    if (remaps != nullptr) *remaps = m.TakeRemaps();
  }
  if (st.ok() && cancel.load()) st = Status::ShuttingDown("merge cancelled");
  if (st.ok() && ::rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0)
    st = Status::IOError("rename " + tmp + ": " + std::strerror(errno));
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  st = FsyncDir(dir);
  if (!st.ok()) return st;
  return docs;
}

}  // namespace corvid::postings
