// IndexKind: the lifecycle every index kind implements (map/reduce in
// mapreduce/, search in postings/), so that the engine's worker drives
// each the same way: apply a batch of changes durably, clear, report its
// size, hand over its files for a backup. The kinds know nothing of the
// engine; indexing/kinds.cc compiles definitions into them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/doc_change.h"
#include "common/state_snapshot.h"
#include "common/status.h"

namespace corvid {

class IndexKind {
 public:
  virtual ~IndexKind() = default;
  // The etag through which changes have been durably applied (0: none);
  // the worker resumes after it.
  virtual uint64_t LastAppliedEtag() const = 0;
  // Applies `batch` (ascending etag, the index's collection only) in one
  // durable commit that also records `through_etag` (>= the batch's last
  // etag) as LastAppliedEtag(). A document that fails to index is skipped
  // (or its bad values left out) and reported in `errors`; that is not a
  // failure of the batch. Replaying a batch is harmless: each document's
  // previous entries are retracted before its new ones are added. On
  // error nothing of the batch is visible.
  virtual Status ApplyBatch(std::span<const DocChange> batch, uint64_t through_etag,
                            std::vector<IndexError>& errors) = 0;
  // The worker has applied every change up to the collection's last etag
  // it saw: memory kept only to speed up the next batch can go.
  virtual void Idle() {}
  // The hook ApplyBatch calls with the batch's errors before it commits
  // (common/doc_change.h). Set before the first ApplyBatch.
  virtual void SetBeforeCommit(BeforeCommit hook) = 0;
  // Drops every entry; LastAppliedEtag() becomes 0.
  virtual Status Clear() = 0;
  // What was wrong with the state's files when they were opened (a bad
  // checksum, a truncated file), if anything: the state then started over
  // from etag 0. Empty for a sound, new or outdated state.
  virtual std::string DamageFoundAtOpen() const = 0;
  // What /admin/indexes reports as "entries": reduce rows, live documents.
  virtual uint64_t Entries() const = 0;
  virtual uint64_t DiskBytes() const = 0;
  // Memory the kind holds beyond the OS page cache.
  virtual uint64_t MemoryBytes() const = 0;
  // The state's files as one consistent state, for a backup.
  virtual Result<StateSnapshot> SnapshotFiles() const = 0;
};

}  // namespace corvid
