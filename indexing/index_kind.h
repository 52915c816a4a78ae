// A compiled index definition (kinds.cc): its type, collection, the fields
// it reads, and how to open its state as an IndexKind
// (common/index_kind.h, which MapReduceIndex and SearchIndex implement).
// Internal to indexing/.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/doc_change.h"
#include "common/index_kind.h"
#include "common/state_snapshot.h"
#include "common/status.h"
#include "common/verify_report.h"
#include "indexing/index_engine.h"

namespace corvid::indexing {

// The interface each kind implements itself (common/index_kind.h).
using corvid::IndexKind;

// A compiled definition, ready to open its state.
struct CompiledDefinition {
  IndexType type = IndexType::kSearch;
  std::string collection;
  // The top-level document fields the index reads, sorted (empty: whole
  // documents); the worker asks the store for those only.
  std::vector<std::string> read_fields;
  // Opens (or creates) the state in `dir`.
  std::function<Result<std::shared_ptr<IndexKind>>(const std::string& dir)> open;
  // Checks the state in `dir` without opening it for writing (`corvid verify`).
  std::function<Status(const std::string& dir, const std::string& label, VerifyReport& report)> verify;
};

// Validates and compiles a definition of any kind (dispatching on "type").
Result<CompiledDefinition> CompileDefinition(std::string_view definition_json);

}  // namespace corvid::indexing
