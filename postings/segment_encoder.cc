// SegmentBuilder::Encode: a batch's segment file, in memory (format:
// segment_format.h; the merger writes the same format streaming).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "postings/segment.h"
#include "postings/segment_format.h"

namespace corvid::postings {
namespace {

using namespace segment_format;

template <typename T>
void PutArray(std::string& out, const T* p, size_t n) {
  out.append(reinterpret_cast<const char*>(p), n * sizeof(T));
}

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

}  // namespace

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

}  // namespace corvid::postings
