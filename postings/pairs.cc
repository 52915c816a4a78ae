#include "postings/pairs.h"

#include <algorithm>
#include <cstring>

#include "postings/file_util.h"
#include "postings/segment.h"  // AppendFrozenBitmap

namespace corvid::postings {

std::vector<uint32_t> ChooseCommonTerms(std::span<const uint32_t> doc_freqs, uint32_t doc_count) {
  const uint32_t min_df = std::max<uint32_t>(1, doc_count / 64);
  std::vector<uint32_t> idx;
  for (uint32_t i = 0; i < doc_freqs.size(); ++i)
    if (doc_freqs[i] >= min_df) idx.push_back(i);
  if (idx.size() > kMaxCommonTerms) {
    std::partial_sort(idx.begin(), idx.begin() + kMaxCommonTerms, idx.end(), [&](uint32_t a, uint32_t b) {
      return doc_freqs[a] != doc_freqs[b] ? doc_freqs[a] > doc_freqs[b] : a < b;
    });
    idx.resize(kMaxCommonTerms);
  }
  std::sort(idx.begin(), idx.end());
  return idx;
}

namespace {

// The documents of every (first, second) pair of common terms, as both
// builders find them; documents come in ascending order. Occurrences go to
// one flat array (pair << 32 | doc) and are grouped by pair at the end with
// a counting sort: a vector per pair, grown as its occurrences come, cost a
// quarter of the pair tables' time in reallocations.
class PairCollector {
 public:
  explicit PairCollector(size_t k) : k_(k), last_(k * k, UINT32_MAX) {}
  void Add(size_t first, size_t second, uint32_t doc) {
    const size_t pair = first * k_ + second;
    if (last_[pair] == doc) return;
    last_[pair] = doc;
    hits_.push_back(uint64_t{pair} << 32 | doc);
  }
  // Every token at p with every token at p + 1, for a document whose
  // tokens (position << 8 | common index) may share positions or come in
  // any order; sorts `tokens`.
  void AddAdjacent(std::vector<uint64_t>& tokens, uint32_t doc) {
    std::sort(tokens.begin(), tokens.end());
    for (size_t i = 0; i < tokens.size(); ++i) {
      const uint64_t p = tokens[i] >> 8;
      for (size_t j = i + 1; j < tokens.size() && (tokens[j] >> 8) <= p + 1; ++j)
        if ((tokens[j] >> 8) == p + 1) Add(tokens[i] & 0xff, tokens[j] & 0xff, doc);
    }
  }
  // The non-empty lists, in (first, second) order.
  std::vector<PairList> Take() {
    std::vector<uint32_t> count(k_ * k_, 0);
    for (uint64_t h : hits_) ++count[h >> 32];
    std::vector<PairList> out;
    std::vector<size_t> slot(k_ * k_);  // the pair's index in `out`
    for (size_t i = 0; i < count.size(); ++i) {
      if (count[i] == 0) continue;
      slot[i] = out.size();
      PairList& pl = out.emplace_back();
      pl.first = static_cast<uint16_t>(i / k_);
      pl.second = static_cast<uint16_t>(i % k_);
      pl.docs.reserve(count[i]);
    }
    for (uint64_t h : hits_) out[slot[h >> 32]].docs.push_back(static_cast<uint32_t>(h));  // stable: docs stay ascending
    return out;
  }

 private:
  size_t k_;
  std::vector<uint32_t> last_;  // [first * k + second]: the last document added, or UINT32_MAX
  std::vector<uint64_t> hits_;  // pair << 32 | doc, in the order added
};

}  // namespace

std::vector<PairList> BuildPairs(std::span<const PairSource> common) {
  const size_t k = common.size();
  if (k == 0) return {};
  PairCollector pairs(k);
  std::vector<size_t> rank(k, 0);
  std::vector<uint32_t> next(k);  // each source's current doc, UINT32_MAX when done
  std::vector<const uint8_t*> pos(k);
  for (size_t c = 0; c < k; ++c) {
    next[c] = common[c].docs.empty() ? UINT32_MAX : common[c].docs[0];
    pos[c] = common[c].positions;
  }
  // One document at a time: its common tokens go into `slot` (position ->
  // common index + 1), then each token looks at the next position.
  std::vector<uint8_t> slot(1024, 0);
  std::vector<uint32_t> filled;                           // positions set in slot
  std::vector<std::pair<size_t, const uint8_t*>> in_doc;  // sources in the document, their positions
  std::vector<uint64_t> tokens;                           // the fallback's (position << 8 | common index)
  for (;;) {
    const uint32_t d = *std::min_element(next.begin(), next.end());
    if (d == UINT32_MAX) break;
    filled.clear();
    in_doc.clear();
    bool shared = false;  // two common tokens at one position (no analyzer makes them)
    for (size_t c = 0; c < k; ++c) {
      if (next[c] != d) continue;
      in_doc.emplace_back(c, pos[c]);
      uint32_t p = 0, v;
      for (uint32_t t = common[c].tfs[rank[c]]; t > 0; --t) {
        pos[c] = GetVarint(pos[c], &v);
        p += v;
        if (p + 1 >= slot.size()) slot.resize(std::max<size_t>(2 * slot.size(), p + 2), 0);
        shared |= slot[p] != 0;
        slot[p] = static_cast<uint8_t>(c + 1);
        filled.push_back(p);
      }
      ++rank[c];
      next[c] = rank[c] < common[c].docs.size() ? common[c].docs[rank[c]] : UINT32_MAX;
    }
    if (!shared) {
      for (uint32_t p : filled)
        if (slot[p + 1] != 0) pairs.Add(slot[p] - 1u, slot[p + 1] - 1u, d);
    } else {
      tokens.clear();
      for (auto [c, q] : in_doc) {
        uint32_t p = 0, v;
        for (uint32_t t = common[c].tfs[rank[c] - 1]; t > 0; --t) {
          q = GetVarint(q, &v);
          p += v;
          tokens.push_back(uint64_t{p} << 8 | c);
        }
      }
      pairs.AddAdjacent(tokens, d);
    }
    for (uint32_t p : filled) slot[p] = 0;
  }
  return pairs.Take();
}

std::vector<PairList> BuildPairsFromLog(std::span<const TextToken> tokens, std::span<const DocStart> docs,
                                        std::span<const uint8_t> common_of, size_t common_count) {
  if (common_count == 0) return {};
  PairCollector pairs(common_count);
  std::vector<uint64_t> out_of_order;  // a document whose positions do not increase
  for (size_t i = 0; i < docs.size(); ++i) {
    const uint32_t d = docs[i].doc;
    const size_t begin = docs[i].first, end = i + 1 < docs.size() ? docs[i + 1].first : tokens.size();
    uint32_t prev = 0;  // the previous token's common index + 1, or 0
    bool in_order = true;
    for (size_t t = begin; t < end; ++t) {
      if (t > begin && tokens[t].position <= tokens[t - 1].position) {
        in_order = false;
        break;
      }
      const uint32_t c = common_of[tokens[t].term];
      if (c != 0 && prev != 0 && tokens[t].position == tokens[t - 1].position + 1) pairs.Add(prev - 1, c - 1, d);
      prev = c;
    }
    if (in_order) continue;
    // Pairs found before the disorder are real and are not added twice.
    out_of_order.clear();
    for (size_t t = begin; t < end; ++t)
      if (const uint32_t c = common_of[tokens[t].term]; c != 0) out_of_order.push_back(uint64_t{tokens[t].position} << 8 | (c - 1));
    pairs.AddAdjacent(out_of_order, d);
  }
  return pairs.Take();
}

namespace {

// The section into `out`, which starts at file offset `base` (a multiple of
// 32): pair i's bitmap is written by append_bitmap(i, out).
template <typename Pair, typename AppendBitmap>
uint64_t AppendSection(std::string& out, uint64_t base, std::span<const uint32_t> common, std::span<const Pair> pairs,
                       AppendBitmap&& append_bitmap) {
  auto align = [&](size_t a) {
    while ((base + out.size()) % a != 0) out.push_back('\0');
  };
  auto put32 = [&](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  align(32);
  const uint64_t start = base + out.size();
  put32(static_cast<uint32_t>(common.size()));
  put32(static_cast<uint32_t>(pairs.size()));
  for (uint32_t c : common) put32(c);
  align(8);
  const size_t entries_at = out.size();
  out.append(pairs.size() * sizeof(PairEntry), '\0');
  for (size_t i = 0; i < pairs.size(); ++i) {
    align(32);  // frozen views need 32-byte alignment
    const size_t at = out.size();
    append_bitmap(i, out);
    PairEntry e{pairs[i].first, pairs[i].second, static_cast<uint32_t>(out.size() - at), base + at};
    std::memcpy(out.data() + entries_at + i * sizeof(PairEntry), &e, sizeof e);
  }
  return start;
}

}  // namespace

uint64_t AppendPairSection(std::string& out, std::span<const uint32_t> common, std::span<const PairList> pairs) {
  // Most pairs: written directly, no bitmap built.
  return AppendSection(out, 0, common, pairs, [&](size_t i, std::string& o) { AppendFrozenBitmap(o, pairs[i].docs); });
}

uint64_t AppendPairSection(std::string& out, uint64_t base, std::span<const uint32_t> common,
                           std::span<const PairBitmap> pairs) {
  return AppendSection(out, base, common, pairs, [&](size_t i, std::string& o) {
    const size_t at = o.size();
    o.resize(at + roaring_bitmap_frozen_size_in_bytes(pairs[i].docs));
    roaring_bitmap_frozen_serialize(pairs[i].docs, o.data() + at);
  });
}

bool PairTable::Parse(const char* base, uint64_t size, uint64_t off, uint32_t term_count) {
  auto in = [&](uint64_t o, uint64_t bytes) { return o <= size && bytes <= size - o; };
  if (off % 32 != 0 || !in(off, 8)) return false;
  std::memcpy(&common_count_, base + off, 4);
  std::memcpy(&pair_count_, base + off + 4, 4);
  if (common_count_ > kMaxCommonTerms || !in(off + 8, 4 * uint64_t{common_count_})) return false;
  common_ = reinterpret_cast<const uint32_t*>(base + off + 8);
  for (uint32_t c = 0; c < common_count_; ++c)
    if (common_[c] >= term_count || (c > 0 && common_[c] <= common_[c - 1])) return false;
  const uint64_t entries = (off + 8 + 4 * uint64_t{common_count_} + 7) / 8 * 8;
  if (pair_count_ > common_count_ * common_count_ || !in(entries, sizeof(PairEntry) * uint64_t{pair_count_})) return false;
  entries_ = reinterpret_cast<const PairEntry*>(base + entries);
  for (uint32_t i = 0; i < pair_count_; ++i) {
    const PairEntry& e = entries_[i];
    if (e.first >= common_count_ || e.second >= common_count_ || e.bitmap_off % 32 != 0 || !in(e.bitmap_off, e.bitmap_len))
      return false;
    if (i > 0 && std::pair(e.first, e.second) <= std::pair(entries_[i - 1].first, entries_[i - 1].second)) return false;
  }
  base_ = base;
  return true;
}

PairTable PairTable::Rebased(const char* base) const {
  PairTable t = *this;
  if (base_ == nullptr) return t;
  t.base_ = base;
  t.common_ = reinterpret_cast<const uint32_t*>(base + (reinterpret_cast<const char*>(common_) - base_));
  t.entries_ = reinterpret_cast<const PairEntry*>(base + (reinterpret_cast<const char*>(entries_) - base_));
  return t;
}

int PairTable::Common(uint32_t term) const {
  const uint32_t* end = common_ + common_count_;
  const uint32_t* it = std::lower_bound(common_, end, term);
  return it != end && *it == term ? static_cast<int>(it - common_) : -1;
}

bool PairTable::Find(uint32_t i, uint32_t j, const roaring_bitmap_t** docs) const {
  const int a = Common(i), b = Common(j);
  if (a < 0 || b < 0) return false;
  *docs = nullptr;
  const PairEntry* end = entries_ + pair_count_;
  const PairEntry* it = std::lower_bound(entries_, end, std::pair(a, b), [](const PairEntry& e, const std::pair<int, int>& k) {
    return std::pair<int, int>(e.first, e.second) < k;
  });
  if (it != end && it->first == a && it->second == b) *docs = roaring_bitmap_frozen_view(base_ + it->bitmap_off, it->bitmap_len);
  return true;
}

}  // namespace corvid::postings
