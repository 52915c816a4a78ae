// SegmentBuilder: a batch's documents in memory (the mutable segment),
// encoded to a segment file by segment_encoder.cc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/hash.h"
#include "postings/segment.h"
#include "postings/segment_format.h"

namespace corvid::postings {

using namespace segment_format;

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
  // Fixed-size (overlapping) loads, as HashShortBytes reads: most terms are
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
      uint64_t h2 = HashShortBytes(pool.Name(t));
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
  return ListsOf(fb, TermIndex(term, HashShortBytes(term)));
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
    ProbeAndLog(field, doc, term, HashShortBytes(term), position);
    return;
  }
  if (pending_size_ == kPendingTokens) ResolveOldest();
  Pending& p = pending_[(pending_begin_ + pending_size_) % kPendingTokens];
  ++pending_size_;
  p.hash = HashShortBytes(term);
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

}  // namespace corvid::postings
