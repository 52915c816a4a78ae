// DocChange: one entry of a batch that the indexing engine hands to an index
// kind (map/reduce, search). Views point into memory owned by the engine for
// the duration of the call.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace corvid {

struct DocChange {
  uint64_t etag = 0;
  std::string_view id;
  bool deleted = false;   // a tombstone: retract what the document contributed
  std::string_view json;  // the document's JSON text (empty when deleted)
};

// A document the index could not process; it is skipped, indexing goes on.
struct IndexError {
  uint64_t etag = 0;
  std::string id;
  std::string message;
};

// Called by an index's ApplyBatch with the batch's errors just before the
// batch's durable commit (not called for a batch without errors): the
// engine logs them there, so that a crash between the two re-runs the
// batch rather than losing its errors.
using BeforeCommit = std::function<void(std::span<const IndexError>)>;

}  // namespace corvid
