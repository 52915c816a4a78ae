// Definition validation (each error names its field) and MapDocument:
// unwind fan-out, null keys, per-document errors and reducer warnings.
#include <catch2/catch.hpp>

#include <string>

#include "common/exact_json.h"
#include "mapreduce/definition.h"
#include "mapreduce/format.h"

using namespace corvid::mapreduce;

namespace {

std::string CompileError(const std::string& json) {
  auto d = Definition::Compile(json);
  if (d.ok()) return "ok";
  return d.status().message();
}

// The error's byte offset as the server reports it (error.offset), or -1.
int64_t ErrorOffset(const std::string& json) {
  auto d = Definition::Compile(json);
  if (d.ok() || !d.status().offset()) return -1;
  return int64_t(*d.status().offset());
}

std::string Def(const std::string& map, const std::string& group, const std::string& reduce) {
  return R"J({"type":"mapreduce","collection":"c","map":)J" + map + R"J(,"groupBy":)J" + group + R"J(,"reduce":)J" + reduce +
         "}";
}

std::shared_ptr<const DefinitionImpl> MustCompile(const std::string& json) {
  auto d = DefinitionImpl::CompileImpl(json);
  INFO(json);
  REQUIRE(d.ok());
  return d.value();
}

}  // namespace

TEST_CASE("definition validation names the field", "[mapreduce]") {
  const std::string m = R"J({"month":"substr(createdAt, 0, 7)","score":"score"})J";
  CHECK(CompileError(Def(m, R"J(["month"])J", R"J({"total":"sum(score)","n":"count()"})J")) == "ok");
  CHECK(CompileError("{") .rfind("definition: invalid JSON", 0) == 0);
  CHECK(CompileError("[]") == "definition: must be a JSON object");
  CHECK(CompileError(R"J({"type":"search"})J") == "type: must be \"mapreduce\"");
  // Unknown top-level keys are refused, as in search definitions (a typo
  // such as "groupby" must not silently mean something else).
  const std::string good = Def(m, R"J(["month"])J", R"J({"n":"count()"})J");
  CHECK(CompileError(good.substr(0, good.size() - 1) + R"J(,"extra":1})J") ==
        "extra: unknown key (expected type, collection, map, groupBy, reduce)");
  CHECK(CompileError(
            R"J({"type":"mapreduce","collection":"c","map":{"a":"a"},"groupby":["a"],"reduce":{"n":"count()"}})J") ==
        "groupby: unknown key (expected type, collection, map, groupBy, reduce)");
  CHECK(CompileError(R"J({"type":"mapreduce","collection":""})J") == "collection: must be a non-empty string");
  CHECK(CompileError(R"J({"type":"mapreduce","collection":"c","map":{}})J") ==
        "map: must be a non-empty object of name -> expression");
  CHECK(CompileError(Def(R"J({"month":"substrr(createdAt, 0, 7)"})J", R"J(["month"])J", R"J({"n":"count()"})J")) ==
        "map.month: unknown function 'substrr' at offset 0");
  CHECK(CompileError(Def(R"J({"month":7})J", R"J(["month"])J", R"J({"n":"count()"})J")) ==
        "map.month: must be an expression string");
  CHECK(CompileError(Def(R"J({"a b":"x"})J", R"J([])J", R"J({"n":"count()"})J")) ==
        "map.a b: name must be an identifier ([A-Za-z_][A-Za-z0-9_]*)");
  CHECK(CompileError(Def(R"J({"a":"x","a":"y"})J", R"J([])J", R"J({"n":"count()"})J")) == "map.a: duplicate name");
  CHECK(CompileError(Def(m, R"J("month")J", R"J({"n":"count()"})J")) == "groupBy: must be an array of map names");
  CHECK(CompileError(Def(m, R"J(["month","day"])J", R"J({"n":"count()"})J")) == "groupBy[1]: unknown map name 'day'");
  CHECK(CompileError(Def(m, R"J(["month","month"])J", R"J({"n":"count()"})J")) == "groupBy[1]: duplicate name 'month'");
  CHECK(CompileError(Def(R"J({"limit":"x"})J", R"J(["limit"])J", R"J({"n":"count()"})J")) ==
        "groupBy[0]: 'limit' is a reserved query parameter name");
  CHECK(CompileError(Def(m, R"J(["month"])J", R"J({})J")) == "reduce: must be a non-empty object of name -> reducer");
  CHECK(CompileError(Def(m, R"J(["month"])J", R"J({"t":"summ(score)"})J")) ==
        "reduce.t: unknown reducer 'summ' (use count, sum, min, max or avg) at offset 0");
  CHECK(CompileError(Def(m, R"J(["month"])J", R"J({"t":"sum(scor)"})J")) ==
        "reduce.t: unknown map name 'scor' at offset 4");
  CHECK(CompileError(Def(m, R"J(["month"])J", R"J({"t":"sum()"})J")) == "reduce.t: sum takes one argument at offset 0");
  CHECK(CompileError(Def(m, R"J(["month"])J", R"J({"t":"count(score)"})J")) ==
        "reduce.t: count() takes no argument at offset 6");
  CHECK(CompileError(Def(m, R"J(["month"])J", R"J({"t":"sum(score"})J")) == "reduce.t: expected ')' at offset 9");
  CHECK(CompileError(Def(m, R"J(["month"])J", R"J({"t":"sum(score + )"})J")) ==
        "reduce.t: unexpected end of expression at offset 13");
  CHECK(CompileError(Def(m, R"J(["month"])J", R"J({"month":"count()"})J")) ==
        "reduce.month: name clashes with a groupBy field");
  CHECK(CompileError(Def(m, R"J(["month"])J", R"J({"t":"sum(unwind(score))"})J")) ==
        "reduce.t: unwind is only allowed in map expressions at offset 4");
  CHECK(CompileError(Def(m, R"J(["month"])J", R"J({"t":7})J")) ==
        "reduce.t: must be a reducer string: count(), sum(x), min(x), max(x) or avg(x)");
  CHECK(CompileError(Def(m, R"J([])J", R"J({"t":"sum(score * 2)"})J")) == "ok");  // one global row
  // The offset travels as a field through the field's prefix (the server's
  // error.offset), equal to the message's; none where the message has none.
  CHECK(ErrorOffset(Def(m, R"J(["month"])J", R"J({"t":"sum(score + )"})J")) == 13);
  CHECK(ErrorOffset(Def(m, R"J(["month"])J", R"J({"t":"count(score)"})J")) == 6);
  CHECK(ErrorOffset(Def(R"J({"month":"substrr(createdAt, 0, 7)"})J", R"J(["month"])J", R"J({"n":"count()"})J")) == 0);
  CHECK(ErrorOffset("{\"type\":") == 8);
  CHECK(ErrorOffset(Def(m, R"J(["month"])J", R"J({"month":"count()"})J")) == -1);
}

TEST_CASE("fingerprint follows meaning, not spelling", "[mapreduce]") {
  auto a = MustCompile(Def(R"J({"m":"substr(d, 0, 7)","s":"score"})J", R"J(["m"])J", R"J({"t":"sum(s)"})J"));
  auto b = MustCompile(Def(R"J({"m":"SUBSTR( d,0,7 )","s":"(score)"})J", R"J(["m"])J", R"J({"t":" sum( s ) "})J"));
  auto c = MustCompile(Def(R"J({"m":"substr(d, 0, 4)","s":"score"})J", R"J(["m"])J", R"J({"t":"sum(s)"})J"));
  auto e = MustCompile(Def(R"J({"m":"substr(d, 0, 7)","s":"score"})J", R"J(["m"])J", R"J({"t":"max(s)"})J"));
  CHECK(a->Fingerprint() == b->Fingerprint());
  CHECK(a->Fingerprint() != c->Fingerprint());
  CHECK(a->Fingerprint() != e->Fingerprint());
}

TEST_CASE("MapDocument: unwind, null keys, errors, warnings", "[mapreduce]") {
  auto def = MustCompile(Def(R"J({"tag":"unwind(tags)","up":"upper(unwind(tags))","k":"kind","v":"v"})J",
                             R"J(["k","tag"])J", R"J({"n":"count()","s":"sum(v)","hi":"max(up)"})J"));
  MapScratch scratch;
  MappedDoc out;
  std::string err, warn;
  // Same unwind argument twice -> one variable: 2 entries, not 4.
  REQUIRE(def->MapDocument(R"J({"kind":"a","tags":["x","y"],"v":3})J", scratch, &out, &err, &warn));
  CHECK(out.entries() == 2);
  CHECK(warn == "reduce.hi: max needs a number, got string (value left out)");
  // Missing / empty array / null -> nothing.
  REQUIRE(def->MapDocument(R"J({"kind":"a","v":3})J", scratch, &out, &err, &warn));
  CHECK(out.entries() == 0);
  REQUIRE(def->MapDocument(R"J({"kind":"a","tags":[],"v":3})J", scratch, &out, &err, &warn));
  CHECK(out.entries() == 0);
  // A scalar -> one entry; a null element -> no entry for that element.
  REQUIRE(def->MapDocument(R"J({"kind":"a","tags":"solo","v":3})J", scratch, &out, &err, &warn));
  CHECK(out.entries() == 1);
  REQUIRE(def->MapDocument(R"J({"kind":"a","tags":["x",null,"z"],"v":3})J", scratch, &out, &err, &warn));
  CHECK(out.entries() == 2);
  // Null group component -> no entry.
  REQUIRE(def->MapDocument(R"J({"kind":null,"tags":["x"],"v":3})J", scratch, &out, &err, &warn));
  CHECK(out.entries() == 0);
  // Errors: bad JSON, an array key, a failing map expression.
  CHECK(!def->MapDocument(R"J({"kind":)J", scratch, &out, &err, &warn));
  CHECK(err.rfind("invalid JSON", 0) == 0);
  CHECK(!def->MapDocument(R"J({"kind":[1],"tags":["x"]})J", scratch, &out, &err, &warn));
  CHECK(err == "groupBy.k: value is an array (use unwind for arrays)");
  CHECK(!def->MapDocument(R"J({"kind":"a","tags":[1]})J", scratch, &out, &err, &warn));
  CHECK(err == "map.up: upper needs a string, got number at offset 0");
  CHECK(out.entries() == 0);

  // Cartesian product of two different unwinds.
  auto two = MustCompile(Def(R"J({"a":"unwind(x)","b":"unwind(y)"})J", R"J(["a","b"])J", R"J({"n":"count()"})J"));
  REQUIRE(two->MapDocument(R"J({"x":[1,2,3],"y":["p","q"]})J", scratch, &out, &err, &warn));
  CHECK(out.entries() == 6);
  // Order-preserving keys: numbers before strings, numerically.
  std::string k1, k2, k3, k4;
  format::PutKeyInt(k1, -5);
  format::PutKeyDouble(k2, 2.5);
  format::PutKeyInt(k3, 3);
  format::PutKeyString(k4, "");
  CHECK(k1 < k2);
  CHECK(k2 < k3);
  CHECK(k3 < k4);
  std::string a, b;
  format::PutKeyInt(a, 9007199254740993);  // 2^53 + 1: not a double
  format::PutKeyInt(b, 9007199254740992);
  CHECK(b < a);
  std::string one_i, one_d;
  format::PutKeyInt(one_i, 1);
  format::PutKeyDouble(one_d, 1.0);
  CHECK(one_i == one_d);
  std::string s1, s2, s3;
  format::PutKeyString(s1, "a");
  format::PutKeyString(s2, std::string("a\0", 2));
  format::PutKeyString(s3, "ab");
  CHECK(s1 < s2);
  CHECK(s2 < s3);
}

TEST_CASE("MapDocument parses numbers exactly, and survives ones RapidJSON's full precision cannot read", "[mapreduce]") {
  auto def = MustCompile(Def(R"J({"k":"k","v":"v"})J", R"J(["k"])J", R"J({"s":"sum(v)"})J"));
  MapScratch scratch;
  MappedDoc out;
  std::string err, warn;
  // RapidJSON 1.1's kParseFullPrecisionFlag reads out of bounds on these
  // (the store accepts them): the index worker crashed on each, at every start.
  for (const std::string& v : {"0." + std::string(700, '0') + "1", "0." + std::string(5000, '0') + "1",
                              "-0." + std::string(1000, '0') + "7e2"}) {
    INFO(v.substr(0, 40));
    CHECK(def->MapDocument(R"J({"k":"a","v":)J" + v + "}", scratch, &out, &err, &warn));
  }
  // Every value equals the correctly rounded double (the oracle: strtod),
  // integers stay integers, and the DOM types are what RapidJSON gives.
  rapidjson::Document d;
  for (const char* text : {"0.1", "2.2250738585072014e-308", "4.9406564584124654e-324", "1.7976931348623157e308",
                           "123456789012345678901234567890", "9007199254740993", "-9223372036854775808",
                           "18446744073709551615", "18446744073709551616", "-0", "1e-400", "0.30000000000000004441"}) {
    INFO(text);
    const std::string json = std::string(R"J({"n":)J") + text + "}";
    REQUIRE_FALSE(corvid::ParseWithExactNumbers(d, json).IsError());
    const rapidjson::Value& n = d["n"];
    const bool integer = std::string_view(text).find_first_of(".eE") == std::string_view::npos;
    if (integer && n.IsUint64()) CHECK(std::to_string(n.GetUint64()) == (std::string(text) == "-0" ? "0" : text));
    else if (integer && n.IsInt64()) CHECK(std::to_string(n.GetInt64()) == text);
    else CHECK(n.GetDouble() == std::strtod(text, nullptr));
  }
  CHECK(corvid::ParseWithExactNumbers(d, R"J({"n":)J").IsError());
  CHECK(corvid::ParseWithExactNumbers(d, R"J({"n":1,})J").IsError());
}
