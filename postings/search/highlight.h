// Highlights: what a query marks in a field's text and the fragments
// around the marks, as Elasticsearch's highlighters show them.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "analyzers/analyzer.h"
#include "postings/search/query.h"

namespace corvid::postings::search {

// What a query marks in a field's text (highlighting): its terms and
// expansions wherever they occur, its phrases only where they match (as
// Elasticsearch's highlighters do), from its leaves that are not negated.
struct HighlightQuery {
  std::set<std::string, std::less<>> terms;
  std::vector<const Alt*> phrases;
};

// The terms and phrases of `n`'s leaves that are not negated, by text field.
void CollectHighlight(const CNode& n, bool negated, std::map<uint32_t, HighlightQuery>& out);

// Appends to `out` the fragments of `text` (analyzed by `analyzer`) around
// what `q` marks, each mark an <em> element (at most five fragments).
void HighlightFragments(const HighlightQuery& q, const analyzers::Analyzer& analyzer, std::string_view text,
                        std::vector<std::string>& out);

}  // namespace corvid::postings::search
