// Fuzzy term expansion: the terms of a segment's sorted dictionary within
// an optimal-string-alignment distance of a query word, found without
// computing the distance to every term (the full scan costs ~0.1 µs per
// term per query; see fuzzy.cc for how this avoids it).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "postings/segment.h"

namespace corvid::postings {

// Calls on_match(i) for every term index i of segment `seg`, field `field`,
// whose OSA distance to `query` is <= max_edits (0..2), in increasing i.
// The set is exactly { i : EditDistance(seg.term(field, i), query,
// max_edits) <= max_edits } (the oracle in tests/postings/fuzzy_test.cc):
// insertions, deletions,
// substitutions and adjacent transpositions over code points, decoded as
// EditDistance decodes them (malformed UTF-8 included). Thread-safe (reads
// only); allocates only O(longest term × query length) scratch.
// Cost: proportional to the dictionary entries that share a live prefix
// (one whose DP row still has a value <= max_edits) plus one galloping
// search per dead prefix — typically a few percent of the dictionary.
void ForEachFuzzyTerm(const Segment& seg, uint32_t field, std::string_view query, uint32_t max_edits,
                      const std::function<void(uint32_t)>& on_match);

}  // namespace corvid::postings
