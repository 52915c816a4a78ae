// The answer's hits as JSON: id, score, stored fields (from the segment
// when it stores every path asked for, else from the document), highlights
// and the sort key searchAfter takes.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "postings/search/query.h"
#include "postings/search/sort.h"
#include "postings/search_index.h"
#include "postings/snapshot.h"

namespace corvid::postings::search {

// Writes hits[req.offset, top) into `out` as a JSON array; TooLarge past
// req.max_response_bytes.
Status RenderHits(const Snapshot& snap, const SearchRequest& req, const std::vector<Hit>& hits, size_t top,
                  const std::vector<SortKey>& sort, const std::vector<std::string>& highlight, const CNode& root,
                  std::string& out);

}  // namespace corvid::postings::search
