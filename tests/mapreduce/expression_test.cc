// Unit tests of the expression language: every function, types, nulls,
// missing fields, unicode, and compile/evaluation errors with offsets.
#include <catch2/catch.hpp>

#include <string>

#include "mapreduce/expression.h"

using namespace corvid::mapreduce;

namespace {

// Evaluates `expr` over `doc_json`; returns the result as JSON, "missing"
// for a missing value, "compile: <msg>" or "error: <msg>".
std::string Eval(const std::string& expr, const std::string& doc_json = "{}") {
  auto node = ParseExpression(expr, ParseOptions());
  if (!node.ok()) return "compile: " + node.status().message();
  // Unwind nodes see no variables here; give slot 0 the document's "tags".
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseFullPrecisionFlag>(doc_json.c_str());
  REQUIRE(!doc.HasParseError());
  EvalContext ctx;
  ctx.doc = &doc;
  Value v;
  if (!Evaluate(**node, ctx, &v)) return "error: " + ctx.error();
  if (v.type == ValueType::kMissing) return "missing";
  std::string out;
  AppendJson(v, &out);
  return out;
}

const char* kDoc = R"({"a": 7, "b": 2, "d": 2.5, "s": "Hello", "e": "", "n": null, "t": true, "f": false,
  "big": 9223372036854775807, "neg": -9223372036854775808,
  "metadata": {"createdAt": "2024-03-17T10:11:12Z", "docType": "score"},
  "date": "2024-02-29", "bad": "2023-02-29", "ym": "2024-07", "y": "1999", "sp": "2024-03-17 08:00",
  "u": "Ünïcödé ✓ 日本語", "arr": [1, 2, 3], "obj": {"x": 1}, "q": "it's \"q\""})";

}  // namespace

TEST_CASE("literals and fields", "[mapreduce]") {
  CHECK(Eval("1") == "1");
  CHECK(Eval("1.5") == "1.5");
  CHECK(Eval("1e3") == "1000.0");
  CHECK(Eval("'x'") == "\"x\"");
  CHECK(Eval("\"x\\ty\"") == "\"x\\ty\"");
  CHECK(Eval("'\\u00e9'") == "\"é\"");
  CHECK(Eval("true") == "true");
  CHECK(Eval("null") == "null");
  CHECK(Eval("-9223372036854775808") == "-9223372036854775808");
  CHECK(Eval("a", kDoc) == "7");
  CHECK(Eval("metadata.createdAt", kDoc) == "\"2024-03-17T10:11:12Z\"");
  CHECK(Eval("`metadata`.`docType`", kDoc) == "\"score\"");
  CHECK(Eval("metadata.nope", kDoc) == "missing");
  CHECK(Eval("nope.deeper", kDoc) == "missing");
  CHECK(Eval("a.b", kDoc) == "missing");  // path through a number
  CHECK(Eval("n", kDoc) == "null");
  CHECK(Eval("big", kDoc) == "9223372036854775807");
  CHECK(Eval("q", kDoc) == R"("it's \"q\"")");
}

TEST_CASE("arithmetic", "[mapreduce]") {
  CHECK(Eval("a + b * 3", kDoc) == "13");
  CHECK(Eval("(a + b) * 3", kDoc) == "27");
  CHECK(Eval("a - b - 1", kDoc) == "4");
  CHECK(Eval("a / b", kDoc) == "3.5");
  CHECK(Eval("8 / b", kDoc) == "4");
  CHECK(Eval("a * d", kDoc) == "17.5");
  CHECK(Eval("-a", kDoc) == "-7");
  CHECK(Eval("- -a", kDoc) == "7");
  CHECK(Eval("a / 0", kDoc) == "null");
  CHECK(Eval("a / 0.0", kDoc) == "null");
  CHECK(Eval("big + 1", kDoc) == "9223372036854775808.0");  // int64 overflow -> double
  CHECK(Eval("neg - 1", kDoc) == "-9223372036854775808.0");
  CHECK(Eval("-neg", kDoc) == "9223372036854775808.0");
  CHECK(Eval("big * 2", kDoc) == "18446744073709551616.0");
  CHECK(Eval("a + n", kDoc) == "null");
  CHECK(Eval("a + missing", kDoc) == "null");
  CHECK(Eval("-n", kDoc) == "null");
  CHECK(Eval("2.5 + 0.5") == "3.0");
  CHECK(Eval("a + s", kDoc) == "error: '+' needs numbers, got number and string at offset 0");
  CHECK(Eval("1 * (t)", kDoc) == "error: '*' needs numbers, got number and bool at offset 0");
  CHECK(Eval("-s", kDoc) == "error: '-' needs a number, got string at offset 0");
}

TEST_CASE("comparisons and logic", "[mapreduce]") {
  CHECK(Eval("a == 7", kDoc) == "true");
  CHECK(Eval("a = 7.0", kDoc) == "true");
  CHECK(Eval("a != 7", kDoc) == "false");
  CHECK(Eval("a <> 7", kDoc) == "false");
  CHECK(Eval("a < 8 && b >= 2", kDoc) == "true");
  CHECK(Eval("a < 8 and b > 2", kDoc) == "false");
  CHECK(Eval("a > 8 || s == 'Hello'", kDoc) == "true");
  CHECK(Eval("a > 8 OR NOT t", kDoc) == "false");
  CHECK(Eval("!f", kDoc) == "true");
  CHECK(Eval("s < 'Z'", kDoc) == "true");
  CHECK(Eval("s < 1", kDoc) == "false");  // different types are unordered
  CHECK(Eval("s == 1", kDoc) == "false");
  CHECK(Eval("n == null", kDoc) == "true");
  CHECK(Eval("missing == null", kDoc) == "true");
  CHECK(Eval("n < 1", kDoc) == "false");
  CHECK(Eval("big > 9223372036854775806", kDoc) == "true");
  CHECK(Eval("big == 9223372036854775806", kDoc) == "false");
  CHECK(Eval("t == true", kDoc) == "true");
  CHECK(Eval("f < t", kDoc) == "true");
  CHECK(Eval("e || 'x'", kDoc) == "true");
  CHECK(Eval("0 && (1 + s)", kDoc) == "false");  // short-circuit: no error
}

TEST_CASE("string functions", "[mapreduce]") {
  CHECK(Eval("substr(metadata.createdAt, 0, 7)", kDoc) == "\"2024-03\"");
  CHECK(Eval("substr(s, 1)", kDoc) == "\"ello\"");
  CHECK(Eval("substr(s, 1, 100)", kDoc) == "\"ello\"");
  CHECK(Eval("substr(s, 10, 2)", kDoc) == "\"\"");
  CHECK(Eval("substr(s, -3)", kDoc) == "\"llo\"");
  CHECK(Eval("substr(s, 0, 0)", kDoc) == "\"\"");
  CHECK(Eval("substr(s, 1.0, 2)", kDoc) == "\"el\"");
  CHECK(Eval("substr(u, 0, 2)", kDoc) == "\"Ün\"");
  CHECK(Eval("substr(u, 10, 3)", kDoc) == "\"日本語\"");
  CHECK(Eval("substr(u, 8, 1)", kDoc) == "\"✓\"");
  CHECK(Eval("substr(n, 0, 2)", kDoc) == "null");
  CHECK(Eval("substr(missing, 0, 2)", kDoc) == "null");
  CHECK(Eval("substr(a, 0, 2)", kDoc) == "error: substr needs a string, got number at offset 0");
  CHECK(Eval("substr(s, 0.5)", kDoc) == "error: substr start must be an integer, got number at offset 10");
  CHECK(Eval("lower(s)", kDoc) == "\"hello\"");
  CHECK(Eval("upper(s)", kDoc) == "\"HELLO\"");
  CHECK(Eval("upper(u)", kDoc) == "\"ÜNÏCÖDÉ ✓ 日本語\"");
  CHECK(Eval("lower('ÀÉÎ straße')", kDoc) == "\"àéî straße\"");
  CHECK(Eval("upper('straße')", kDoc) == "\"STRASSE\"");
  CHECK(Eval("lower(n)", kDoc) == "null");
  CHECK(Eval("lower(a)", kDoc) == "error: lower needs a string, got number at offset 0");
  CHECK(Eval("len(s)", kDoc) == "5");
  CHECK(Eval("len(u)", kDoc) == "13");
  CHECK(Eval("len(arr)", kDoc) == "3");
  CHECK(Eval("len(e)", kDoc) == "0");
  CHECK(Eval("len(missing)", kDoc) == "null");
  CHECK(Eval("len(a)", kDoc) == "error: len needs a string or array, got number at offset 0");
  CHECK(Eval("concat(s, '-', a, '-', d, '-', t, n, missing)", kDoc) == "\"Hello-7-2.5-true\"");
  CHECK(Eval("concat()", kDoc) == "\"\"");
  CHECK(Eval("concat(upper(s), lower(s))", kDoc) == "\"HELLOhello\"");
  CHECK(Eval("concat(1.0)", kDoc) == "\"1.0\"");
  CHECK(Eval("concat(s, arr)", kDoc) == "error: concat cannot format array at offset 10");
  CHECK(Eval("coalesce(missing, n, s)", kDoc) == "\"Hello\"");
  CHECK(Eval("coalesce(missing, n)", kDoc) == "null");
  CHECK(Eval("coalesce(e, s)", kDoc) == "\"\"");
  CHECK(Eval("if(a > 5, 'big', 'small')", kDoc) == "\"big\"");
  CHECK(Eval("if(missing, 1, 2)", kDoc) == "2");
  CHECK(Eval("if(t, 1, 1 + s)", kDoc) == "1");
}

TEST_CASE("date functions", "[mapreduce]") {
  CHECK(Eval("year(metadata.createdAt)", kDoc) == "2024");
  CHECK(Eval("month(metadata.createdAt)", kDoc) == "3");
  CHECK(Eval("day(metadata.createdAt)", kDoc) == "17");
  CHECK(Eval("day(date)", kDoc) == "29");
  CHECK(Eval("day(bad)", kDoc) == "null");  // 2023 is not a leap year
  CHECK(Eval("year(bad)", kDoc) == "null");
  CHECK(Eval("month(ym)", kDoc) == "7");
  CHECK(Eval("day(ym)", kDoc) == "1");  // a month is at its first day
  CHECK(Eval("month(y)", kDoc) == "1");
  CHECK(Eval("day(y)", kDoc) == "1");
  CHECK(Eval("year(y)", kDoc) == "1999");
  CHECK(Eval("year(s)", kDoc) == "null");
  CHECK(Eval("year(a)", kDoc) == "null");
  CHECK(Eval("year('2024-13-01')") == "null");
  CHECK(Eval("year('20240101')") == "null");
  CHECK(Eval("date_trunc('year', metadata.createdAt)", kDoc) == "\"2024\"");
  CHECK(Eval("date_trunc('month', metadata.createdAt)", kDoc) == "\"2024-03\"");
  CHECK(Eval("date_trunc('day', metadata.createdAt)", kDoc) == "\"2024-03-17\"");
  CHECK(Eval("date_trunc('hour', metadata.createdAt)", kDoc) == "\"2024-03-17T10\"");
  CHECK(Eval("date_trunc('hour', sp)", kDoc) == "\"2024-03-17T08\"");
  CHECK(Eval("date_trunc('hour', date)", kDoc) == "\"2024-02-29T00\"");  // a day starts at midnight
  CHECK(Eval("date_trunc('month', ym)", kDoc) == "\"2024-07\"");
  CHECK(Eval("date_trunc('day', ym)", kDoc) == "\"2024-07-01\"");
  CHECK(Eval("date_trunc('hour', y)", kDoc) == "\"1999-01-01T00\"");
  CHECK(Eval("date_trunc('year', y)", kDoc) == "\"1999\"");
  CHECK(Eval("date_trunc('hour', bad)", kDoc) == "null");  // not a date
  CHECK(Eval("date_trunc('day', n)", kDoc) == "null");
  CHECK(Eval("date_trunc(s, date)", kDoc) ==
        "error: date_trunc unit must be 'year', 'month', 'day' or 'hour' at offset 11");
}

TEST_CASE("compile errors name the offset", "[mapreduce]") {
  CHECK(Eval("substrr(a, 0)") == "compile: unknown function 'substrr' at offset 0");
  CHECK(Eval("a + ") == "compile: unexpected end of expression at offset 4");
  CHECK(Eval("a + * b") == "compile: unexpected '*' at offset 4");
  CHECK(Eval("(a + b") == "compile: expected ')' at offset 6");
  CHECK(Eval("'abc") == "compile: unterminated string at offset 0");
  CHECK(Eval("a # b") == "compile: unexpected character '#' at offset 2");
  CHECK(Eval("a & b") == "compile: unexpected '&' (use &&) at offset 2");
  CHECK(Eval("substr(a)") == "compile: substr takes 2 or 3 arguments at offset 0");
  CHECK(Eval("lower(a, b)") == "compile: lower takes 1 argument at offset 0");
  CHECK(Eval("if(a, b)") == "compile: if takes 3 arguments at offset 0");
  CHECK(Eval("date_trunc('week', a)") ==
        "compile: date_trunc unit must be 'year', 'month', 'day' or 'hour' at offset 11");
  CHECK(Eval("") == "compile: empty expression at offset 0");
  CHECK(Eval("a b") == "compile: unexpected 'b' at offset 2");
  CHECK(Eval("a < b < c") == "compile: chained comparison (use parentheses) at offset 6");
  CHECK(Eval("12abc") == "compile: malformed number at offset 0");
  CHECK(Eval("unwind(unwind(a))") == "compile: unwind cannot be nested at offset 0");
  CHECK(Eval("a.") == "compile: unexpected end of expression at offset 2");
  CHECK(Eval("1e999") == "compile: number out of range at offset 0");
}

TEST_CASE("expressions deeper than 256 levels are refused, however they nest", "[mapreduce]") {
  auto repeat = [](const std::string& s, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += s;
    return out;
  };
  const std::string too_deep = "nested deeper than 256 levels";
  // A chain of n terms is a tree n levels deep: 256 evaluate, 257 do not.
  CHECK(Eval(std::string("a") + repeat("+a", 255), kDoc) == "1792");
  CHECK(Eval(std::string("a") + repeat("+a", 256), kDoc) == "compile: expression " + too_deep + " at offset 0");
  CHECK(Eval(std::string("a") + repeat("*b", 256), kDoc) == "compile: expression " + too_deep + " at offset 0");
  CHECK(Eval(std::string("t") + repeat(" && t", 256), kDoc) == "compile: expression " + too_deep + " at offset 0");
  CHECK(Eval(repeat("(", 255) + "a" + repeat(")", 255), kDoc) == "7");
  CHECK_THAT(Eval(repeat("(", 256) + "a" + repeat(")", 256), kDoc), Catch::Contains(too_deep));
  CHECK(Eval(repeat("-", 254) + "a", kDoc) == "7");
  CHECK_THAT(Eval(repeat("-", 256) + "a", kDoc), Catch::Contains(too_deep));
  CHECK_THAT(Eval(repeat("!", 256) + "t", kDoc), Catch::Contains(too_deep));
  CHECK_THAT(Eval(repeat("concat(", 256) + "s" + repeat(")", 256), kDoc), Catch::Contains(too_deep));
  CHECK_THAT(Eval(repeat("if(t, ", 256) + "s" + repeat(", 1)", 256), kDoc), Catch::Contains(too_deep));
  // What crashed the server (the parser's or the evaluator's stack): a
  // clear error now.
  CHECK_THAT(Eval(std::string("a") + repeat("+a", 40000), kDoc), Catch::Contains(too_deep));
  CHECK_THAT(Eval(repeat("(", 100000) + "a" + repeat(")", 100000), kDoc), Catch::Contains(too_deep));
  CHECK_THAT(Eval(repeat("-", 100000) + "a", kDoc), Catch::Contains(too_deep));
  CHECK_THAT(Eval(repeat("concat(", 20000) + "s" + repeat(")", 20000), kDoc), Catch::Contains(too_deep));
}

TEST_CASE("map references in reducer arguments", "[mapreduce]") {
  std::vector<std::string> names = {"score", "month"};
  ParseOptions opt;
  opt.map_names = names;
  opt.resolve_map_names = true;
  opt.allow_unwind = false;
  auto ok = ParseExpression("score * 2", opt);
  REQUIRE(ok.ok());
  EvalContext ctx;
  Value maps[2] = {Value::Int(21), Value::String("2024-01")};
  ctx.map_values = maps;
  Value v;
  REQUIRE(Evaluate(**ok, ctx, &v));
  CHECK(v.type == ValueType::kInt);
  CHECK(v.i == 42);
  auto bad = ParseExpression("scor + 1", opt);
  REQUIRE(!bad.ok());
  CHECK(bad.status().message() == "unknown map name 'scor' at offset 0");
  auto unwind = ParseExpression("unwind(score)", opt);
  REQUIRE(!unwind.ok());
  CHECK(unwind.status().message() == "unwind is only allowed in map expressions at offset 0");
}

TEST_CASE("canonical form ignores spelling", "[mapreduce]") {
  auto canon = [](const std::string& e) {
    auto n = ParseExpression(e, ParseOptions());
    REQUIRE(n.ok());
    std::string s;
    CanonicalForm(**n, &s);
    return s;
  };
  CHECK(canon("a and b") == canon("(a)&&b"));
  CHECK(canon("substr(x, 0, 7)") == canon("SUBSTR( x,0,7 )"));
  CHECK(canon("'a'") == canon("\"a\""));
  CHECK(canon("a + b * c") != canon("(a + b) * c"));
  CHECK(canon("1") != canon("1.0"));
}
