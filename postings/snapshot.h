// The reader's view of an index: an immutable, ref-counted list of
// segments with their deleted-docs bitmaps and the BM25 statistics over
// live documents. The index worker builds a new Snapshot per batch or
// merge and publishes it; searches hold a shared_ptr for their duration.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "postings/definition.h"
#include "postings/segment.h"

namespace corvid::postings {

struct SegmentState {
  uint64_t id = 0;
  std::shared_ptr<const Segment> segment;
  // Deleted doc numbers; never null. Immutable once in a published snapshot
  // (the worker copies it to add deletes).
  std::shared_ptr<const roaring_bitmap_t> deleted;
  uint64_t deleted_count = 0;
  std::vector<uint64_t> live_sum_len;     // per text field, over live docs
  std::vector<uint64_t> live_with_tokens; // per text field: live docs with >= 1 token
  uint64_t live() const { return segment->doc_count() - deleted_count; }
};

struct Snapshot {
  std::shared_ptr<const SearchDefinitionImpl> def;
  std::vector<SegmentState> segments;
  uint64_t etag = 0;
  uint64_t live_docs = 0;
  std::vector<uint64_t> sum_len;      // per text field, over all segments' live docs
  std::vector<uint64_t> with_tokens;  // per text field
};

struct SearchWalk;  // walks.h

// Runs one search over `snap` (searcher.cc). Thread-safe. `walk` (if
// given) says whether `snap` is a walk's pinned snapshot and gets the
// answer's last position (walks.h).
Result<SearchResult> RunSearch(const Snapshot& snap, const SearchRequest& request, SearchWalk* walk = nullptr);

// How prefix and fuzzy query words are normalized before they are compared
// with a field's terms: a `keyword` field takes the text as is; any other
// field takes analyzers::NormalizeText of it, whole (NFKC_Casefold, accents
// folded for a `folding` field; not segmented, never stemmed: "c++*" looks
// for terms starting "c++", as Lucene would). Used for prefix and fuzzy
// words and text range bounds.
std::string NormalizeMultiTermText(const FieldDef& field, std::string_view text);


// For tests (search_index.cc). Blocks until `index`'s merge thread finds
// nothing left to merge (merges run in the background after each batch).
// `index` must come from SearchIndex::Open.
void WaitForMerges(SearchIndex& index);
// For tests: the snapshot searches of `index` (from SearchIndex::Open) read now.
std::shared_ptr<const Snapshot> CurrentSnapshot(const SearchIndex& index);
// When set, every merge calls `hook` on its merge thread after writing the
// merged segment and before committing it, so a test can apply batches
// while a merge is in flight. Empty: none. Process-wide.
void SetMergeCommitHookForTesting(std::function<void()> hook);

}  // namespace corvid::postings
