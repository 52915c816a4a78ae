// definitions: index definition parsing and validation on arbitrary JSON
// text: the engine's dispatch (indexing/index_kind.h CompileDefinition),
// the search definition compiler (postings/definition.h) and the
// map/reduce one (mapreduce/definition.h), each given the same text
// whatever its "type". The text first passes the check the router applies
// to every PUT /indexes/{name} body (ValidateJsonObject), so what reaches
// the compilers is what a client can send.
// A compiled map/reduce definition then maps a few fixed documents
// (MapDocument); a compiled search definition extracts their field values
// and writes their stored fields, which must be one JSON object.
// Invariants: errors are InvalidArgument (their messages may quote one
// byte of a multi-byte character: the router repairs invalid UTF-8 in
// every error message it sends, router.cc); compiling
// twice gives the same fingerprint; the dispatcher agrees with the kind's
// own compiler on whether a definition of that type is valid.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/exact_json.h"
#include "common/utf8.h"
#include "indexing/index_kind.h"
#include "mapreduce/definition.h"
#include "mapreduce/format.h"
#include "postings/definition.h"
#include "server/json_input.h"
#include "tests/fuzz/fuzz_util.h"

using corvid::fuzz::Printable;

namespace {

// Documents of every shape a field path may meet.
const char* const kDocs[] = {
    R"({"id":"1","title":"The Quick Brown Fox","body":"jumps over the lazy dog","n":42,"score":1.5,)"
    R"("createdAt":"2024-03-05T10:20:30Z","tags":["a","b","c"],"author":{"name":"Ann","age":31},"ok":true})",
    R"({"id":"2","title":["multi","valued"],"n":-9223372036854775808,"score":1e308,"createdAt":"2024",)"
    R"("author":[{"name":"Bob"},{"name":"Cy","age":null}],"author.name":"dotted","tags":[[1,2],3],"ok":false})",
    R"({"id":"3","title":"caf\u00e9 na\u00efve \ud83d\ude00","n":18446744073709551615,"score":-0.0,)"
    R"("createdAt":"not a date","body":{"deep":{"deeper":[{"x":"y"}]}},"tags":[],"ok":null})",
    R"({"id":"4","n":"12","score":"x","createdAt":1700000000000,"title":null,"author":"plain"})",
    R"({})",
};

void CheckError(const corvid::Status& s) {
  FUZZ_CHECK_MSG(s.code() == corvid::StatusCode::kInvalidArgument, "definition error is not InvalidArgument (%d): %s",
                 int(s.code()), s.message().c_str());
}

void ExerciseMapReduce(const corvid::mapreduce::DefinitionImpl& def) {
  corvid::mapreduce::MapScratch scratch;
  corvid::mapreduce::MappedDoc out;
  for (const char* doc : kDocs) {
    out.Clear();
    std::string error, warning;
    const bool ok = def.MapDocument(doc, scratch, &out, &error, &warning);
    if (!ok) {
      FUZZ_CHECK(out.entries() == 0);
      FUZZ_CHECK(!error.empty());
      FUZZ_CHECK_MSG(corvid::IsValidUtf8(error), "map error not UTF-8: %s", Printable(error).c_str());
      continue;
    }
    FUZZ_CHECK(corvid::IsValidUtf8(warning));
    FUZZ_CHECK(out.inputs.size() == out.entries() * def.numeric_reducers());
    for (size_t e = 0; e < out.entries(); ++e)
      FUZZ_CHECK_MSG(out.key(e).size() <= corvid::mapreduce::format::kMaxGroupKeyBytes, "group key of %zu bytes",
                     out.key(e).size());
  }
  // Malformed documents fail cleanly.
  for (std::string_view bad : {std::string_view("{"), std::string_view("{\"a\":}"), std::string_view("")}) {
    out.Clear();
    std::string error, warning;
    FUZZ_CHECK(!def.MapDocument(bad, scratch, &out, &error, &warning));
  }
}

void ExerciseSearch(const corvid::postings::SearchDefinitionImpl& def) {
  for (const char* text : kDocs) {
    rapidjson::Document doc;
    corvid::ParseWithExactNumbers(doc, text);
    FUZZ_CHECK(doc.IsObject());
    size_t values = 0;
    for (const auto& field : def.fields()) {
      FUZZ_CHECK(field.kind != corvid::postings::FieldKind::kText || field.analyzer != nullptr);
      corvid::postings::ForEachValue(doc, field.path, 0, [&](const rapidjson::Value&) { ++values; });
      (void)def.Find(field.name);
    }
    if (!def.store().empty()) {
      rapidjson::StringBuffer buf;
      rapidjson::Writer<rapidjson::StringBuffer> w(buf);
      corvid::postings::WriteStoredFields(doc, def.store(), def.store_split(), w);
      const std::string_view stored(buf.GetString(), buf.GetSize());
      auto problem = corvid::server::ValidateJsonObject(stored, nullptr, corvid::server::DuplicateKeys::kReject);
      FUZZ_CHECK_MSG(!problem, "stored fields are not one JSON object (%s): %s", problem->message.c_str(),
                     Printable(stored).c_str());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (corvid::server::ValidateJsonObject(text)) return 0;  // the router answers 400 first

  auto any = corvid::indexing::CompileDefinition(text);
  if (!any.ok()) CheckError(any.status());

  auto mr = corvid::mapreduce::DefinitionImpl::CompileImpl(text);
  if (!mr.ok()) {
    CheckError(mr.status());
    FUZZ_CHECK_MSG(!any.ok() || any->type != corvid::indexing::IndexType::kMapReduce, "dispatcher accepted a map/reduce definition its compiler refused: %s",
                   mr.status().message().c_str());
  } else {
    auto again = corvid::mapreduce::DefinitionImpl::CompileImpl(text);
    FUZZ_CHECK(again.ok() && (*again)->Fingerprint() == (*mr)->Fingerprint());
    FUZZ_CHECK(corvid::IsValidUtf8((*mr)->canonical()));
    ExerciseMapReduce(**mr);
  }

  auto search = corvid::postings::SearchDefinitionImpl::CompileImpl(text);
  if (!search.ok()) {
    CheckError(search.status());
    FUZZ_CHECK_MSG(!any.ok() || any->type != corvid::indexing::IndexType::kSearch, "dispatcher accepted a search definition its compiler refused: %s",
                   search.status().message().c_str());
  } else {
    auto again = corvid::postings::SearchDefinitionImpl::CompileImpl(text);
    FUZZ_CHECK(again.ok() && (*again)->Fingerprint() == (*search)->Fingerprint());
    ExerciseSearch(**search);
  }
  return 0;
}
