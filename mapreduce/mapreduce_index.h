// The map/reduce index kind: a compiled definition (map expressions, group
// key, reducers) and the incrementally maintained state — per document the
// entries it emitted, per group key the aggregate, per key and min/max
// reducer an ordered multiset — in the index's own LMDB environment.
//
// Thread safety: ApplyBatch/Clear are called by one thread at a time (the
// index worker). Query and the accessors may run concurrently with them;
// they read an LMDB snapshot and see only whole batches.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/doc_change.h"
#include "common/index_kind.h"
#include "common/state_snapshot.h"
#include "common/status.h"
#include "common/verify_report.h"

namespace corvid::mapreduce {

// A validated, compiled definition:
//   {"type": "mapreduce", "collection": "...", "map": {name: expr, ...},
//    "groupBy": [map names], "reduce": {name: "count()|sum(x)|min(x)|max(x)|avg(x)"}}
// Expressions (API.md): dotted field paths, literals, + - * /, comparisons,
// substr, lower, upper, len, concat, coalesce, year, month, day, date_trunc,
// if, unwind. Reducer arguments are expressions over map names.
class Definition {
 public:
  // Errors are InvalidArgument with a message naming the field and, for an
  // expression, the byte offset: "map.month: unknown function 'substrr' at offset 0".
  static Result<std::shared_ptr<const Definition>> Compile(std::string_view definition_json);
  virtual ~Definition() = default;

  virtual const std::string& collection() const = 0;
  // A stable fingerprint of the definition's meaning (used to detect that
  // on-disk state belongs to a different definition).
  virtual uint64_t Fingerprint() const = 0;
  // The top-level document fields its expressions read, sorted: a map
  // needs nothing else of a document (the store then reads a large
  // document by those fields only).
  virtual const std::vector<std::string>& ReadFields() const = 0;
};

struct QueryResult {
  std::string rows_json;       // a JSON array of row objects, in the requested order
  uint64_t total = 0;          // rows after filters, before limit/offset
  uint64_t snapshot_etag = 0;  // LastAppliedEtag() of the snapshot the rows came from
};

class MapReduceIndex : public IndexKind {
 public:
  // Opens or creates the state in directory `dir`. State written for a
  // different definition (fingerprint mismatch) or in an unknown format is
  // wiped, so the index rebuilds from etag 0.
  static Result<std::unique_ptr<MapReduceIndex>> Open(const std::string& dir,
                                                      std::shared_ptr<const Definition> definition);
  // `corvid verify`: walks every page of the state in `dir` without
  // changing it; findings go to `report`, each line starting with `label`.
  static Status Verify(const std::string& dir, const Definition& definition, const std::string& label,
                       VerifyReport& report);
  virtual ~MapReduceIndex() = default;

  // IndexKind (common/index_kind.h): ApplyBatch maps each document (bad
  // JSON, a failing expression or a non-numeric reducer input is an
  // IndexError); Clear drops every row; DamageFoundAtOpen says why Open
  // wiped the state (LMDB refused the file, or it is truncated);
  // SnapshotFiles copies the environment, compacted, into an unlinked
  // temporary file (one read snapshot, its etag included).

  // Number of reduce rows (group keys with at least one entry).
  virtual uint64_t RowCount() const = 0;
  uint64_t Entries() const override { return RowCount(); }
  uint64_t MemoryBytes() const override { return 0; }  // the state lives in the OS page cache (LMDB)

  // Answers GET /indexes/{name}/results. `params` are the decoded query
  // parameters; minEtag and waitMs are ignored here (the engine handles
  // them). Supported: <group>=v, <group>.gt|gte|lt|lte=v, sort=[-]name[,..],
  // limit, offset, groupLevel=N. Unknown parameters or fields → InvalidArgument.
  // Rows that would take more than `max_response_bytes` → TooLarge (the
  // answer stops growing there).
  virtual Result<QueryResult> Query(const std::vector<std::pair<std::string, std::string>>& params,
                                    size_t max_response_bytes = SIZE_MAX) const = 0;
};

}  // namespace corvid::mapreduce
