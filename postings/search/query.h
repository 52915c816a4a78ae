// The compiled query tree: what compiler.cc makes of a parsed query for
// one snapshot (fields resolved, words analyzed, expansions looked up in
// every segment's dictionary, idf computed over live documents), and what
// matching (match.h), the scorers and highlighting read.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "postings/query_parser.h"
#include "postings/segment.h"

namespace corvid::postings::search {

inline Status Bad(const std::string& msg) { return Status::InvalidArgument(msg); }
// About the query's byte `offset` (Status::offset, the answer's error.offset).
inline Status BadAt(std::string_view what, size_t offset) { return Status::InvalidArgumentAt(what, offset); }

// One alternative of a leaf in one text field: a term, a phrase, or an
// expansion (`any`: the dictionary terms a prefix or fuzzy word matched,
// each scored where it occurs; one Alt for all of them, so a prefix that
// expands to thousands of terms costs a few allocations, not thousands).
struct Alt {
  uint32_t field = 0;
  bool any = false;                // an expansion: matches where any of `terms` occurs
  std::vector<std::string> terms;  // in query order; one for a term; distinct, bytewise ascending when `any`
  std::vector<uint32_t> rel;       // query positions, relative to the first (empty when `any`)
  uint32_t slop = 0;
  // The distinct terms, when `terms` repeats one; empty otherwise (then
  // the score terms are `terms`).
  std::vector<std::string> score_terms;
  std::vector<double> idf;  // per score term
  double weight = 1.0;      // field boost * query boosts
  std::vector<int64_t> seg_terms;        // [segment * terms.size() + i]: dictionary index of terms[i], or -1
  std::vector<int64_t> seg_score_terms;  // likewise for score_terms (empty when it is)

  const std::vector<std::string>& ScoreTerms() const { return score_terms.empty() ? terms : score_terms; }
  // The dictionary indexes of `terms` in segment k.
  std::span<const int64_t> SegTerms(size_t k) const { return {seg_terms.data() + k * terms.size(), terms.size()}; }
  int64_t SegTerm(size_t k, size_t i) const { return SegTerms(k)[i]; }
  int64_t SegScoreTerm(size_t k, size_t i) const {
    return score_terms.empty() ? SegTerm(k, i) : seg_score_terms[k * score_terms.size() + i];
  }
};

struct CNode {
  enum class Kind { kBool, kLeaf, kNumRange, kTermRange, kAll, kNone, kDropped };
  Kind kind = Kind::kNone;
  int id = 0;
  std::vector<std::pair<Occur, std::unique_ptr<CNode>>> clauses;
  std::vector<Alt> alts;
  uint32_t slot = 0;  // numeric slot or text field
  Number lo{-HUGE_VAL, 0}, hi{HUGE_VAL, 0};
  bool lo_incl = true, hi_incl = true;
  std::string slo, shi;
  bool lo_open = true, hi_open = true;
};

}  // namespace corvid::postings::search
