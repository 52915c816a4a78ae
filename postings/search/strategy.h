// The scoring strategies, one file each, and the planner that picks one
// for a query (planner.cc). Every strategy offers a segment's matches to
// a TopK with the scores the exhaustive scorer (exhaustive_scorer.cc)
// gives them, bit for bit (each sums a document's contributions in Score's
// order): the others only skip documents that cannot rank.
//
//   kExhaustive   Score: every match scored in full (field sorts, nested
//                 booleans, phrases; the reference the others are tested
//                 against, tests/postings/strategy_test.cc)
//   kLeafTopK     ScoreLeafTopK: one leaf whose light terms (a stop word)
//                 need scoring only where the heavy ones nearly rank
//   kDisjunction  DisjunctionSegment: a flat OR of at most kMaxScoreTerms
//                 terms: MaxScore with block-max bounds (max_score.cc),
//                 first narrowed by the terms a threshold makes required
//   kConjunction  ConjunctionSegment: an AND of single terms: block-max
//                 windows, or by rank when the matches are few
//   kAccumulate   AccumulateSegment: a flat OR of many terms (expansions):
//                 term-at-a-time into a dense accumulator
#pragma once

#include <roaring/roaring.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "postings/search/bm25.h"
#include "postings/search/match.h"
#include "postings/search/query.h"
#include "postings/search/top_k.h"
#include "postings/snapshot.h"

namespace corvid::postings::search {

// Flat disjunctions of more terms than this are scored term-at-a-time.
constexpr size_t kMaxScoreTerms = 16;

// One scoring term of a flat disjunction: term i of an alternative (0 but
// in an expansion).
struct FlatTerm {
  const Alt* alt;
  uint32_t i;
  int64_t SegTerm(size_t k) const { return alt->SegScoreTerm(k, i); }
  double idf() const { return alt->idf[i]; }
};

enum class Strategy { kExhaustive, kLeafTopK, kDisjunction, kConjunction, kAccumulate };

const char* StrategyName(Strategy s);

// What the planner chose for a query, with the terms its strategy reads.
struct Plan {
  Strategy strategy = Strategy::kExhaustive;
  std::vector<FlatTerm> flat;     // kDisjunction, kAccumulate: the terms, in Score's order
  std::vector<const Alt*> conj;   // kConjunction: the scoring alternatives, in Score's order
  bool flat_has_not = false;      // kDisjunction, kAccumulate: the root has prohibited clauses
};

// The strategy for ranking `root`'s matches by score (`by_score`; else
// always kExhaustive, which also computes what field sorts need).
// kLeafTopK may decline a segment (ScoreLeafTopK returns false): the
// caller then scores it exhaustively.
Plan PlanSearch(const CNode& root, bool by_score);

// The terms of a flat disjunction (planner.cc).
bool FlatTerms(const CNode& root, std::vector<FlatTerm>& out);
// The scoring alternatives of a conjunction of single terms (planner.cc).
bool ConjunctionTerms(const CNode& root, std::vector<const Alt*>& out);

// kExhaustive: adds the BM25 contributions of `n` to scores[] (docs[]: the
// segment's sorted final matches; anc: where n and its ancestors match).
void Score(const CNode& n, const roaring_bitmap_t* anc, size_t k, Norms& norms, SegEval& ev,
           const std::vector<uint32_t>& docs, std::vector<double>& scores);

// kLeafTopK (leaf_top_k.cc): false, having offered nothing, when it does not apply.
bool ScoreLeafTopK(const CNode& leaf, size_t k, Norms& norms, SegEval& ev, const roaring_bitmap_t* final_bm,
                   const std::vector<uint32_t>& docs, size_t want, TopK& top);

// MaxScore over a flat disjunction's lists (max_score.cc); `final_bm`, if
// not null: the only documents that count.
void MaxScoreSegment(const std::vector<FlatTerm>& flat, size_t k, const Snapshot& snap, Norms& norms,
                     const roaring_bitmap_t* final_bm, TopK& top);

// kDisjunction (disjunction.cc); `check`, if not null: the only documents that count.
void DisjunctionSegment(const std::vector<FlatTerm>& flat, size_t k, const Snapshot& snap, Norms& norms,
                        const roaring_bitmap_t* check, TopK& top);

// kConjunction (conjunction.cc) over the segment's final matches.
void ConjunctionSegment(const std::vector<const Alt*>& alts, size_t k, const Snapshot& snap, Norms& norms,
                        const roaring_bitmap_t* final_bm, TopK& top);

// kAccumulate (accumulate.cc): offers the matches that count and returns
// their number (`drop`: documents that do not count; `keep`, if not null:
// the only ones that do).
uint64_t AccumulateSegment(const std::vector<FlatTerm>& flat, size_t k, const Snapshot& snap, Norms& norms,
                           const roaring_bitmap_t* keep, std::span<const roaring_bitmap_t* const> drop, TopK& top);

// The number of documents of segment k that `flat` reaches, when counting
// them in a dense bitset pays (accumulate.cc).
std::optional<uint64_t> CountFlatMatches(const std::vector<FlatTerm>& flat, size_t k, const Segment& seg);

}  // namespace corvid::postings::search
