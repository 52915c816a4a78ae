// Facets: the counts of a keyword field's values among a search's final
// matches, and their JSON (values by count, descending).
#pragma once

#include <roaring/roaring.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "postings/snapshot.h"

namespace corvid::postings::search {

using FacetCounts = std::map<std::string, std::map<std::string, uint64_t>>;  // field -> value -> matches

// Adds the counts of segment `seg`'s final matches `final_bm` for each of `facets`.
void CountFacets(const SearchDefinitionImpl& def, const Segment& seg, const roaring_bitmap_t* final_bm,
                 const std::vector<std::string>& facets, FacetCounts& counts);

// {"field": {"value": count, ...}, ...}, values by count descending (ties
// in value order).
std::string RenderFacets(const std::vector<std::string>& facets, FacetCounts& counts);

}  // namespace corvid::postings::search
