// The compiled form of a map/reduce definition (internal to mapreduce/ and
// its tests): map expressions, the group key, reducers, unwind variables,
// and MapDocument, which turns one document's JSON into the entries it emits
// (encoded group keys plus reducer inputs) with reusable scratch memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <rapidjson/document.h>

#include "mapreduce/expression.h"
#include "mapreduce/mapreduce_index.h"

namespace corvid::mapreduce {

enum class ReducerKind : uint8_t { kCount, kSum, kMin, kMax, kAvg };

struct Reducer {
  std::string name;
  ReducerKind kind = ReducerKind::kCount;
  std::unique_ptr<Node> arg;  // null for count()
  int input = -1;             // index among numeric reducers (all but count)
};

// A reducer input of one entry: none (null, missing or skipped), or a number.
struct NumInput {
  uint8_t kind = 0;  // format::kNumNone / kNumInt / kNumDouble
  int64_t i = 0;
  double d = 0;
};

// The entries one document emits. Reused across documents.
struct MappedDoc {
  std::string keys;                // concatenated encoded group keys
  std::vector<uint32_t> key_ends;  // end offset of each entry's key in `keys`
  std::vector<NumInput> inputs;    // entries x numeric reducers
  size_t entries() const { return key_ends.size(); }
  std::string_view key(size_t e) const {
    size_t b = e == 0 ? 0 : key_ends[e - 1];
    return std::string_view(keys).substr(b, key_ends[e] - b);
  }
  void Clear() {
    keys.clear();
    key_ends.clear();
    inputs.clear();
  }
};

// Per-thread memory for MapDocument: JSON parse pools and evaluation state.
class MapScratch {
 public:
  MapScratch();
  MapScratch(const MapScratch&) = delete;
  MapScratch& operator=(const MapScratch&) = delete;

 private:
  friend class DefinitionImpl;
  using Doc = rapidjson::GenericDocument<rapidjson::UTF8<>, rapidjson::MemoryPoolAllocator<>,
                                         rapidjson::MemoryPoolAllocator<>>;
  std::unique_ptr<char[]> value_buf_;
  std::unique_ptr<char[]> stack_buf_;
  rapidjson::MemoryPoolAllocator<> value_pool_;
  rapidjson::MemoryPoolAllocator<> stack_pool_;
  EvalContext ctx_;
  std::vector<Value> map_values_;
  std::vector<Value> unwind_values_;
  std::vector<Value> unwind_sources_;
  std::vector<size_t> unwind_pos_;
};

class DefinitionImpl final : public Definition {
 public:
  static Result<std::shared_ptr<const DefinitionImpl>> CompileImpl(std::string_view definition_json);

  const std::string& collection() const override { return collection_; }
  uint64_t Fingerprint() const override { return fingerprint_; }
  const std::vector<std::string>& ReadFields() const override { return read_fields_; }

  const std::vector<std::string>& group_names() const { return group_names_; }
  const std::vector<Reducer>& reducers() const { return reducers_; }
  size_t numeric_reducers() const { return numeric_reducers_; }
  const std::string& canonical() const { return canonical_; }

  // Maps one document. Returns false, with *error set and *out empty, when
  // the document contributes nothing because it failed (invalid JSON, an
  // expression error, a group value that is an array or object, a key too
  // long). Returns true otherwise; *warning is set (else left empty) when a
  // reducer input was not a number and was left out. Entries whose group
  // key has a null or missing component are not emitted.
  bool MapDocument(std::string_view json, MapScratch& scratch, MappedDoc* out, std::string* error,
                   std::string* warning) const;

 private:
  bool MapParsed(const rapidjson::Value& doc, MapScratch& s, MappedDoc* out, std::string* error,
                 std::string* warning) const;
  bool EmitEntry(MapScratch& s, MappedDoc* out, std::string* error, std::string* warning) const;

  std::string collection_;
  uint64_t fingerprint_ = 0;
  std::string canonical_;
  std::vector<std::string> map_names_;
  std::vector<std::unique_ptr<Node>> maps_;
  std::vector<bool> map_needed_;
  std::vector<std::string> group_names_;
  std::vector<int> group_maps_;
  std::vector<Reducer> reducers_;
  size_t numeric_reducers_ = 0;
  std::vector<const Node*> unwind_args_;
  std::vector<std::string> read_fields_;  // ReadFields
};

}  // namespace corvid::mapreduce
