// The search index kind: a compiled search definition and the inverted
// index it maintains — per field and term a roaring bitmap of document
// numbers with term frequencies and positions, per document the field
// lengths for BM25, number/date columns for ranges and sorting, keyword
// columns for facets — and the query engine over it (API.md, "Search").
//
// Thread safety: ApplyBatch/Clear are called by one thread at a time (the
// index worker). Search and the accessors may run concurrently with them;
// a search reads a ref-counted snapshot and sees only whole batches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/doc_change.h"
#include "common/index_kind.h"
#include "common/state_snapshot.h"
#include "common/status.h"
#include "common/verify_report.h"

namespace corvid::postings {

// A validated search definition (API.md "Search index"):
//   {"type": "search", "collection": "...",
//    "fields": {path: {"analyzer": name, "boost": x, "facet": bool} | {"type": "number"|"date"}},
//    "store": [paths] | "*"}
class SearchDefinition {
 public:
  // Errors are InvalidArgument naming the field: "fields.body.analyzer: unknown analyzer 'englsh'".
  static Result<std::shared_ptr<const SearchDefinition>> Compile(std::string_view definition_json);
  virtual ~SearchDefinition() = default;
  virtual const std::string& collection() const = 0;
  virtual uint64_t Fingerprint() const = 0;
  // The top-level document fields it indexes or stores, sorted; empty when
  // it needs whole documents ("store": "*").
  virtual const std::vector<std::string>& ReadFields() const = 0;
};

enum class DefaultOperator { kOr, kAnd };

// One value of a searchAfter key (API.md "Deep paging"): an element of the
// "sort" array a hit carries, as the client sent it back.
struct SortValue {
  enum class Type { kNull, kNumber, kString };
  Type type = Type::kNull;
  // kNumber: the number's JSON text (an integer is read exactly to 64
  // bits, anything else as the nearest double); kString: the string.
  std::string text;
};

struct SearchRequest {
  std::string q;       // Lucene classic syntax; empty or "*" matches every document
  std::string filter;  // same syntax; restricts matches without scoring
  size_t limit = 10;
  size_t offset = 0;
  std::string sort;    // "", or comma-separated [-]field / _score
  std::optional<std::vector<std::string>> fields;  // stored fields to return; nullopt: the definition's "store"
  std::vector<std::string> highlight;              // text fields to highlight
  std::vector<std::string> facets;                 // keyword fields to count values of
  DefaultOperator op = DefaultOperator::kOr;
  // Deep paging: the "sort" key of the previous page's last hit. The answer
  // holds the hits strictly after it in the sort order (its final value is
  // the id, which breaks ties); `total` still counts every match. It must
  // have one value per sort key (the score for the default sort), then the
  // id, each of its key's type (a number, or null for a missing field
  // value; a string for a keyword field and the id), and `offset` must be 0:
  // otherwise InvalidParameter("searchAfter", ...).
  std::optional<std::vector<SortValue>> search_after;
  // Returns a document's current JSON from the store (for stored fields
  // and highlighting), or nullopt if it is gone.
  std::function<std::optional<std::string>(std::string_view id)> fetch_document;
  // Hits that would take more than this → TooLarge: the answer stops
  // growing there rather than be built whole (--max-response-bytes).
  size_t max_response_bytes = SIZE_MAX;
};

struct SearchResult {
  // JSON array: [{"id","score","fields"?,"highlights"?,"sort"}, ...]; "sort"
  // is the hit's sort key, as search_after takes it: the value of each sort
  // key (the score, a number or date field's number, a keyword field's
  // string, null where the document has no value), then the id.
  std::string hits_json;
  std::string facets_json;  // JSON object {"field": {"value": count}} or empty if no facets asked
  uint64_t total = 0;       // exact number of matching documents
  uint64_t snapshot_etag = 0;
};

class SearchIndex : public IndexKind {
 public:
  // Opens or creates the index in `dir`. Files written for another
  // definition, in an unknown format, or failing their checksum are
  // discarded: the index rebuilds from etag 0 rather than crash.
  static Result<std::unique_ptr<SearchIndex>> Open(const std::string& dir,
                                                   std::shared_ptr<const SearchDefinition> definition);
  // `corvid verify`: checks the MANIFEST and every segment's checksum in
  // `dir` without changing anything; findings go to `report`, each line
  // starting with `label`.
  static Status Verify(const std::string& dir, const SearchDefinition& definition, const std::string& label,
                       VerifyReport& report);
  virtual ~SearchIndex() = default;

  // IndexKind (common/index_kind.h): Idle gives back the builder's
  // buffers; DamageFoundAtOpen says why Open started over although the
  // directory held an index (a file failed its checksum, is truncated or
  // missing); SnapshotFiles names the current snapshot's manifest and
  // segments.

  // Live documents (IndexKind's entries).
  virtual uint64_t LiveDocuments() const = 0;
  uint64_t Entries() const override { return LiveDocuments(); }

  // Syntax errors → InvalidArgument whose message holds "at offset N";
  // unknown fields in sort/facets/highlight → InvalidArgument.
  virtual Result<SearchResult> Search(const SearchRequest& request) const = 0;
};

}  // namespace corvid::postings
