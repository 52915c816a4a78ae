// IndexKind: what an index kind implements so the engine's worker can drive
// it — apply a batch of changes durably, clear, and report its size. The
// adapters for map/reduce (and later search) live in indexing/; the kinds'
// own folders know nothing of the engine. Internal to indexing/.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/doc_change.h"
#include "common/state_snapshot.h"
#include "common/status.h"
#include "common/verify_report.h"
#include "indexing/index_engine.h"

namespace corvid::indexing {

class IndexKind {
 public:
  virtual ~IndexKind() = default;
  // Durable etag the state covers; the worker resumes after it.
  virtual uint64_t LastAppliedEtag() const = 0;
  // Applies the batch and records `through_etag` in the same durable commit.
  virtual Status ApplyBatch(std::span<const DocChange> batch, uint64_t through_etag,
                            std::vector<IndexError>& errors) = 0;
  // The worker has applied every change up to the collection's last etag
  // it saw: memory kept for the next batch can go.
  virtual void Idle() {}
  // The hook ApplyBatch calls with the batch's errors before it commits.
  virtual void SetBeforeCommit(BeforeCommit hook) = 0;
  virtual Status Clear() = 0;
  virtual uint64_t Entries() const = 0;
  virtual uint64_t DiskBytes() const = 0;
  virtual uint64_t MemoryBytes() const = 0;
  // The state's files as one consistent state, for a backup.
  virtual Result<StateSnapshot> SnapshotFiles() const = 0;
  // Fills the kind-specific part of a query reader.
  virtual void FillReader(IndexReader& reader) const = 0;
  // What was wrong with the state's files when they were opened (a bad
  // checksum, a truncated file), if anything: the state then started over
  // from etag 0. Empty for a sound, new or outdated state.
  virtual std::string DamageFoundAtOpen() const = 0;
};

// A compiled definition, ready to open its state.
struct CompiledDefinition {
  IndexType type = IndexType::kSearch;
  std::string collection;
  // The top-level document fields the index reads, sorted (empty: whole
  // documents); the worker asks the store for those only.
  std::vector<std::string> read_fields;
  // Opens (or creates) the state in `dir`.
  std::function<Result<std::unique_ptr<IndexKind>>(const std::string& dir)> open;
  // Checks the state in `dir` without opening it for writing (`corvid verify`).
  std::function<Status(const std::string& dir, const std::string& label, VerifyReport& report)> verify;
};

// Validates and compiles a definition of any kind (dispatching on "type").
Result<CompiledDefinition> CompileDefinition(std::string_view definition_json);

}  // namespace corvid::indexing
