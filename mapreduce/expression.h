// The map/reduce expression language (API.md "Map/reduce index"): a
// tokenizer and recursive-descent parser to an AST, compiled once per
// definition, and an evaluator that walks the AST straight over a parsed
// RapidJSON document. Semantics (types, nulls, errors) are in README.md.
//
// Thread safety: a parsed Node tree is immutable and may be evaluated by any
// number of threads, each with its own EvalContext.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <rapidjson/document.h>

#include "common/status.h"

namespace corvid::mapreduce {

enum class ValueType : uint8_t { kMissing, kNull, kBool, kInt, kDouble, kString, kArray, kObject };

// A value during evaluation. Strings are views: into the document, into a
// literal of the AST, or into the EvalContext's arena; arrays and objects
// point into the document. Valid while the document and context live.
struct Value {
  ValueType type = ValueType::kMissing;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string_view s;
  const rapidjson::Value* json = nullptr;

  static Value Null() { Value v; v.type = ValueType::kNull; return v; }
  static Value Bool(bool x) { Value v; v.type = ValueType::kBool; v.b = x; return v; }
  static Value Int(int64_t x) { Value v; v.type = ValueType::kInt; v.i = x; return v; }
  static Value Double(double x) { Value v; v.type = ValueType::kDouble; v.d = x; return v; }
  static Value String(std::string_view x) { Value v; v.type = ValueType::kString; v.s = x; return v; }
  static Value FromJson(const rapidjson::Value& j);

  bool IsNullish() const { return type == ValueType::kMissing || type == ValueType::kNull; }
  bool IsNumber() const { return type == ValueType::kInt || type == ValueType::kDouble; }
  double AsDouble() const { return type == ValueType::kInt ? double(i) : d; }
};

enum class NodeKind : uint8_t {
  kLiteral,
  kField,      // a dotted path from the document root
  kMember,     // args[0] then a dotted path
  kMapRef,     // a map output (reducer arguments only); slot = map index
  kUnwind,     // unwind(args[0]); slot = unwind variable
  kNeg,
  kNot,
  kAnd,
  kOr,
  kBinary,
  kCall,
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kEq, kNe, kLt, kLe, kGt, kGe };

enum class Func : uint8_t {
  kSubstr, kLower, kUpper, kLen, kConcat, kCoalesce, kYear, kMonth, kDay, kDateTrunc, kIf, kUnwind,
};

struct Node {
  NodeKind kind = NodeKind::kLiteral;
  BinOp op = BinOp::kAdd;
  Func fn = Func::kSubstr;
  uint32_t offset = 0;  // byte offset of the node's first token in the source
  int slot = -1;
  Value literal;
  std::string text;                // a string literal's bytes (literal.s views it)
  std::vector<std::string> path;  // kField / kMember segments
  std::vector<std::unique_ptr<Node>> args;
  uint32_t height = 1;  // levels from this node down to its deepest leaf
};

// The deepest expression tree (and parenthesis or operator nesting) a
// definition may hold, as a document's JSON nesting: evaluating, visiting
// and freeing a tree recurse once per level on a thread's stack.
inline constexpr uint32_t kMaxExpressionDepth = 256;

// How identifiers resolve while parsing.
struct ParseOptions {
  // Reducer arguments: identifiers name map outputs (kMapRef); an unknown
  // name is an error. Empty: identifiers are document field paths.
  std::span<const std::string> map_names;
  bool resolve_map_names = false;
  bool allow_unwind = true;
};

// Parses `source`. Errors are InvalidArgumentAt ("<what> at offset N",
// Status::offset N); the caller prefixes the definition field
// ("map.month: ", Status::Prefixed).
Result<std::unique_ptr<Node>> ParseExpression(std::string_view source, const ParseOptions& options);

// Appends a canonical, fully parenthesised rendering of `node` (equal for
// expressions that differ only in spacing, quoting or keyword spelling).
void CanonicalForm(const Node& node, std::string* out);

// Calls fn(node) for every node of the tree, parents first.
template <typename Fn>
void VisitNodes(Node& node, const Fn& fn) {
  fn(node);
  for (auto& a : node.args) VisitNodes(*a, fn);
}

// Per-thread evaluation state: the document, the current unwind elements and
// map outputs, an arena for computed strings, the last error.
class EvalContext {
 public:
  const rapidjson::Value* doc = nullptr;
  std::span<const Value> unwind_values;
  std::span<const Value> map_values;

  // Forgets arena strings (their storage is kept for reuse).
  void ResetArena() { arena_used_ = 0; }
  // A scratch string whose data stays put until ResetArena (deque elements
  // never move).
  std::string& NewString();

  bool Fail(const Node& at, std::string_view message);
  const std::string& error() const { return error_; }

 private:
  std::deque<std::string> arena_;
  size_t arena_used_ = 0;
  std::string error_;
};

// Evaluates `node`; returns false with ctx.error() set ("<message> at
// offset N") on an evaluation error.
bool Evaluate(const Node& node, EvalContext& ctx, Value* out);

// Appends `v` as JSON would print it (strings quoted and escaped; doubles
// shortest round-trip with ".0" when integral; non-finite as null). A
// frozen printer: definition fingerprints (stored with each index) and
// canonical forms are made with it, and string() of a number; answers are
// written with RapidJSON's writer (query.cc).
void AppendJson(const Value& v, std::string* out);
void AppendJsonDouble(double d, std::string* out);

// Truthiness for if/&&/||/!: false, null, missing, 0, "" are false.
bool Truthy(const Value& v);
// Two numbers (kInt or kDouble) in numeric order: -1, 0 or 1. Integers
// compare exactly; a mix compares as long double.
inline int CompareNumbers(const Value& a, const Value& b) {
  if (a.type == ValueType::kInt && b.type == ValueType::kInt) return a.i < b.i ? -1 : (a.i > b.i ? 1 : 0);
  const long double x = a.type == ValueType::kInt ? (long double)a.i : (long double)a.d;
  const long double y = b.type == ValueType::kInt ? (long double)b.i : (long double)b.d;
  return x < y ? -1 : (x > y ? 1 : 0);
}

}  // namespace corvid::mapreduce
