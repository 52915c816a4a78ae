// The query parser: every construct of API.md's syntax, Lucene's clause
// occurrence rules, and every syntax error with its offset.
#include <catch2/catch.hpp>

#include "postings/query_parser.h"

namespace corvid::postings {
namespace {

std::string P(std::string_view q, DefaultOperator op = DefaultOperator::kOr) {
  auto r = ParseQuery(q, op);
  if (!r.ok()) return "ERROR " + r.status().message();
  return ToDebugString(**r);
}

// The kind and text of a one-clause query.
std::string Leaf(std::string_view q) {
  auto r = ParseQuery(q, DefaultOperator::kOr);
  REQUIRE(r.ok());
  const QueryNode& n = **r;
  using K = QueryNode::Kind;
  const char* kind = n.kind == K::kTerm       ? "term"
                     : n.kind == K::kPrefix   ? "prefix"
                     : n.kind == K::kWildcard ? "wildcard"
                     : n.kind == K::kMatchAll ? "all"
                     : n.kind == K::kRange    ? "range"
                                              : "other";
  return std::string(kind) + " " + n.field + (n.field.empty() ? "" : ":") + n.text;
}

// Lucene's wildcards: '*' and '?' anywhere in a word; escaped, they are
// characters. A lone trailing '*' is a prefix, and a word of stars alone
// matches everything (or every document with a value in the field).
TEST_CASE("wildcards, and escaped wildcard characters", "[postings]") {
  CHECK(Leaf("te?t") == "wildcard te?t");
  CHECK(Leaf("t*st") == "wildcard t*st");
  CHECK(Leaf("*est") == "wildcard *est");
  CHECK(Leaf("?") == "wildcard ?");
  CHECK(Leaf("title:a*b?") == "wildcard title:a*b?");
  CHECK(Leaf("pre*") == "prefix pre");
  CHECK(Leaf("**") == "all ");
  CHECK(Leaf("f:**") == "range f:");
  // Escaped: characters of the term; in a pattern, escaped again.
  CHECK(Leaf("tes\\*") == "term tes*");
  CHECK(Leaf("te\\?t") == "term te?t");
  CHECK(Leaf("\\*") == "term *");
  CHECK(Leaf("c\\*\\?*") == "prefix c*?");
  CHECK(Leaf("a\\*b*c") == "wildcard a\\*b*c");
  CHECK(Leaf("a\\\\?") == "wildcard a\\\\?");  // an escaped backslash, then a wildcard
  CHECK(P("te?t^2") == "te?t^2");
  CHECK(Leaf("a**b***?") == "wildcard a*b*?");   // stars in a row are one
  CHECK(Leaf("a*\\**b") == "wildcard a*\\**b");  // an escaped one is a character
}

// Elasticsearch's query_string one-sided ranges, after a field or in a
// field's group; and its _exists_:f, which is f:*.
TEST_CASE("one-sided ranges: f:>x, f:>=x, f:<x, f:<=x; _exists_:f", "[postings]") {
  CHECK(P("n:>5") == "n:{5 TO *]");
  CHECK(P("n:>=5") == "n:[5 TO *]");
  CHECK(P("n:<5") == "n:[* TO 5}");
  CHECK(P("n:<=-2.5") == "n:[* TO -2.5]");
  CHECK(P("d:>=\"2024-01-01T10:00:00Z\"") == "d:[2024-01-01T10:00:00Z TO *]");
  CHECK(P("n:>5^2") == "n:{5 TO *]^2");
  CHECK(P("n:(>=1 AND <5)") == "(+n:[1 TO *] +n:[* TO 5})");
  CHECK(P("t:<b OR x") == "(t:[* TO b} x)");
  CHECK(P(">5") == ">5");  // no field: a word
  CHECK(P("_exists_:title") == "title:[* TO *]");  // as title:*
  CHECK(P("-_exists_:a.b") == "(-a.b:[* TO *])");
  CHECK(P("n:>") == "ERROR query syntax error: expected a range bound at offset 3");
  CHECK(P("n:>= 5") == "ERROR query syntax error: expected a range bound at offset 4");
  CHECK(P("n:(<)") == "ERROR query syntax error: expected a range bound at offset 4");
}

TEST_CASE("parser constructs", "[postings]") {
  CHECK(P("") == "*:*");
  CHECK(P("*") == "*:*");
  CHECK(P("*:*") == "*:*");
  CHECK(P("word") == "word");
  CHECK(P("title:word") == "title:word");
  CHECK(P("author.name:bob") == "author.name:bob");
  CHECK(P("\"a phrase\"") == "\"a phrase\"");
  CHECK(P("\"a phrase\"~2") == "\"a phrase\"~2");
  CHECK(P("body:\"a \\\"quoted\\\" phrase\"") == "body:\"a \"quoted\" phrase\"");
  CHECK(P("pre*") == "pre*");
  CHECK(P("word~") == "word~2");
  CHECK(P("word~1") == "word~1");
  CHECK(P("word~0") == "word~0");
  CHECK(P("word^3") == "word^3");
  CHECK(P("word^0.5") == "word^0.5");
  CHECK(P("word~1^2") == "word~1^2");
  CHECK(P("\"a b\"~3^2") == "\"a b\"~3^2");
  CHECK(P("score:[10 TO 20]") == "score:[10 TO 20]");
  CHECK(P("score:{10 TO 20}") == "score:{10 TO 20}");
  CHECK(P("score:[10 TO 20}") == "score:[10 TO 20}");
  CHECK(P("d:[2024-01-01 TO *]") == "d:[2024-01-01 TO *]");
  CHECK(P("d:[* TO \"2024-01-01T10:00:00Z\"]") == "d:[* TO 2024-01-01T10:00:00Z]");
  CHECK(P("score:*") == "score:[* TO *]");
  CHECK(P("a\\:b") == "a:b");
  CHECK(P("foo-bar") == "foo-bar");
  CHECK(P("c++") == "c++");
  // Lucene's readings of sloppy and fuzzy suffixes (FuzzyQuery.floatToEdits).
  CHECK(P("\"a b\"~") == "\"a b\"");
  CHECK(P("\"a b\"~2.5") == "\"a b\"~2");
  CHECK(P("\"a b\"~x") == "(\"a b\" x)");
  CHECK(P("word~3") == "word~2");
  CHECK(P("word~1.5") == "word~1");
  CHECK(P("abcd~0.5") == "abcd~2");
  CHECK(P("abcdefghij~0.85") == "abcdefghij~1");
  CHECK(P("\"AND\" \\OR") == "(\"AND\" OR)");
}

TEST_CASE("parser boolean structure follows Lucene", "[postings]") {
  CHECK(P("a b") == "(a b)");
  CHECK(P("a b", DefaultOperator::kAnd) == "(+a +b)");
  CHECK(P("a AND b") == "(+a +b)");
  CHECK(P("a && b") == "(+a +b)");
  CHECK(P("a OR b") == "(a b)");
  CHECK(P("a || b") == "(a b)");
  CHECK(P("a OR b", DefaultOperator::kAnd) == "(a b)");
  CHECK(P("a AND b OR c") == "(+a +b c)");
  CHECK(P("a AND b OR c", DefaultOperator::kAnd) == "(+a b c)");
  CHECK(P("a b AND c") == "(a +b +c)");
  CHECK(P("+a -b c") == "(+a -b c)");
  CHECK(P("a NOT b") == "(a -b)");
  CHECK(P("a AND NOT b") == "(+a -b)");
  CHECK(P("!b a") == "(-b a)");
  CHECK(P("NOT b") == "(-b)");
  CHECK(P("-b") == "(-b)");
  CHECK(P("(a OR b) AND c") == "(+(a b) +c)");
  CHECK(P("(a b)^2 c") == "((a b)^2 c)");
  CHECK(P("title:(a b)") == "(title:a title:b)");
  CHECK(P("title:(a body:b)") == "(title:a body:b)");
  CHECK(P("((a))") == "a");
  CHECK(P("(a)^2") == "a^2");
  CHECK(P("a AND (b OR (c AND -d))") == "(+a +(b (+c -d)))");
  CHECK(P("  a   b  ") == "(a b)");
  CHECK(P("ANDROID ORACLE NOTE") == "(ANDROID ORACLE NOTE)");
  // A modifier apart from its clause, as Lucene's lexer reads it.
  CHECK(P("a - b") == "(a -b)");
  CHECK(P("a + b") == "(a +b)");
  CHECK(P("a ! b") == "(a -b)");
}

TEST_CASE("parser errors carry offsets", "[postings]") {
  auto err = [](std::string_view q) {
    auto r = ParseQuery(q, DefaultOperator::kOr);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    return r.status().message();
  };
  CHECK_THAT(err("\"abc"), Catch::Contains("unterminated phrase at offset 0"));
  CHECK_THAT(err("x \"abc"), Catch::Contains("unterminated phrase at offset 2"));
  CHECK_THAT(err("(a b"), Catch::Contains("missing ')' for '(' at offset 0"));
  CHECK_THAT(err("a b)"), Catch::Contains("unexpected ')' at offset 3"));
  CHECK_THAT(err("()"), Catch::Contains("empty group at offset 0"));
  CHECK_THAT(err("AND a"), Catch::Contains("AND without a left operand at offset 0"));
  CHECK_THAT(err("a OR"), Catch::Contains("OR without a right operand at offset 2"));
  CHECK_THAT(err("a AND "), Catch::Contains("AND without a right operand at offset 2"));
  CHECK_THAT(err("OR"), Catch::Contains("OR without a left operand at offset 0"));
  CHECK_THAT(err("a +"), Catch::Contains("operator without an operand at offset 2"));
  CHECK_THAT(err("a - "), Catch::Contains("operator without an operand at offset 2"));
  CHECK_THAT(err("(a -)"), Catch::Contains("operator without an operand at offset 3"));
  CHECK_THAT(err("a AND AND b"), Catch::Contains("'AND' where a term was expected (quote it to search for the word) at offset 6"));
  CHECK_THAT(err("a AND OR b"), Catch::Contains("'OR' where a term was expected"));
  CHECK_THAT(err("a NOT NOT b"), Catch::Contains("'NOT' where a term was expected (quote it to search for the word) at offset 6"));
  // One modifier per clause (Lucene's grammar refuses "+-a" too).
  CHECK_THAT(err("a +-b"), Catch::Contains("'-' after an operator (one of + - ! NOT per clause) at offset 3"));
  CHECK_THAT(err("-+a"), Catch::Contains("'+' after an operator (one of + - ! NOT per clause) at offset 1"));
  CHECK_THAT(err("NOT -a"), Catch::Contains("'-' after an operator (one of + - ! NOT per clause) at offset 4"));
  CHECK_THAT(err("a - !b"), Catch::Contains("'!' after an operator (one of + - ! NOT per clause) at offset 4"));
  CHECK_THAT(err("--a"), Catch::Contains("at offset 1"));
  CHECK_THAT(err("a -NOT b"), Catch::Contains("'NOT' where a term was expected"));
  CHECK_THAT(err("(AND)"), Catch::Contains("'AND' where a term was expected (quote it to search for the word) at offset 1"));
  CHECK_THAT(err("title:OR"), Catch::Contains("'OR' where a term was expected"));
  CHECK_THAT(err("title:"), Catch::Contains("expected a term after 'title:' at offset 0"));
  CHECK_THAT(err("title: x"), Catch::Contains("expected a term after 'title:' at offset 0"));
  CHECK_THAT(err("a^"), Catch::Contains("expected a number at offset 1"));
  CHECK_THAT(err("a^x"), Catch::Contains("expected a number at offset 1"));
  CHECK_THAT(err("a^0"), Catch::Contains("boost must be > 0 at offset 1"));
  CHECK_THAT(err("a^1.2.3"), Catch::Contains("malformed number at offset 2"));
  CHECK_THAT(err("a~1.2.3"), Catch::Contains("malformed number at offset 2"));
  CHECK_THAT(err("pre*~1"), Catch::Contains("'~' applies to a term or a phrase at offset 4"));
  CHECK_THAT(err("te?t~1"), Catch::Contains("'~' applies to a term or a phrase at offset 4"));
  CHECK_THAT(err("n:[1 2]"), Catch::Contains("expected 'TO' in range at offset 5"));
  CHECK_THAT(err("n:[1 TO 2"), Catch::Contains("missing ']' or '}' for range at offset 2"));
  CHECK_THAT(err("n:[1 TO"), Catch::Contains("unterminated range at offset 7"));
  CHECK_THAT(err("n:[\"1 TO 2]"), Catch::Contains("unterminated quoted string at offset 3"));
  CHECK_THAT(err("a ]"), Catch::Contains("unexpected ']' at offset 2"));
  CHECK_THAT(err("a ^2"), Catch::Contains("unexpected '^' at offset 2"));
  std::string deep(300, '(');
  CHECK_THAT(err(deep + "a" + std::string(300, ')')), Catch::Contains("nesting deeper than 256"));
}

}  // namespace
}  // namespace corvid::postings
