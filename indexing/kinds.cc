// The index kinds the engine knows: definition dispatch on "type". Each
// kind implements IndexKind (common/index_kind.h) itself.
#include <rapidjson/document.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "indexing/index_kind.h"
#include "mapreduce/mapreduce_index.h"
#include "postings/search_index.h"
#include "storage/document_store.h"

namespace corvid::indexing {

namespace {

// The path ("fields.body.boost", "store[1]") of the first key that an
// object inside `v` holds twice, or "" if none. A definition with one is
// refused (as Elasticsearch refuses duplicate fields): which of the two
// counts would otherwise depend on the reader.
std::string DuplicateKey(const rapidjson::Value& v, const std::string& at) {
  auto join = [&](std::string_view key) { return at.empty() ? std::string(key) : at + "." + std::string(key); };
  if (v.IsObject()) {
    std::vector<std::string_view> keys;
    for (const auto& m : v.GetObject()) keys.emplace_back(m.name.GetString(), m.name.GetStringLength());
    std::sort(keys.begin(), keys.end());
    if (auto d = std::adjacent_find(keys.begin(), keys.end()); d != keys.end()) return join(*d);
    for (const auto& m : v.GetObject()) {
      std::string inner = DuplicateKey(m.value, join(std::string_view(m.name.GetString(), m.name.GetStringLength())));
      if (!inner.empty()) return inner;
    }
  } else if (v.IsArray()) {
    for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
      std::string inner = DuplicateKey(v[i], at + "[" + std::to_string(i) + "]");
      if (!inner.empty()) return inner;
    }
  }
  return "";
}

}  // namespace

Result<CompiledDefinition> CompileDefinition(std::string_view definition_json) {
  rapidjson::Document doc;
  doc.Parse(definition_json.data(), definition_json.size());
  if (doc.HasParseError() || !doc.IsObject())
    return Status::InvalidArgument("the definition must be a JSON object");
  if (std::string dup = DuplicateKey(doc, ""); !dup.empty())
    return Status::InvalidArgument(dup + ": the key appears twice in its object");
  auto type = doc.FindMember("type");
  if (type == doc.MemberEnd() || !type->value.IsString())
    return Status::InvalidArgument("type: required, one of \"mapreduce\", \"search\"");
  std::string_view t(type->value.GetString(), type->value.GetStringLength());
  CompiledDefinition out;
  if (t == "mapreduce") {
    auto def = mapreduce::Definition::Compile(definition_json);
    if (!def.ok()) return def.status();
    out.type = IndexType::kMapReduce;
    out.collection = (*def)->collection();
    out.read_fields = (*def)->ReadFields();
    out.open = [def = *def](const std::string& dir) -> Result<std::shared_ptr<IndexKind>> {
      auto index = mapreduce::MapReduceIndex::Open(dir, def);
      if (!index.ok()) return index.status();
      return std::shared_ptr<IndexKind>(std::move(*index));
    };
    out.verify = [def = *def](const std::string& dir, const std::string& label, VerifyReport& report) {
      return mapreduce::MapReduceIndex::Verify(dir, *def, label, report);
    };
  } else if (t == "search") {
    auto def = postings::SearchDefinition::Compile(definition_json);
    if (!def.ok()) return def.status();
    out.type = IndexType::kSearch;
    out.collection = (*def)->collection();
    out.read_fields = (*def)->ReadFields();
    out.open = [def = *def](const std::string& dir) -> Result<std::shared_ptr<IndexKind>> {
      auto index = postings::SearchIndex::Open(dir, def);
      if (!index.ok()) return index.status();
      return std::shared_ptr<IndexKind>(std::move(*index));
    };
    out.verify = [def = *def](const std::string& dir, const std::string& label, VerifyReport& report) {
      return postings::SearchIndex::Verify(dir, *def, label, report);
    };
  } else {
    return Status::InvalidArgument("type: unknown index type '" + std::string(t) + "' (expected \"mapreduce\" or \"search\")");
  }
  // The collection must be one a document can be written to.
  if (Status st = storage::ValidateName(out.collection, "collection: the name"); !st.ok()) return st;
  return out;
}

}  // namespace corvid::indexing
