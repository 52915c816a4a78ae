// BM25 as API.md defines it, and the norms and bounds every scorer shares.
// Every path computes a score through Bm25WithNorm with a norm from
// LengthNorm (directly or memoized by FieldNorms), so scores are
// bit-identical whichever strategy runs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "postings/segment.h"
#include "postings/snapshot.h"

namespace corvid::postings::search {

constexpr double kK1 = 1.2;
constexpr double kB = 0.75;

// k1 * (1 - b + b * len / avglen): the part of BM25 that depends on the
// document (its field length) and not on the term.
inline double LengthNorm(uint32_t len, double avglen) { return kK1 * (1 - kB + kB * len / avglen); }

// BM25 of one term given the document's LengthNorm. Every path computes a
// score through here, with the norm from LengthNorm directly or memoized
// (FieldNorms), so scores are bit-identical whichever path runs.
inline double Bm25WithNorm(double idf, uint32_t tf, double norm) { return idf * tf / (tf + norm); }

inline double Bm25(double idf, uint32_t tf, uint32_t len, double avglen) {
  return Bm25WithNorm(idf, tf, LengthNorm(len, avglen));
}

// A text field's average length (over live documents, at query time) and
// its LengthNorm memoized for lengths below kMemoLengths: a query that
// scores many postings of the field divides once per distinct length, not
// once per posting. Single-threaded. The memo is taken from the thread's
// pool and given back: the next search of the same field in the same
// snapshot (the same average) finds its norms computed, and no search
// allocates or clears 8 KB per field.
class FieldNorms {
 public:
  static constexpr uint32_t kMemoLengths = 1024;
  explicit FieldNorms(double avglen) : memo_(TakeMemo(avglen)) {}
  ~FieldNorms() {
    if (pool.size() < kPoolSize) pool.push_back(std::move(memo_));
  }
  FieldNorms(const FieldNorms&) = delete;
  FieldNorms& operator=(const FieldNorms&) = delete;
  double avglen() const { return memo_->avglen; }
  double operator()(uint32_t len) {
    if (len >= kMemoLengths) return LengthNorm(len, memo_->avglen);
    double& n = memo_->norms[len];
    if (n < 0) n = LengthNorm(len, memo_->avglen);  // a norm is >= k1 * (1 - b) > 0
    return n;
  }

 private:
  struct Memo {
    double avglen;
    double norms[kMemoLengths];  // -1: not computed yet
  };
  // Enough for every field a search has in use at once (its own norms and
  // those of its segments' pieces), over a few fields.
  static constexpr size_t kPoolSize = 16;
  static inline thread_local std::vector<std::unique_ptr<Memo>> pool;

  // A memo of `avglen`'s norms: the pool's own if it has one (compared
  // bit for bit; a norm depends on nothing else, so any field with that
  // average may share it), else the last one given back, or a new one,
  // cleared for it.
  static std::unique_ptr<Memo> TakeMemo(double avglen) {
    if (pool.capacity() < kPoolSize) pool.reserve(kPoolSize);  // the destructor's push_back cannot throw
    const auto same = std::find_if(pool.begin(), pool.end(), [avglen](const std::unique_ptr<Memo>& m) {
      return std::memcmp(&m->avglen, &avglen, sizeof avglen) == 0;
    });
    const bool computed = same != pool.end();
    if (computed) std::iter_swap(same, pool.end() - 1);
    std::unique_ptr<Memo> m;
    if (pool.empty()) {
      m = std::make_unique<Memo>();
    } else {
      m = std::move(pool.back());
      pool.pop_back();
    }
    if (!computed) {
      m->avglen = avglen;
      std::fill_n(m->norms, kMemoLengths, -1.0);
    }
    return m;
  }

  std::unique_ptr<Memo> memo_;
};

// One FieldNorms per text field of the snapshot, made at first use.
class Norms {
 public:
  explicit Norms(const Snapshot& snap) : snap_(snap), fields_(snap.sum_len.size()) {}
  // Inline where the norms exist already: scoring loops ask per list.
  FieldNorms& field(uint32_t f) { return fields_[f] ? *fields_[f] : Make(f); }

 private:
  [[gnu::noinline]] FieldNorms& Make(uint32_t f) {
    fields_[f] = std::make_unique<FieldNorms>(static_cast<double>(snap_.sum_len[f]) / snap_.with_tokens[f]);
    return *fields_[f];
  }
  const Snapshot& snap_;
  std::vector<std::unique_ptr<FieldNorms>> fields_;
};

// An upper bound of weight * Bm25 over postings whose tf is at most `tf`
// and length at least `len` (Bm25 grows with tf, shrinks with length),
// nudged up so that it is never below a rounded actual score.
inline double ScoreBound(double weight, double idf, uint32_t tf, uint32_t len, double avglen) {
  return weight * Bm25(idf, tf, len, avglen) * (1 + 1e-9) + 1e-300;
}

// ScoreBound over a block of postings: its largest tf, its shortest length.
inline double BlockBound(double weight, double idf, const BlockMax& bm, double avglen) {
  const uint32_t tf = bm.max_tf, len = bm.min_len;  // copies: BlockMax is packed, unaligned in the file
  return ScoreBound(weight, idf, tf, len, avglen);
}

}  // namespace corvid::postings::search
