// The index kinds the engine knows: definition dispatch on "type", and the
// adapter that lets the worker drive a map/reduce index.
#include <rapidjson/document.h>

#include "indexing/index_kind.h"
#include "mapreduce/mapreduce_index.h"
#include "postings/search_index.h"

namespace corvid::indexing {

namespace {

class MapReduceKind : public IndexKind {
 public:
  explicit MapReduceKind(std::shared_ptr<mapreduce::MapReduceIndex> index) : index_(std::move(index)) {}
  uint64_t LastAppliedEtag() const override { return index_->LastAppliedEtag(); }
  Status ApplyBatch(std::span<const DocChange> batch, uint64_t through_etag,
                    std::vector<IndexError>& errors) override {
    return index_->ApplyBatch(batch, through_etag, errors);
  }
  void SetBeforeCommit(BeforeCommit hook) override { index_->SetBeforeCommit(std::move(hook)); }
  Status Clear() override { return index_->Clear(); }
  uint64_t Entries() const override { return index_->RowCount(); }
  uint64_t DiskBytes() const override { return index_->DiskBytes(); }
  uint64_t MemoryBytes() const override { return 0; }  // state lives in the OS page cache (LMDB)
  void FillReader(IndexReader& reader) const override { reader.mapreduce = index_; }

 private:
  std::shared_ptr<mapreduce::MapReduceIndex> index_;
};

class SearchKind : public IndexKind {
 public:
  explicit SearchKind(std::shared_ptr<postings::SearchIndex> index) : index_(std::move(index)) {}
  uint64_t LastAppliedEtag() const override { return index_->LastAppliedEtag(); }
  Status ApplyBatch(std::span<const DocChange> batch, uint64_t through_etag,
                    std::vector<IndexError>& errors) override {
    return index_->ApplyBatch(batch, through_etag, errors);
  }
  void Idle() override { index_->Idle(); }
  void SetBeforeCommit(BeforeCommit hook) override { index_->SetBeforeCommit(std::move(hook)); }
  Status Clear() override { return index_->Clear(); }
  uint64_t Entries() const override { return index_->LiveDocuments(); }
  uint64_t DiskBytes() const override { return index_->DiskBytes(); }
  uint64_t MemoryBytes() const override { return index_->MemoryBytes(); }
  void FillReader(IndexReader& reader) const override { reader.search = index_; }

 private:
  std::shared_ptr<postings::SearchIndex> index_;
};

}  // namespace

Result<CompiledDefinition> CompileDefinition(std::string_view definition_json) {
  rapidjson::Document doc;
  doc.Parse(definition_json.data(), definition_json.size());
  if (doc.HasParseError() || !doc.IsObject())
    return Status::InvalidArgument("the definition must be a JSON object");
  auto type = doc.FindMember("type");
  if (type == doc.MemberEnd() || !type->value.IsString())
    return Status::InvalidArgument("type: required, one of \"mapreduce\", \"search\"");
  std::string_view t(type->value.GetString(), type->value.GetStringLength());
  if (t == "mapreduce") {
    auto def = mapreduce::Definition::Compile(definition_json);
    if (!def.ok()) return def.status();
    CompiledDefinition out;
    out.type = "mapreduce";
    out.collection = (*def)->collection();
    out.open = [def = *def](const std::string& dir) -> Result<std::unique_ptr<IndexKind>> {
      auto index = mapreduce::MapReduceIndex::Open(dir, def);
      if (!index.ok()) return index.status();
      return std::unique_ptr<IndexKind>(
          std::make_unique<MapReduceKind>(std::shared_ptr<mapreduce::MapReduceIndex>(std::move(*index))));
    };
    return out;
  }
  if (t == "search") {
    auto def = postings::SearchDefinition::Compile(definition_json);
    if (!def.ok()) return def.status();
    CompiledDefinition out;
    out.type = "search";
    out.collection = (*def)->collection();
    out.open = [def = *def](const std::string& dir) -> Result<std::unique_ptr<IndexKind>> {
      auto index = postings::SearchIndex::Open(dir, def);
      if (!index.ok()) return index.status();
      return std::unique_ptr<IndexKind>(
          std::make_unique<SearchKind>(std::shared_ptr<postings::SearchIndex>(std::move(*index))));
    };
    return out;
  }
  return Status::InvalidArgument("type: unknown index type '" + std::string(t) + "' (expected \"mapreduce\" or \"search\")");
}

}  // namespace corvid::indexing
