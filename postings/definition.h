// The compiled search definition (API.md "Search index") and the extraction
// of a document's field values along dotted paths, arrays flattened.
// Internal to postings/; the facade is search_index.h.
#pragma once

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analyzers/analyzer.h"
#include "common/fnv1a.h"
#include "postings/search_index.h"

namespace corvid {
class BigIntegers;  // common/exact_json.h
}

namespace corvid::postings {

enum class FieldKind { kText, kNumber, kDate };

// How a text field's prefix, wildcard and fuzzy words and range bounds are
// normalized before they meet its terms (NormalizeMultiTermText): as they
// are (keyword), or NFKC-casefolded, with accents folded too (folding).
enum class MultiTermForm { kAsIs, kNormalized, kFolded };

// Positions of consecutive elements of an array-valued text field are
// separated by this gap (Lucene's position_increment_gap), so a phrase never
// matches across two elements unless its slop is at least this large.
inline constexpr uint32_t kArrayPositionGap = 100;

// The largest field boost, and the largest product of a query's nested
// boosts: scores then stay far from a double's range (JSON has no
// infinity).
inline constexpr double kMaxBoost = 1e30;
inline constexpr const char* kMaxBoostText = "1e30";

struct FieldDef {
  std::string name;               // the dotted path as written in the definition
  std::vector<std::string> path;  // its components
  FieldKind kind = FieldKind::kText;
  const analyzers::Analyzer* analyzer = nullptr;  // text fields only
  std::string analyzer_name;
  MultiTermForm multi_term = MultiTermForm::kNormalized;  // text fields only
  bool keyword = false;  // the keyword analyzer: each value is one term, as written
  double boost = 1.0;
  bool facet = false;
  uint32_t slot = 0;  // index among text fields (kText) or numeric fields (kNumber/kDate)
  // Whether hits can be sorted and faceted by the field: a text field whose
  // values are whole terms.
  bool WholeValues() const { return kind == FieldKind::kText && (facet || keyword); }
};

class SearchDefinitionImpl final : public SearchDefinition {
 public:
  static Result<std::shared_ptr<const SearchDefinitionImpl>> CompileImpl(std::string_view json);

  const std::string& collection() const override { return collection_; }
  uint64_t Fingerprint() const override { return fingerprint_; }
  const std::vector<std::string>& ReadFields() const override { return read_fields_; }

  // Fields sorted by name. text_fields()[slot] / numeric_fields()[slot].
  const std::vector<FieldDef>& fields() const { return fields_; }
  const std::vector<const FieldDef*>& text_fields() const { return text_; }
  const std::vector<const FieldDef*>& numeric_fields() const { return numeric_; }
  const FieldDef* Find(std::string_view name) const;
  bool store_all() const { return store_all_; }
  // The "store" paths (duplicates dropped) and their components.
  const std::vector<std::string>& store() const { return store_; }
  const std::vector<std::vector<std::string>>& store_split() const { return store_split_; }
  // Whether segments keep each document's stored fields (StoredFields,
  // below): when "store" lists paths. "*" keeps the whole document, so its
  // hits read the document store instead of holding every body twice.
  bool stores_in_segments() const { return !store_all_ && !store_.empty(); }

 private:
  std::string collection_;
  std::vector<FieldDef> fields_;
  std::vector<const FieldDef*> text_;
  std::vector<const FieldDef*> numeric_;
  bool store_all_ = false;
  std::vector<std::string> store_;
  std::vector<std::vector<std::string>> store_split_;
  uint64_t fingerprint_ = 0;
  std::vector<std::string> read_fields_;  // ReadFields
};

// "a.b.c" -> {"a", "b", "c"}.
std::vector<std::string> SplitPath(std::string_view path);

// How many components of `path` from i the object key `key` spells: 1 for
// path[i] itself, 2 for "path[i].path[i+1]", ...; 0 if none. A key with
// dots stands for that many levels, as Elasticsearch reads documents:
// {"author.name": "x"} is {"author": {"name": "x"}}.
size_t KeySpells(std::string_view key, const std::vector<std::string>& path, size_t i);

// Calls fn(value, n) for every member of object `obj` whose key spells n
// components of `path` from i (KeySpells), in document order.
template <typename Fn>
void ForEachSpelledMember(const rapidjson::Value& obj, const std::vector<std::string>& path, size_t i, Fn&& fn) {
  for (const auto& m : obj.GetObject())
    if (const size_t n = KeySpells({m.name.GetString(), m.name.GetStringLength()}, path, i)) fn(m.value, n);
}

// Calls fn(const rapidjson::Value&) for every value at `path` in `doc`,
// descending into arrays at every level (so [[1,2],3] yields 1, 2, 3), in
// document order; every key that spells the next components is followed
// (KeySpells: "a" then "b", and "a.b").
template <typename Fn>
void ForEachValue(const rapidjson::Value& v, const std::vector<std::string>& path, size_t i, Fn&& fn) {
  if (v.IsArray()) {
    for (const auto& e : v.GetArray()) ForEachValue(e, path, i, fn);
    return;
  }
  if (i == path.size()) {
    fn(v);
    return;
  }
  if (!v.IsObject()) return;
  ForEachSpelledMember(v, path, i, [&](const rapidjson::Value& m, size_t n) { ForEachValue(m, path, i + n, fn); });
}

// Writes a hit's "fields" object for `paths` (split[i] = SplitPath(paths[i])):
// {path: value} for each path `doc` has, where a path through arrays of
// objects ("author.name" of "author": [{"name": …}, …]) gives every value it
// reaches as an array, arrays flattened, in document order (as
// Elasticsearch's `fields`); paths `doc` lacks are left out. Values are
// written as `doc` holds them, and the integers beyond 64 bits in `big`
// (its parse's, common/exact_json.h) with their digits. The index writes
// this for the definition's "store" when it indexes a document.
void WriteStoredFields(const rapidjson::Value& doc, const std::vector<std::string>& paths,
                       const std::vector<std::vector<std::string>>& split,
                       rapidjson::Writer<rapidjson::StringBuffer>& w, const BigIntegers* big = nullptr);

// Parses an ISO-8601 date or date-time (YYYY, YYYY-MM, YYYY-MM-DD,
// YYYY-MM-DDTHH[:MM[:SS[.fff…]]][Z|±HH:MM|±HHMM]; a space may replace 'T') into
// milliseconds since the Unix epoch, UTC (no zone means UTC). nullopt if malformed.
// `next`, if given, receives the end of the period the text names: the
// start of the next year, month, day, hour, minute or second after the
// last component written ("2024-03" -> 2024-04-01), or the value itself
// when it has a fraction of a second (a point). Query ranges round with it.
std::optional<double> ParseIsoDate(std::string_view s, double* next = nullptr);

// Definition fingerprints are FNV-1a 64 (common/fnv1a.h).
using corvid::Fnv1a64;

}  // namespace corvid::postings
