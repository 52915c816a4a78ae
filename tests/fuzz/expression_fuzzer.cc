// expression: the map/reduce expression compiler (mapreduce/expression.h
// ParseExpression) on arbitrary text; an expression that compiles is
// rendered (CanonicalForm) and evaluated over a few small fixed documents.
// The first byte picks the parse options (map-output names for reducer
// arguments, unwind allowed); the rest is the expression.
// Invariants: errors are InvalidArgument naming an offset within the
// source; a tree is no deeper than kMaxExpressionDepth; evaluation errors
// say something; with a UTF-8 source, every string a value holds is UTF-8
// (values end up in JSON answers and group keys) and so is every
// evaluation error (kept in the index's error log). A parse error may
// quote one byte of a multi-byte character: the router repairs invalid
// UTF-8 in every error message it sends (router.cc).
#include <rapidjson/document.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/exact_json.h"
#include "common/utf8.h"
#include "mapreduce/expression.h"
#include "tests/fuzz/fuzz_util.h"

using corvid::fuzz::Printable;
using namespace corvid::mapreduce;

namespace {

const char* const kDocs[] = {
    R"({"id":"a1","title":"Caf\u00e9 Stra\u00dfe \ud83d\ude00 na\u00efve","n":42,"d":2.5,"neg":-7,)"
    R"("big":9223372036854775807,"createdAt":"2024-03-05T10:20:30Z","tags":["x","\u00e9t\u00e9",3,null],)"
    R"("nested":{"a":{"b":[1,2,{"c":"deep"}]}},"ok":true,"none":null,"empty":"","zero":0})",
    R"({"title":["not","a","string"],"n":1e308,"d":-0.0,"createdAt":"bad","tags":"single","nested":[]})",
};

struct Docs {
  std::vector<rapidjson::Document> docs;
  Docs() {
    for (const char* text : kDocs) {
      docs.emplace_back();
      corvid::ParseWithExactNumbers(docs.back(), text);
      FUZZ_CHECK(docs.back().IsObject());
    }
  }
};

const std::string kMapNames[] = {"month", "score", "tags", "n"};

uint32_t Height(const Node& n) {
  uint32_t h = 0;
  for (const auto& a : n.args) h = std::max(h, Height(*a));
  return h + 1;
}

void CheckValue(const Value& v, bool utf8, std::string_view src) {
  if (v.type == ValueType::kString && utf8)
    FUZZ_CHECK_MSG(corvid::IsValidUtf8(v.s), "string result is not UTF-8 for '%s': '%s'", Printable(src).c_str(),
                   Printable(v.s).c_str());
  std::string json;
  AppendJson(v, &json);
  FUZZ_CHECK(!json.empty());
  if (utf8) FUZZ_CHECK(corvid::IsValidUtf8(json));
  (void)Truthy(v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const Docs docs;
  const uint8_t flags = data[0];
  const std::string_view src(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool utf8 = corvid::IsValidUtf8(src);

  ParseOptions options;
  options.resolve_map_names = flags & 1;
  if (options.resolve_map_names) options.map_names = kMapNames;
  options.allow_unwind = !(flags & 2);

  auto parsed = ParseExpression(src, options);
  if (!parsed.ok()) {
    const corvid::Status& s = parsed.status();
    FUZZ_CHECK_MSG(s.code() == corvid::StatusCode::kInvalidArgument, "not InvalidArgument: %s", s.message().c_str());
    // Every parse error names its byte, in the message and as the offset.
    FUZZ_CHECK_MSG(s.offset().has_value(), "no offset: %s", s.message().c_str());
    FUZZ_CHECK_MSG(*s.offset() <= src.size(), "error offset %zu beyond the source (%zu bytes)", *s.offset(), src.size());
    FUZZ_CHECK_MSG(s.message().ends_with(" at offset " + std::to_string(*s.offset())), "message and offset %zu differ: %s",
                   *s.offset(), s.message().c_str());
    return 0;
  }
  const Node& root = **parsed;
  FUZZ_CHECK_MSG(Height(root) <= kMaxExpressionDepth + 1, "tree of height %u", Height(root));
  std::string canonical;
  CanonicalForm(root, &canonical);
  if (utf8) FUZZ_CHECK(corvid::IsValidUtf8(canonical));

  // Map outputs and unwind elements the evaluation may refer to.
  const Value map_values[] = {Value::String("2024-03"), Value::Double(1.5), Value::Null(), Value::Int(-3)};
  for (const auto& doc : docs.docs) {
    const Value unwind_values[] = {Value::FromJson(doc.MemberBegin()->value), Value::Int(7)};
    EvalContext ctx;
    ctx.doc = &doc;
    ctx.map_values = map_values;
    ctx.unwind_values = unwind_values;
    for (int round = 0; round < 2; ++round) {  // the arena is reused the second time
      ctx.ResetArena();
      Value out;
      if (!Evaluate(root, ctx, &out)) {
        FUZZ_CHECK(!ctx.error().empty());
        if (utf8)
          FUZZ_CHECK_MSG(corvid::IsValidUtf8(ctx.error()), "evaluation error not UTF-8 for '%s': '%s'",
                         Printable(src).c_str(), Printable(ctx.error()).c_str());
        continue;
      }
      CheckValue(out, utf8, src);
    }
  }
  return 0;
}
