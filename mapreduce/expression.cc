// Tokenizer, parser and evaluator of the map/reduce expression language.
// The evaluator allocates nothing on the common paths: field access, substr,
// date functions and comparisons return views into the document; only
// computed strings (concat, changed case) use the context's reusable arena.
#include "mapreduce/expression.h"

#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <charconv>
#include <cmath>
#include <cstring>

#include "common/json_string.h"
#include "common/utf8.h"

namespace corvid::mapreduce {
namespace {

// ---------------------------------------------------------------- tokens

enum class Tok : uint8_t {
  kEnd, kIdent, kQuotedIdent, kNumber, kString, kLParen, kRParen, kComma, kDot,
  kPlus, kMinus, kStar, kSlash, kEq, kNe, kLt, kLe, kGt, kGe, kAnd, kOr, kNot,
};

struct Token {
  Tok type = Tok::kEnd;
  uint32_t offset = 0;
  std::string_view raw;  // source bytes of the token
  std::string text;      // decoded string literal / quoted identifier
};

bool IsIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

Status Tokenize(std::string_view src, std::vector<Token>* out) {
  size_t i = 0;
  auto hex4 = [&](size_t at, uint32_t* cp) {
    if (at + 4 > src.size()) return false;
    uint32_t v = 0;
    for (size_t k = at; k < at + 4; ++k) {
      char c = src[k];
      v <<= 4;
      if (IsDigit(c)) v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else return false;
    }
    *cp = v;
    return true;
  };
  while (i < src.size()) {
    char c = src[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
      continue;
    }
    Token t;
    t.offset = uint32_t(i);
    size_t start = i;
    if (IsIdentStart(c)) {
      while (i < src.size() && IsIdentChar(src[i])) ++i;
      t.type = Tok::kIdent;
    } else if (IsDigit(c)) {
      while (i < src.size() && IsDigit(src[i])) ++i;
      if (i + 1 < src.size() && src[i] == '.' && IsDigit(src[i + 1])) {
        ++i;
        while (i < src.size() && IsDigit(src[i])) ++i;
      }
      if (i < src.size() && (src[i] == 'e' || src[i] == 'E')) {
        size_t j = i + 1;
        if (j < src.size() && (src[j] == '+' || src[j] == '-')) ++j;
        if (j < src.size() && IsDigit(src[j])) {
          i = j;
          while (i < src.size() && IsDigit(src[i])) ++i;
        }
      }
      if (i < src.size() && IsIdentChar(src[i])) return Status::InvalidArgumentAt("malformed number", t.offset);
      t.type = Tok::kNumber;
    } else if (c == '\'' || c == '"' || c == '`') {
      char quote = c;
      ++i;
      bool closed = false;
      while (i < src.size()) {
        char ch = src[i];
        if (ch == quote) {
          ++i;
          closed = true;
          break;
        }
        if (ch == '\\' && quote != '`') {
          if (i + 1 >= src.size()) break;
          char e = src[i + 1];
          i += 2;
          switch (e) {
            case 'n': t.text.push_back('\n'); break;
            case 't': t.text.push_back('\t'); break;
            case 'r': t.text.push_back('\r'); break;
            case 'b': t.text.push_back('\b'); break;
            case 'f': t.text.push_back('\f'); break;
            case '\\': case '\'': case '"': case '/': t.text.push_back(e); break;
            case 'u': {
              uint32_t cp;
              if (!hex4(i, &cp)) return Status::InvalidArgumentAt("bad \\u escape", uint32_t(i - 2));
              i += 4;
              if (cp >= 0xD800 && cp < 0xDC00) {
                uint32_t lo;
                if (i + 1 < src.size() && src[i] == '\\' && src[i + 1] == 'u' && hex4(i + 2, &lo) && lo >= 0xDC00 &&
                    lo < 0xE000) {
                  cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                  i += 6;
                } else {
                  return Status::InvalidArgumentAt("unpaired surrogate in \\u escape", uint32_t(i - 6));
                }
              } else if (cp >= 0xDC00 && cp < 0xE000) {
                return Status::InvalidArgumentAt("unpaired surrogate in \\u escape", uint32_t(i - 6));
              }
              AppendUtf8(t.text, cp);
              break;
            }
            default:
              return Status::InvalidArgumentAt("unknown escape in string", uint32_t(i - 2));
          }
          continue;
        }
        t.text.push_back(ch);
        ++i;
      }
      if (!closed) return Status::InvalidArgumentAt("unterminated string", t.offset);
      t.type = quote == '`' ? Tok::kQuotedIdent : Tok::kString;
      if (quote == '`' && t.text.empty()) return Status::InvalidArgumentAt("empty quoted name", t.offset);
    } else {
      auto two = [&](char second) { return i + 1 < src.size() && src[i + 1] == second; };
      switch (c) {
        case '(': t.type = Tok::kLParen; ++i; break;
        case ')': t.type = Tok::kRParen; ++i; break;
        case ',': t.type = Tok::kComma; ++i; break;
        case '.': t.type = Tok::kDot; ++i; break;
        case '+': t.type = Tok::kPlus; ++i; break;
        case '-': t.type = Tok::kMinus; ++i; break;
        case '*': t.type = Tok::kStar; ++i; break;
        case '/': t.type = Tok::kSlash; ++i; break;
        case '=': t.type = Tok::kEq; i += two('=') ? 2 : 1; break;
        case '!': if (two('=')) { t.type = Tok::kNe; i += 2; } else { t.type = Tok::kNot; ++i; } break;
        case '<':
          if (two('=')) { t.type = Tok::kLe; i += 2; }
          else if (two('>')) { t.type = Tok::kNe; i += 2; }
          else { t.type = Tok::kLt; ++i; }
          break;
        case '>': if (two('=')) { t.type = Tok::kGe; i += 2; } else { t.type = Tok::kGt; ++i; } break;
        case '&':
          if (!two('&')) return Status::InvalidArgumentAt("unexpected '&' (use &&)", t.offset);
          t.type = Tok::kAnd; i += 2; break;
        case '|':
          if (!two('|')) return Status::InvalidArgumentAt("unexpected '|' (use ||)", t.offset);
          t.type = Tok::kOr; i += 2; break;
        default: {
          std::string msg = "unexpected character '";
          msg.push_back(c);
          msg += "'";
          return Status::InvalidArgumentAt(msg, t.offset);
        }
      }
    }
    t.raw = src.substr(start, i - start);
    if (t.type == Tok::kIdent) {
      std::string lower;
      for (char ch : t.raw) lower.push_back(char((ch >= 'A' && ch <= 'Z') ? ch + 32 : ch));
      if (lower == "and") t.type = Tok::kAnd;
      else if (lower == "or") t.type = Tok::kOr;
      else if (lower == "not") t.type = Tok::kNot;
    }
    out->push_back(std::move(t));
  }
  Token end;
  end.type = Tok::kEnd;
  end.offset = uint32_t(src.size());
  out->push_back(std::move(end));
  return Status::Ok();
}

// ---------------------------------------------------------------- parser

struct FuncInfo {
  const char* name;
  Func fn;
  int min_args;
  int max_args;  // -1: any
};
constexpr FuncInfo kFuncs[] = {
    {"substr", Func::kSubstr, 2, 3},  {"lower", Func::kLower, 1, 1},         {"upper", Func::kUpper, 1, 1},
    {"len", Func::kLen, 1, 1},        {"concat", Func::kConcat, 0, -1},      {"coalesce", Func::kCoalesce, 1, -1},
    {"year", Func::kYear, 1, 1},      {"month", Func::kMonth, 1, 1},         {"day", Func::kDay, 1, 1},
    {"date_trunc", Func::kDateTrunc, 2, 2}, {"if", Func::kIf, 3, 3},         {"unwind", Func::kUnwind, 1, 1},
};

const FuncInfo& InfoOf(Func fn) {
  for (const auto& f : kFuncs)
    if (f.fn == fn) return f;
  return kFuncs[0];
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, const ParseOptions& options) : toks_(std::move(tokens)), opt_(options) {}

  Result<std::unique_ptr<Node>> ParseAll() {
    if (Peek().type == Tok::kEnd) return Status::InvalidArgumentAt("empty expression", 0);
    auto n = ParseOr();
    if (!n.ok()) return n;
    if (Peek().type != Tok::kEnd) return Unexpected();
    return n;
  }

 private:
  const Token& Peek() const { return toks_[pos_]; }
  const Token& Next() { return toks_[pos_++]; }

  Status Unexpected() const {
    const Token& t = Peek();
    if (t.type == Tok::kEnd) return Status::InvalidArgumentAt("unexpected end of expression", t.offset);
    return Status::InvalidArgumentAt("unexpected '" + std::string(t.raw) + "'", t.offset);
  }

  Status TooDeep(uint32_t offset) const {
    return Status::InvalidArgumentAt(
        "expression nested deeper than " + std::to_string(kMaxExpressionDepth) + " levels", offset);
  }

  // Appends `child` to `parent`'s arguments; an error once the tree is
  // deeper than kMaxExpressionDepth ("x+x+...+x" grows one level a term).
  Status Adopt(Node& parent, std::unique_ptr<Node> child) const {
    parent.height = std::max(parent.height, child->height + 1);
    parent.args.push_back(std::move(child));
    return parent.height > kMaxExpressionDepth ? TooDeep(parent.offset) : Status::Ok();
  }

  // Bounds the parser's own recursion (parentheses, call arguments and
  // prefix operators nest without adding tree levels).
  class Nesting {
   public:
    explicit Nesting(uint32_t& depth) : depth_(depth) { ++depth_; }
    ~Nesting() { --depth_; }
    bool too_deep() const { return depth_ > kMaxExpressionDepth; }

   private:
    uint32_t& depth_;
  };

  static std::unique_ptr<Node> Make(NodeKind kind, uint32_t offset) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->offset = offset;
    return n;
  }

  Result<std::unique_ptr<Node>> ParseOr() {
    Nesting nest(depth_);
    if (nest.too_deep()) return TooDeep(Peek().offset);
    auto left = ParseAnd();
    if (!left.ok()) return left;
    std::unique_ptr<Node> n = std::move(left).value();
    while (Peek().type == Tok::kOr) {
      Next();
      auto right = ParseAnd();
      if (!right.ok()) return right;
      auto parent = Make(NodeKind::kOr, n->offset);
      if (Status st = Adopt(*parent, std::move(n)); !st.ok()) return st;
      if (Status st = Adopt(*parent, std::move(right).value()); !st.ok()) return st;
      n = std::move(parent);
    }
    return n;
  }

  Result<std::unique_ptr<Node>> ParseAnd() {
    auto left = ParseNot();
    if (!left.ok()) return left;
    std::unique_ptr<Node> n = std::move(left).value();
    while (Peek().type == Tok::kAnd) {
      Next();
      auto right = ParseNot();
      if (!right.ok()) return right;
      auto parent = Make(NodeKind::kAnd, n->offset);
      if (Status st = Adopt(*parent, std::move(n)); !st.ok()) return st;
      if (Status st = Adopt(*parent, std::move(right).value()); !st.ok()) return st;
      n = std::move(parent);
    }
    return n;
  }

  Result<std::unique_ptr<Node>> ParseNot() {
    if (Peek().type == Tok::kNot) {
      Nesting nest(depth_);
      if (nest.too_deep()) return TooDeep(Peek().offset);
      uint32_t off = Next().offset;
      auto inner = ParseNot();
      if (!inner.ok()) return inner;
      auto n = Make(NodeKind::kNot, off);
      if (Status st = Adopt(*n, std::move(inner).value()); !st.ok()) return st;
      return n;
    }
    return ParseCmp();
  }

  Result<std::unique_ptr<Node>> ParseCmp() {
    auto left = ParseAdd();
    if (!left.ok()) return left;
    std::unique_ptr<Node> n = std::move(left).value();
    BinOp op;
    switch (Peek().type) {
      case Tok::kEq: op = BinOp::kEq; break;
      case Tok::kNe: op = BinOp::kNe; break;
      case Tok::kLt: op = BinOp::kLt; break;
      case Tok::kLe: op = BinOp::kLe; break;
      case Tok::kGt: op = BinOp::kGt; break;
      case Tok::kGe: op = BinOp::kGe; break;
      default: return n;
    }
    Next();
    auto right = ParseAdd();
    if (!right.ok()) return right;
    auto parent = Make(NodeKind::kBinary, n->offset);
    parent->op = op;
    if (Status st = Adopt(*parent, std::move(n)); !st.ok()) return st;
    if (Status st = Adopt(*parent, std::move(right).value()); !st.ok()) return st;
    switch (Peek().type) {
      case Tok::kEq: case Tok::kNe: case Tok::kLt: case Tok::kLe: case Tok::kGt: case Tok::kGe:
        return Status::InvalidArgumentAt("chained comparison (use parentheses)", Peek().offset);
      default: break;
    }
    return parent;
  }

  Result<std::unique_ptr<Node>> ParseAdd() {
    return ParseLeftAssociative(&Parser::ParseMul, Tok::kPlus, BinOp::kAdd, Tok::kMinus, BinOp::kSub);
  }

  Result<std::unique_ptr<Node>> ParseMul() {
    return ParseLeftAssociative(&Parser::ParseUnary, Tok::kStar, BinOp::kMul, Tok::kSlash, BinOp::kDiv);
  }

  // operand ((tok_a | tok_b) operand)*, folded to the left.
  Result<std::unique_ptr<Node>> ParseLeftAssociative(Result<std::unique_ptr<Node>> (Parser::*operand)(), Tok tok_a,
                                                     BinOp op_a, Tok tok_b, BinOp op_b) {
    auto left = (this->*operand)();
    if (!left.ok()) return left;
    std::unique_ptr<Node> n = std::move(left).value();
    while (Peek().type == tok_a || Peek().type == tok_b) {
      BinOp op = Next().type == tok_a ? op_a : op_b;
      auto right = (this->*operand)();
      if (!right.ok()) return right;
      auto parent = Make(NodeKind::kBinary, n->offset);
      parent->op = op;
      if (Status st = Adopt(*parent, std::move(n)); !st.ok()) return st;
      if (Status st = Adopt(*parent, std::move(right).value()); !st.ok()) return st;
      n = std::move(parent);
    }
    return n;
  }

  Result<std::unique_ptr<Node>> ParseUnary() {
    if (Peek().type == Tok::kMinus) {
      Nesting nest(depth_);
      if (nest.too_deep()) return TooDeep(Peek().offset);
      uint32_t off = Next().offset;
      auto inner = ParseUnary();
      if (!inner.ok()) return inner;
      std::unique_ptr<Node> in = std::move(inner).value();
      // Fold a negated number literal (so -9223372036854775808 stays an int).
      if (in->kind == NodeKind::kLiteral && in->literal.IsNumber()) {
        if (in->literal.type == ValueType::kInt && in->literal.i != INT64_MIN) {
          in->literal.i = -in->literal.i;
        } else if (in->literal.type == ValueType::kDouble && in->literal.d == 9223372036854775808.0 &&
                   in->text == "9223372036854775808") {
          in->literal = Value::Int(INT64_MIN);
        } else if (in->literal.type == ValueType::kDouble) {
          in->literal.d = -in->literal.d;
        } else {
          in->literal = Value::Double(9223372036854775808.0);
        }
        in->offset = off;
        return in;
      }
      auto n = Make(NodeKind::kNeg, off);
      if (Status st = Adopt(*n, std::move(in)); !st.ok()) return st;
      return n;
    }
    return ParsePostfix();
  }

  Result<std::unique_ptr<Node>> ParsePostfix() {
    auto prim = ParsePrimary();
    if (!prim.ok()) return prim;
    std::unique_ptr<Node> n = std::move(prim).value();
    while (Peek().type == Tok::kDot) {
      Next();
      const Token& name = Peek();
      if (name.type != Tok::kIdent && name.type != Tok::kQuotedIdent) return Unexpected();
      std::string seg = name.type == Tok::kIdent ? std::string(name.raw) : name.text;
      Next();
      if (n->kind == NodeKind::kField || n->kind == NodeKind::kMember) {
        n->path.push_back(std::move(seg));
      } else {
        auto m = Make(NodeKind::kMember, n->offset);
        m->path.push_back(std::move(seg));
        if (Status st = Adopt(*m, std::move(n)); !st.ok()) return st;
        n = std::move(m);
      }
    }
    return n;
  }

  Result<std::unique_ptr<Node>> ParsePrimary() {
    const Token& t = Peek();
    switch (t.type) {
      case Tok::kNumber: {
        Next();
        auto n = Make(NodeKind::kLiteral, t.offset);
        n->text = std::string(t.raw);
        bool is_int = t.raw.find_first_of(".eE") == std::string_view::npos;
        int64_t iv;
        if (is_int) {
          auto r = std::from_chars(t.raw.data(), t.raw.data() + t.raw.size(), iv);
          if (r.ec == std::errc() && r.ptr == t.raw.data() + t.raw.size()) {
            n->literal = Value::Int(iv);
            return n;
          }
        }
        double dv = 0;
        auto r = std::from_chars(t.raw.data(), t.raw.data() + t.raw.size(), dv);
        if (r.ec != std::errc() || !std::isfinite(dv))
          return Status::InvalidArgumentAt("number out of range", t.offset);
        n->literal = Value::Double(dv);
        return n;
      }
      case Tok::kString: {
        Next();
        auto n = Make(NodeKind::kLiteral, t.offset);
        n->text = t.text;
        n->literal = Value::String(std::string_view());  // fixed up below: views n->text
        n->literal.s = std::string_view(n->text);
        return n;
      }
      case Tok::kLParen: {
        Next();
        auto inner = ParseOr();
        if (!inner.ok()) return inner;
        if (Peek().type != Tok::kRParen) return Status::InvalidArgumentAt("expected ')'", Peek().offset);
        Next();
        return inner;
      }
      case Tok::kQuotedIdent:
        Next();
        return NameRef(t.text, t.offset);
      case Tok::kIdent: {
        Next();
        if (Peek().type == Tok::kLParen) return Call(t);
        if (t.raw == "true" || t.raw == "false") {
          auto n = Make(NodeKind::kLiteral, t.offset);
          n->literal = Value::Bool(t.raw == "true");
          return n;
        }
        if (t.raw == "null") {
          auto n = Make(NodeKind::kLiteral, t.offset);
          n->literal = Value::Null();
          return n;
        }
        return NameRef(std::string(t.raw), t.offset);
      }
      default:
        return Unexpected();
    }
  }

  Result<std::unique_ptr<Node>> NameRef(std::string name, uint32_t offset) {
    if (opt_.resolve_map_names) {
      for (size_t k = 0; k < opt_.map_names.size(); ++k) {
        if (opt_.map_names[k] == name) {
          auto n = Make(NodeKind::kMapRef, offset);
          n->slot = int(k);
          n->text = std::move(name);
          // A dotted path after a map name reads into the map's value.
          if (Peek().type == Tok::kDot) {
            auto m = Make(NodeKind::kMember, offset);
            if (Status st = Adopt(*m, std::move(n)); !st.ok()) return st;
            while (Peek().type == Tok::kDot) {
              Next();
              const Token& seg = Peek();
              if (seg.type != Tok::kIdent && seg.type != Tok::kQuotedIdent) return Unexpected();
              m->path.push_back(seg.type == Tok::kIdent ? std::string(seg.raw) : seg.text);
              Next();
            }
            return m;
          }
          return n;
        }
      }
      return Status::InvalidArgumentAt("unknown map name '" + name + "'", offset);
    }
    auto n = Make(NodeKind::kField, offset);
    n->path.push_back(std::move(name));
    return n;
  }

  Result<std::unique_ptr<Node>> Call(const Token& name_tok) {
    std::string lname;
    for (char ch : name_tok.raw) lname.push_back(char((ch >= 'A' && ch <= 'Z') ? ch + 32 : ch));
    const FuncInfo* info = nullptr;
    for (const auto& f : kFuncs)
      if (lname == f.name) info = &f;
    if (!info) return Status::InvalidArgumentAt("unknown function '" + std::string(name_tok.raw) + "'", name_tok.offset);
    Next();  // '('
    auto n = Make(NodeKind::kCall, name_tok.offset);
    n->fn = info->fn;
    if (Peek().type != Tok::kRParen) {
      while (true) {
        auto arg = ParseOr();
        if (!arg.ok()) return arg;
        if (Status st = Adopt(*n, std::move(arg).value()); !st.ok()) return st;
        if (Peek().type == Tok::kComma) {
          Next();
          continue;
        }
        if (Peek().type == Tok::kRParen) break;
        return Status::InvalidArgumentAt("expected ',' or ')'", Peek().offset);
      }
    }
    Next();  // ')'
    int argc = int(n->args.size());
    if (argc < info->min_args || (info->max_args >= 0 && argc > info->max_args)) {
      std::string msg = std::string(info->name) + " takes ";
      if (info->max_args < 0) msg += "at least " + std::to_string(info->min_args);
      else if (info->min_args == info->max_args) msg += std::to_string(info->min_args);
      else msg += std::to_string(info->min_args) + " or " + std::to_string(info->max_args);
      msg += info->max_args == 1 ? " argument" : " arguments";
      return Status::InvalidArgumentAt(msg, name_tok.offset);
    }
    if (info->fn == Func::kDateTrunc && n->args[0]->kind == NodeKind::kLiteral) {
      const Value& u = n->args[0]->literal;
      if (u.type != ValueType::kString ||
          (u.s != "year" && u.s != "month" && u.s != "day" && u.s != "hour"))
        return Status::InvalidArgumentAt("date_trunc unit must be 'year', 'month', 'day' or 'hour'",
                                         n->args[0]->offset);
    }
    if (info->fn == Func::kUnwind) {
      if (!opt_.allow_unwind) return Status::InvalidArgumentAt("unwind is only allowed in map expressions", n->offset);
      bool nested = false;
      VisitNodes(*n->args[0], [&](Node& c) { nested |= c.kind == NodeKind::kUnwind; });
      if (nested) return Status::InvalidArgumentAt("unwind cannot be nested", n->offset);
      n->kind = NodeKind::kUnwind;
    }
    return n;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  uint32_t depth_ = 0;  // ParseOr, ParseNot and ParseUnary calls active (Nesting)
  const ParseOptions& opt_;
};

// ---------------------------------------------------------------- helpers

const char* TypeName(ValueType t) {
  switch (t) {
    case ValueType::kMissing: return "missing";
    case ValueType::kNull: return "null";
    case ValueType::kBool: return "bool";
    case ValueType::kInt: case ValueType::kDouble: return "number";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kObject: return "object";
  }
  return "?";
}

// Byte offset of code point `cp` (clamped to the end).
size_t ByteOffsetOfCodePoint(std::string_view s, size_t from_byte, size_t cps) {
  size_t i = from_byte;
  while (cps > 0 && i < s.size()) {
    ++i;
    while (i < s.size() && (uint8_t(s[i]) & 0xC0) == 0x80) ++i;
    --cps;
  }
  return i;
}

bool IntegralArg(const Node& at, const Value& v, EvalContext& ctx, const char* what, int64_t* out) {
  if (v.type == ValueType::kInt) {
    *out = v.i;
    return true;
  }
  if (v.type == ValueType::kDouble && std::floor(v.d) == v.d && std::fabs(v.d) < 9.2e18) {
    *out = int64_t(v.d);
    return true;
  }
  return ctx.Fail(at, std::string(what) + " must be an integer, got " + TypeName(v.type));
}

// An ISO-8601 date or date-time prefix. precision: 1 year, 2 month, 3 day,
// 4 hour; 0 when `s` is not a date. hour_sep: the byte before the hour.
struct IsoDate {
  int precision = 0;
  int year = 0, month = 0, day = 0, hour = 0;
  char hour_sep = 'T';
};

int Digits(std::string_view s, size_t at, size_t n) {
  if (at + n > s.size()) return -1;
  int v = 0;
  for (size_t k = at; k < at + n; ++k) {
    if (!IsDigit(s[k])) return -1;
    v = v * 10 + (s[k] - '0');
  }
  return v;
}

IsoDate ParseIsoDate(std::string_view s) {
  IsoDate r;
  int y = Digits(s, 0, 4);
  if (y < 0) return r;
  if (s.size() == 4) return IsoDate{1, y, 0, 0, 0, 'T'};
  if (s[4] != '-') return r;
  int m = Digits(s, 5, 2);
  if (m < 1 || m > 12) return r;
  if (s.size() == 7) return IsoDate{2, y, m, 0, 0, 'T'};
  if (s[7] != '-') return r;
  int d = Digits(s, 8, 2);
  static constexpr int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  int max_day = (m == 2 && !leap) ? 28 : kDays[m - 1];
  if (d < 1 || d > max_day) return r;
  if (s.size() == 10) return IsoDate{3, y, m, d, 0, 'T'};
  char sep = s[10];
  if (sep != 'T' && sep != 't' && sep != ' ') return r;
  int h = Digits(s, 11, 2);
  if (h < 0 || h > 24) return IsoDate{3, y, m, d, 0, 'T'};
  return IsoDate{4, y, m, d, h, sep};
}

bool Arithmetic(const Node& n, const Value& a, const Value& b, EvalContext& ctx, Value* out) {
  if (a.IsNullish() || b.IsNullish()) {
    *out = Value::Null();
    return true;
  }
  if (!a.IsNumber() || !b.IsNumber()) {
    static constexpr const char* kOps[] = {"+", "-", "*", "/"};
    return ctx.Fail(n, std::string("'") + kOps[int(n.op)] + "' needs numbers, got " + TypeName(a.type) + " and " +
                           TypeName(b.type));
  }
  if (a.type == ValueType::kInt && b.type == ValueType::kInt) {
    int64_t r;
    switch (n.op) {
      case BinOp::kAdd:
        if (!__builtin_add_overflow(a.i, b.i, &r)) { *out = Value::Int(r); return true; }
        break;
      case BinOp::kSub:
        if (!__builtin_sub_overflow(a.i, b.i, &r)) { *out = Value::Int(r); return true; }
        break;
      case BinOp::kMul:
        if (!__builtin_mul_overflow(a.i, b.i, &r)) { *out = Value::Int(r); return true; }
        break;
      case BinOp::kDiv:
        if (b.i == 0) { *out = Value::Null(); return true; }
        if (!(a.i == INT64_MIN && b.i == -1) && a.i % b.i == 0) { *out = Value::Int(a.i / b.i); return true; }
        break;
      default: break;
    }
  }
  double x = a.AsDouble(), y = b.AsDouble(), r = 0;
  switch (n.op) {
    case BinOp::kAdd: r = x + y; break;
    case BinOp::kSub: r = x - y; break;
    case BinOp::kMul: r = x * y; break;
    case BinOp::kDiv:
      if (y == 0) { *out = Value::Null(); return true; }
      r = x / y;
      break;
    default: break;
  }
  *out = std::isfinite(r) ? Value::Double(r) : Value::Null();
  return true;
}

bool Equal(const Value& a, const Value& b) {
  if (a.IsNullish() || b.IsNullish()) return a.IsNullish() && b.IsNullish();
  if (a.IsNumber() && b.IsNumber()) return CompareNumbers(a, b) == 0;
  if (a.type != b.type) return false;
  switch (a.type) {
    case ValueType::kBool: return a.b == b.b;
    case ValueType::kString: return a.s == b.s;
    default: return a.json == b.json;
  }
}

// <0, 0, >0; or 2 when the values are not ordered against each other.
int Order(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) return CompareNumbers(a, b);
  if (a.type != b.type) return 2;
  if (a.type == ValueType::kString) {
    int c = a.s.compare(b.s);
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.type == ValueType::kBool) return int(a.b) - int(b.b);
  return 2;
}

bool ChangeCase(const Node& n, const Value& v, bool upper, EvalContext& ctx, Value* out) {
  if (v.IsNullish()) { *out = Value::Null(); return true; }
  if (v.type != ValueType::kString)
    return ctx.Fail(n, std::string(upper ? "upper" : "lower") + " needs a string, got " + TypeName(v.type));
  bool ascii = true, change = false;
  for (unsigned char c : v.s) {
    if (c >= 0x80) { ascii = false; break; }
    if (upper ? (c >= 'a' && c <= 'z') : (c >= 'A' && c <= 'Z')) change = true;
  }
  if (ascii && !change) { *out = v; return true; }
  std::string& s = ctx.NewString();
  if (ascii) {
    s.assign(v.s);
    for (char& c : s) {
      if (upper && c >= 'a' && c <= 'z') c = char(c - 32);
      if (!upper && c >= 'A' && c <= 'Z') c = char(c + 32);
    }
  } else {
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(v.s.data(), int32_t(v.s.size())));
    if (upper) u.toUpper(icu::Locale::getRoot());
    else u.toLower(icu::Locale::getRoot());
    u.toUTF8String(s);
  }
  *out = Value::String(s);
  return true;
}

// The longest string concat builds: a document asking for more is an
// index error of its own (checked before the bytes are appended), never a
// batch that cannot be applied.
constexpr size_t kMaxConcatBytes = 64 * 1024;

bool AppendConcat(const Node& n, const Value& v, EvalContext& ctx, std::string* s) {
  switch (v.type) {
    case ValueType::kMissing: case ValueType::kNull: return true;
    case ValueType::kString:
      if (s->size() + v.s.size() > kMaxConcatBytes)
        return ctx.Fail(n, "concat would build more than " + std::to_string(kMaxConcatBytes) + " bytes");
      s->append(v.s);
      return true;
    case ValueType::kBool: case ValueType::kInt: case ValueType::kDouble: AppendJson(v, s); return true;
    default: return ctx.Fail(n, std::string("concat cannot format ") + TypeName(v.type));
  }
}

bool CallFunction(const Node& n, EvalContext& ctx, Value* out) {
  Value a;
  switch (n.fn) {
    case Func::kIf: {
      if (!Evaluate(*n.args[0], ctx, &a)) return false;
      return Evaluate(*n.args[Truthy(a) ? 1 : 2], ctx, out);
    }
    case Func::kCoalesce: {
      for (const auto& arg : n.args) {
        if (!Evaluate(*arg, ctx, out)) return false;
        if (!out->IsNullish()) return true;
      }
      *out = Value::Null();
      return true;
    }
    case Func::kConcat: {
      // Fast path: evaluate into one arena string.
      std::string& s = ctx.NewString();
      s.clear();
      for (const auto& arg : n.args) {
        if (!Evaluate(*arg, ctx, &a)) return false;
        if (!AppendConcat(*arg, a, ctx, &s)) return false;
      }
      *out = Value::String(s);
      return true;
    }
    default: break;
  }
  if (!Evaluate(*n.args[0], ctx, &a)) return false;
  switch (n.fn) {
    case Func::kSubstr: {
      Value start_v, len_v;
      if (!Evaluate(*n.args[1], ctx, &start_v)) return false;
      if (n.args.size() > 2 && !Evaluate(*n.args[2], ctx, &len_v)) return false;
      if (a.IsNullish() || start_v.IsNullish() || (n.args.size() > 2 && len_v.IsNullish())) {
        *out = Value::Null();
        return true;
      }
      if (a.type != ValueType::kString) return ctx.Fail(n, std::string("substr needs a string, got ") + TypeName(a.type));
      int64_t start, len = INT64_MAX;
      if (!IntegralArg(*n.args[1], start_v, ctx, "substr start", &start)) return false;
      if (n.args.size() > 2 && !IntegralArg(*n.args[2], len_v, ctx, "substr length", &len)) return false;
      if (start < 0) {
        int64_t total = int64_t(CountCodePoints(a.s));
        start = std::max<int64_t>(0, total + start);
      }
      if (len <= 0) {
        *out = Value::String(std::string_view());
        return true;
      }
      size_t b = ByteOffsetOfCodePoint(a.s, 0, size_t(start));
      size_t e = len == INT64_MAX ? a.s.size() : ByteOffsetOfCodePoint(a.s, b, size_t(len));
      *out = Value::String(a.s.substr(b, e - b));
      return true;
    }
    case Func::kLower: return ChangeCase(n, a, false, ctx, out);
    case Func::kUpper: return ChangeCase(n, a, true, ctx, out);
    case Func::kLen:
      switch (a.type) {
        case ValueType::kMissing: case ValueType::kNull: *out = Value::Null(); return true;
        case ValueType::kString: *out = Value::Int(int64_t(CountCodePoints(a.s))); return true;
        case ValueType::kArray: *out = Value::Int(int64_t(a.json->Size())); return true;
        case ValueType::kObject: *out = Value::Int(int64_t(a.json->MemberCount())); return true;
        default: return ctx.Fail(n, std::string("len needs a string or array, got ") + TypeName(a.type));
      }
    case Func::kYear: case Func::kMonth: case Func::kDay: {
      *out = Value::Null();
      if (a.type != ValueType::kString) return true;
      // A date without the month or day is at the start of its period
      // (as Elasticsearch reads "2024" as 2024-01-01).
      IsoDate d = ParseIsoDate(a.s);
      if (d.precision == 0) return true;
      if (n.fn == Func::kYear) *out = Value::Int(d.year);
      if (n.fn == Func::kMonth) *out = Value::Int(d.precision >= 2 ? d.month : 1);
      if (n.fn == Func::kDay) *out = Value::Int(d.precision >= 3 ? d.day : 1);
      return true;
    }
    case Func::kDateTrunc: {
      if (a.type != ValueType::kString)
        return ctx.Fail(*n.args[0], "date_trunc unit must be 'year', 'month', 'day' or 'hour'");
      int want;
      if (a.s == "year") want = 1;
      else if (a.s == "month") want = 2;
      else if (a.s == "day") want = 3;
      else if (a.s == "hour") want = 4;
      else return ctx.Fail(*n.args[0], "date_trunc unit must be 'year', 'month', 'day' or 'hour'");
      Value d;
      if (!Evaluate(*n.args[1], ctx, &d)) return false;
      *out = Value::Null();
      if (d.type != ValueType::kString) return true;
      IsoDate iso = ParseIsoDate(d.s);
      if (iso.precision == 0) return true;
      static constexpr size_t kLen[] = {0, 4, 7, 10, 13};
      if (iso.precision < want) {
        // Less precise than the unit: the date is the start of its period
        // ("2024-03-17" truncated to the hour is "2024-03-17T00").
        static constexpr const char* kStart[] = {"", "", "-01", "-01", "T00"};
        std::string& s = ctx.NewString();
        s.assign(d.s.substr(0, kLen[iso.precision]));
        for (int p = iso.precision + 1; p <= want; ++p) s += kStart[p];
        *out = Value::String(s);
      } else if (want == 4 && iso.hour_sep != 'T') {
        std::string& s = ctx.NewString();
        s.assign(d.s.substr(0, 13));
        s[10] = 'T';
        *out = Value::String(s);
      } else {
        *out = Value::String(d.s.substr(0, kLen[want]));
      }
      return true;
    }
    default:
      return ctx.Fail(n, "internal: unknown function");
  }
}

const rapidjson::Value* WalkPath(const rapidjson::Value* v, const std::vector<std::string>& path) {
  for (const std::string& seg : path) {
    if (!v->IsObject()) return nullptr;
    const rapidjson::Value* next = nullptr;
    for (auto m = v->MemberBegin(); m != v->MemberEnd(); ++m) {
      if (m->name.GetStringLength() == seg.size() && std::memcmp(m->name.GetString(), seg.data(), seg.size()) == 0) {
        next = &m->value;
        break;
      }
    }
    if (!next) return nullptr;
    v = next;
  }
  return v;
}

}  // namespace

// ---------------------------------------------------------------- public

Value Value::FromJson(const rapidjson::Value& j) {
  switch (j.GetType()) {
    case rapidjson::kNullType: return Null();
    case rapidjson::kFalseType: return Bool(false);
    case rapidjson::kTrueType: return Bool(true);
    case rapidjson::kStringType: return String(std::string_view(j.GetString(), j.GetStringLength()));
    case rapidjson::kNumberType:
      if (j.IsInt64()) return Int(j.GetInt64());
      return Double(j.GetDouble());
    case rapidjson::kArrayType: {
      Value v;
      v.type = ValueType::kArray;
      v.json = &j;
      return v;
    }
    case rapidjson::kObjectType: {
      Value v;
      v.type = ValueType::kObject;
      v.json = &j;
      return v;
    }
  }
  return Value();
}

Result<std::unique_ptr<Node>> ParseExpression(std::string_view source, const ParseOptions& options) {
  std::vector<Token> tokens;
  Status st = Tokenize(source, &tokens);
  if (!st.ok()) return st;
  Parser p(std::move(tokens), options);
  return p.ParseAll();
}

std::string& EvalContext::NewString() {
  if (arena_used_ == arena_.size()) arena_.emplace_back();
  std::string& s = arena_[arena_used_++];
  s.clear();
  return s;
}

bool EvalContext::Fail(const Node& at, std::string_view message) {
  error_.assign(message);
  error_ += " at offset ";
  error_ += std::to_string(at.offset);
  return false;
}

bool Truthy(const Value& v) {
  switch (v.type) {
    case ValueType::kMissing: case ValueType::kNull: return false;
    case ValueType::kBool: return v.b;
    case ValueType::kInt: return v.i != 0;
    case ValueType::kDouble: return v.d != 0;
    case ValueType::kString: return !v.s.empty();
    default: return true;
  }
}

bool Evaluate(const Node& n, EvalContext& ctx, Value* out) {
  switch (n.kind) {
    case NodeKind::kLiteral:
      *out = n.literal;
      return true;
    case NodeKind::kField: {
      const rapidjson::Value* v = ctx.doc ? WalkPath(ctx.doc, n.path) : nullptr;
      *out = v ? Value::FromJson(*v) : Value();
      return true;
    }
    case NodeKind::kMember: {
      Value base;
      if (!Evaluate(*n.args[0], ctx, &base)) return false;
      const rapidjson::Value* v = base.type == ValueType::kObject ? WalkPath(base.json, n.path) : nullptr;
      *out = v ? Value::FromJson(*v) : Value();
      return true;
    }
    case NodeKind::kMapRef:
      *out = size_t(n.slot) < ctx.map_values.size() ? ctx.map_values[n.slot] : Value();
      return true;
    case NodeKind::kUnwind:
      *out = size_t(n.slot) < ctx.unwind_values.size() ? ctx.unwind_values[n.slot] : Value();
      return true;
    case NodeKind::kNeg: {
      Value a;
      if (!Evaluate(*n.args[0], ctx, &a)) return false;
      if (a.IsNullish()) *out = Value::Null();
      else if (a.type == ValueType::kInt) *out = a.i == INT64_MIN ? Value::Double(-double(a.i)) : Value::Int(-a.i);
      else if (a.type == ValueType::kDouble) *out = Value::Double(-a.d);
      else return ctx.Fail(n, std::string("'-' needs a number, got ") + TypeName(a.type));
      return true;
    }
    case NodeKind::kNot: {
      Value a;
      if (!Evaluate(*n.args[0], ctx, &a)) return false;
      *out = Value::Bool(!Truthy(a));
      return true;
    }
    case NodeKind::kAnd: case NodeKind::kOr: {
      Value a;
      if (!Evaluate(*n.args[0], ctx, &a)) return false;
      bool t = Truthy(a);
      if (n.kind == NodeKind::kAnd ? !t : t) {
        *out = Value::Bool(t);
        return true;
      }
      if (!Evaluate(*n.args[1], ctx, &a)) return false;
      *out = Value::Bool(Truthy(a));
      return true;
    }
    case NodeKind::kBinary: {
      Value a, b;
      if (!Evaluate(*n.args[0], ctx, &a) || !Evaluate(*n.args[1], ctx, &b)) return false;
      switch (n.op) {
        case BinOp::kAdd: case BinOp::kSub: case BinOp::kMul: case BinOp::kDiv:
          return Arithmetic(n, a, b, ctx, out);
        case BinOp::kEq: *out = Value::Bool(Equal(a, b)); return true;
        case BinOp::kNe: *out = Value::Bool(!Equal(a, b)); return true;
        default: {
          int c = Order(a, b);
          bool r = false;
          if (c != 2) {
            switch (n.op) {
              case BinOp::kLt: r = c < 0; break;
              case BinOp::kLe: r = c <= 0; break;
              case BinOp::kGt: r = c > 0; break;
              case BinOp::kGe: r = c >= 0; break;
              default: break;
            }
          }
          *out = Value::Bool(r);
          return true;
        }
      }
    }
    case NodeKind::kCall:
      return CallFunction(n, ctx, out);
  }
  return ctx.Fail(n, "internal: unknown node");
}

void AppendJsonDouble(double d, std::string* out) {
  if (!std::isfinite(d)) {
    out->append("null");
    return;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  std::string_view s(buf, size_t(r.ptr - buf));
  out->append(s);
  if (s.find_first_of(".e") == std::string_view::npos) out->append(".0");
}

void AppendJson(const Value& v, std::string* out) {
  switch (v.type) {
    case ValueType::kMissing: case ValueType::kNull: out->append("null"); return;
    case ValueType::kBool: out->append(v.b ? "true" : "false"); return;
    case ValueType::kInt: {
      char buf[24];
      auto r = std::to_chars(buf, buf + sizeof buf, v.i);
      out->append(buf, size_t(r.ptr - buf));
      return;
    }
    case ValueType::kDouble: AppendJsonDouble(v.d, out); return;
    case ValueType::kString: AppendJsonString(v.s, *out); return;
    case ValueType::kArray: case ValueType::kObject: {
      // Only reached for diagnostics; arrays/objects never leave the index.
      out->append(v.type == ValueType::kArray ? "[]" : "{}");
      return;
    }
  }
}

void CanonicalForm(const Node& n, std::string* out) {
  auto path = [&] {
    for (const auto& seg : n.path) {
      out->push_back('.');
      AppendJsonString(seg, *out);
    }
  };
  switch (n.kind) {
    case NodeKind::kLiteral:
      if (n.literal.type == ValueType::kInt) {
        out->append("i:");
        AppendJson(n.literal, out);
      } else if (n.literal.type == ValueType::kDouble) {
        out->append("d:");
        AppendJson(n.literal, out);
      } else {
        AppendJson(n.literal, out);
      }
      return;
    case NodeKind::kField: out->append("$doc"); path(); return;
    case NodeKind::kMember: out->append("("); CanonicalForm(*n.args[0], out); out->append(")"); path(); return;
    case NodeKind::kMapRef: out->append("$map:"); AppendJsonString(n.text, *out); return;
    case NodeKind::kUnwind: out->append("unwind("); CanonicalForm(*n.args[0], out); out->append(")"); return;
    case NodeKind::kNeg: out->append("(-"); CanonicalForm(*n.args[0], out); out->append(")"); return;
    case NodeKind::kNot: out->append("(!"); CanonicalForm(*n.args[0], out); out->append(")"); return;
    case NodeKind::kAnd: case NodeKind::kOr: case NodeKind::kBinary: {
      static constexpr const char* kOps[] = {"+", "-", "*", "/", "==", "!=", "<", "<=", ">", ">="};
      out->append("(");
      CanonicalForm(*n.args[0], out);
      out->append(n.kind == NodeKind::kAnd ? "&&" : n.kind == NodeKind::kOr ? "||" : kOps[int(n.op)]);
      CanonicalForm(*n.args[1], out);
      out->append(")");
      return;
    }
    case NodeKind::kCall: {
      out->append(InfoOf(n.fn).name);
      out->append("(");
      for (size_t k = 0; k < n.args.size(); ++k) {
        if (k) out->push_back(',');
        CanonicalForm(*n.args[k], out);
      }
      out->append(")");
      return;
    }
  }
}

}  // namespace corvid::mapreduce
