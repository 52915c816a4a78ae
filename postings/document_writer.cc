// One stored document into a segment builder (document_writer.h).
#include "postings/document_writer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "common/exact_json.h"

namespace corvid::postings {
namespace {

// Hands the tokens of one text field of one document (all its values) to
// the builder as they come: a token costs a dictionary probe and a log
// entry there (SegmentBuilder), so nothing is gained by collecting them.
class BuildSink final : public analyzers::TokenSink {
 public:
  BuildSink(SegmentBuilder& b, uint32_t field, uint32_t doc) : b_(b), field_(field), doc_(doc) {}
  void OnToken(const analyzers::Token& t) override {
    const uint32_t p = base_ + t.position;
    b_.AddToken(field_, doc_, t.term, p);
    ++count_;
    next_base_ = std::max(next_base_, p + 1 + kArrayPositionGap);
  }
  void NextValue() { base_ = next_base_; }
  uint32_t count() const { return count_; }

 private:
  SegmentBuilder& b_;
  uint32_t field_, doc_;
  uint32_t base_ = 0, next_base_ = 0, count_ = 0;
};

}  // namespace

Status AddDocument(SegmentBuilder& b, const SearchDefinitionImpl& def, const DocChange& c, std::vector<IndexError>& errors) {
  // One pool per thread, reset per document (no per-document chunk
  // allocation); parsed in place in a reused copy (strings not copied).
  static thread_local std::string json;
  static thread_local char pool_buf[64 * 1024];
  static thread_local rapidjson::MemoryPoolAllocator<> pool(pool_buf, sizeof pool_buf);
  pool.Clear();
  json.assign(c.json.data(), c.json.size());
  rapidjson::Document d(&pool);
  // Stored fields keep the digits of integers beyond 64 bits (none: no cost).
  BigIntegers big;
  const rapidjson::ParseResult parsed =
      ParseInsituWithExactNumbers(d, json.data(), def.stores_in_segments() ? &big : nullptr);
  if (parsed.IsError() || !d.IsObject()) {
    errors.push_back(IndexError{c.etag, std::string(c.id), "not a JSON object; document skipped"});
    return Status::Ok();
  }
  // Stored fields are rendered once, here, as a hit returns them: a search
  // copies them from the segment instead of reading and parsing the
  // document (and shows the version the index matched).
  static thread_local rapidjson::StringBuffer stored;
  stored.Clear();
  if (def.stores_in_segments()) {
    rapidjson::Writer<rapidjson::StringBuffer> w(stored);
    WriteStoredFields(d, def.store(), def.store_split(), w, &big);
  }
  const uint32_t doc = b.AddDoc(c.id, std::string_view(stored.GetString(), stored.GetSize()));
  char numbuf[64];
  for (const FieldDef& f : def.fields()) {
    if (f.kind == FieldKind::kText) {
      BuildSink sink(b, f.slot, doc);
      Status st = Status::Ok();
      bool object_seen = false;
      ForEachValue(d, f.path, 0, [&](const rapidjson::Value& v) {
        std::string_view text;
        if (v.IsString()) {
          text = std::string_view(v.GetString(), v.GetStringLength());
        } else if (v.IsBool()) {
          text = v.GetBool() ? "true" : "false";
        } else if (v.IsInt64()) {
          text = std::string_view(numbuf, snprintf(numbuf, sizeof numbuf, "%lld", static_cast<long long>(v.GetInt64())));
        } else if (v.IsUint64()) {
          text = std::string_view(numbuf, snprintf(numbuf, sizeof numbuf, "%llu", static_cast<unsigned long long>(v.GetUint64())));
        } else if (v.IsDouble()) {
          text = std::string_view(numbuf, snprintf(numbuf, sizeof numbuf, "%.17g", v.GetDouble()));
        } else {
          object_seen |= v.IsObject();  // an error, as Elasticsearch's; null is just absent
          return;
        }
        Status s = f.analyzer->Analyze(text, sink);
        if (!s.ok() && st.ok()) st = s;
        sink.NextValue();
      });
      if (!st.ok()) errors.push_back(IndexError{c.etag, std::string(c.id), "fields." + f.name + ": " + st.message()});
      if (object_seen)
        errors.push_back(IndexError{c.etag, std::string(c.id), "fields." + f.name + ": an object, not text; value skipped"});
      b.SetLength(f.slot, doc, sink.count());
    } else {
      bool reported = false;
      ForEachValue(d, f.path, 0, [&](const rapidjson::Value& v) {
        std::optional<Number> x;
        if (v.IsInt64()) {
          x = Number::Of(v.GetInt64());  // exact: Number
        } else if (v.IsUint64()) {
          x = Number::Of(v.GetUint64());
        } else if (v.IsNumber()) {
          x = Number{v.GetDouble(), 0};
        } else if (f.kind == FieldKind::kDate && v.IsString()) {
          if (auto ms = ParseIsoDate(std::string_view(v.GetString(), v.GetStringLength()))) x = Number{*ms, 0};
        }
        if (v.IsNull()) return;
        if (!x || !std::isfinite(x->value)) {
          if (!reported)
            errors.push_back(IndexError{c.etag, std::string(c.id),
                                        "fields." + f.name + ": not a " + (f.kind == FieldKind::kDate ? "date" : "number") +
                                            "; value skipped"});
          reported = true;
          return;
        }
        b.AddNumber(f.slot, doc, *x);
      });
    }
  }
  return Status::Ok();
}

}  // namespace corvid::postings
