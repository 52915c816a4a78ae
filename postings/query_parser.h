// The query language of API.md ("Search"): Lucene classic syntax parsed
// into a tree of boolean clauses and leaves. Field names and analysis are
// resolved later, by the searcher, against a definition.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "postings/search_index.h"

namespace corvid::postings {

enum class Occur { kMust, kShould, kMustNot };

struct QueryNode {
  enum class Kind { kBool, kTerm, kPhrase, kPrefix, kWildcard, kFuzzy, kRange, kMatchAll };
  Kind kind = Kind::kTerm;
  // kBool: Lucene's BooleanQuery. With any kMust clause the kShould ones only
  // add to the score; without, at least one kShould must match; with only
  // kMustNot clauses every document but theirs matches.
  std::vector<std::pair<Occur, std::unique_ptr<QueryNode>>> clauses;
  std::string field;     // "" = every text field (leaves only)
  std::string text;      // term, phrase text, prefix (without '*'), fuzzy word, wildcard pattern
                         // ('*' and '?' wildcards, '\\' escaping the next character)
  uint32_t slop = 0;     // kPhrase
  uint32_t edits = 0;    // kFuzzy: 0..2
  std::string lo, hi;    // kRange; an open end is empty with *_open set
  bool lo_open = false, hi_open = false, lo_incl = true, hi_incl = true;
  double boost = 1.0;    // multiplies the score of everything below
  size_t offset = 0;     // byte offset in the query text (for error messages)
};

// Parses `q`. Empty, "*" and "*:*" give kMatchAll. Errors: InvalidArgumentAt
// ("... at offset N", Status::offset N: the offending character's byte).
Result<std::unique_ptr<QueryNode>> ParseQuery(std::string_view q, DefaultOperator op);

// A compact, deterministic rendering for tests: +a -b c "x y"~1 f:[1 TO *} p* w~2 (…)^2
std::string ToDebugString(const QueryNode& n);

}  // namespace corvid::postings
