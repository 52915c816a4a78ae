// A recursive-descent parser for Lucene's classic query syntax. Clause
// occurrence follows Lucene's QueryParser exactly (addClause): "a AND b"
// makes both required, "a OR b" optional, "NOT a"/"-a" prohibited, "+a"
// required, and a bare juxtaposition takes the default operator.
#include "postings/query_parser.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "common/utf8.h"

namespace corvid::postings {
namespace {

enum class Conj { kNone, kAnd, kOr };
enum class Mod { kNone, kReq, kNot };

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }
// Characters that end a term (unless escaped). '-' and '+' only start clauses.
bool IsSpecial(char c) {
  return c == '(' || c == ')' || c == '[' || c == ']' || c == '{' || c == '}' || c == '^' || c == '"' || c == '~' ||
         c == ':' || c == '\\' || c == '/';
}

class Parser {
 public:
  Parser(std::string_view q, DefaultOperator op) : q_(q), op_(op) {}

  Result<std::unique_ptr<QueryNode>> Parse() {
    SkipSpace();
    if (pos_ == q_.size()) return MatchAll(0);
    auto r = ParseQuery("", 0);
    if (!r.ok()) return r;
    if (pos_ < q_.size()) return Error("unexpected ')'", pos_);
    return r;
  }

 private:
  static std::unique_ptr<QueryNode> MatchAll(size_t off) {
    auto n = std::make_unique<QueryNode>();
    n->kind = QueryNode::Kind::kMatchAll;
    n->offset = off;
    return n;
  }
  Status Error(std::string_view what, size_t off) {
    return Status::InvalidArgumentAt("query syntax error: " + std::string(what), off);
  }
  void SkipSpace() {
    while (pos_ < q_.size() && IsSpace(q_[pos_])) ++pos_;
  }
  bool AtWord(std::string_view w) const {
    if (q_.compare(pos_, w.size(), w) != 0) return false;
    size_t e = pos_ + w.size();
    return e == q_.size() || IsSpace(q_[e]) || q_[e] == '(' || q_[e] == '"' || q_[e] == '+' || q_[e] == '-';
  }

  // Query := (Conj? Mod? Clause)* up to ')' or the end.
  Result<std::unique_ptr<QueryNode>> ParseQuery(const std::string& field, size_t start) {
    auto b = std::make_unique<QueryNode>();
    b->kind = QueryNode::Kind::kBool;
    b->offset = start;
    if (++depth_ > 256) return Error("nesting deeper than 256", pos_);
    while (true) {
      SkipSpace();
      if (pos_ == q_.size() || q_[pos_] == ')') break;
      Conj conj = Conj::kNone;
      size_t conj_at = pos_;
      if (AtWord("AND") || q_.compare(pos_, 2, "&&") == 0) {
        conj = Conj::kAnd;
        pos_ += q_[pos_] == '&' ? 2 : 3;
      } else if (AtWord("OR") || q_.compare(pos_, 2, "||") == 0) {
        conj = Conj::kOr;
        pos_ += 2;
      }
      if (conj != Conj::kNone) {
        if (b->clauses.empty()) return Error(conj == Conj::kAnd ? "AND without a left operand" : "OR without a left operand", conj_at);
        SkipSpace();
        if (pos_ == q_.size() || q_[pos_] == ')')
          return Error(conj == Conj::kAnd ? "AND without a right operand" : "OR without a right operand", conj_at);
      }
      // A modifier may stand apart from its clause ("a - b" is "a -b", as
      // in Lucene, whose lexer skips spaces between the two tokens).
      Mod mod = Mod::kNone;
      size_t mod_at = pos_;
      if (q_[pos_] == '+') {
        mod = Mod::kReq;
        ++pos_;
      } else if (q_[pos_] == '-' || q_[pos_] == '!') {
        mod = Mod::kNot;
        ++pos_;
      } else if (AtWord("NOT")) {
        mod = Mod::kNot;
        pos_ += 3;
      }
      if (mod != Mod::kNone) {
        SkipSpace();
        if (pos_ == q_.size() || q_[pos_] == ')') return Error("operator without an operand", mod_at);
        // One modifier per clause, as Lucene's grammar has it: "+-a",
        // "NOT -a" and "!!a" are errors, not a guess at which one wins
        // (a second NOT is refused where the clause is read).
        if (q_[pos_] == '+' || q_[pos_] == '-' || q_[pos_] == '!')
          return Error(std::string("'") + q_[pos_] + "' after an operator (one of + - ! NOT per clause)", pos_);
      }
      auto c = ParseClause(field);
      if (!c.ok()) return c.status();
      AddClause(*b, conj, mod, std::move(c).value());
    }
    --depth_;
    // A lone optional or required clause is the clause itself.
    if (b->clauses.size() == 1 && b->clauses[0].first != Occur::kMustNot) {
      auto only = std::move(b->clauses[0].second);
      return only;
    }
    if (b->clauses.empty()) return Error("empty group", start);
    return b;
  }

  void AddClause(QueryNode& b, Conj conj, Mod mod, std::unique_ptr<QueryNode> q) {
    auto& cl = b.clauses;
    if (!cl.empty() && conj == Conj::kAnd && cl.back().first != Occur::kMustNot) cl.back().first = Occur::kMust;
    if (!cl.empty() && op_ == DefaultOperator::kAnd && conj == Conj::kOr && cl.back().first != Occur::kMustNot)
      cl.back().first = Occur::kShould;
    bool required, prohibited;
    if (op_ == DefaultOperator::kOr) {
      prohibited = mod == Mod::kNot;
      required = mod == Mod::kReq;
      if (conj == Conj::kAnd && !prohibited) required = true;
    } else {
      prohibited = mod == Mod::kNot;
      required = !prohibited && conj != Conj::kOr;
    }
    cl.emplace_back(prohibited ? Occur::kMustNot : required ? Occur::kMust : Occur::kShould, std::move(q));
  }

  // Reads a term: a run of non-space, non-special characters (backslash
  // escapes one character). Stops before a trailing "~" or "^". If `wild`
  // is given, it receives the indexes in the term of its unescaped '*' and
  // '?' (wildcards; escaped, they are the characters).
  std::string ReadTerm(bool* had_escape, std::vector<size_t>* wild = nullptr) {
    std::string out;
    *had_escape = false;
    while (pos_ < q_.size()) {
      char c = q_[pos_];
      if (IsSpace(c)) break;
      if (c == '\\') {
        if (pos_ + 1 >= q_.size()) break;
        out.push_back(q_[pos_ + 1]);
        *had_escape = true;
        pos_ += 2;
        continue;
      }
      if (IsSpecial(c)) break;
      if ((c == '&' || c == '|') && pos_ + 1 < q_.size() && q_[pos_ + 1] == c) break;
      if (c == '!' && out.empty()) break;
      if (wild != nullptr && (c == '*' || c == '?')) wild->push_back(out.size());
      out.push_back(c);
      ++pos_;
    }
    return out;
  }

  Result<double> ReadNumber(size_t at, bool allow_frac) {
    size_t s = pos_;
    while (pos_ < q_.size() && ((q_[pos_] >= '0' && q_[pos_] <= '9') || q_[pos_] == '.')) ++pos_;
    if (s == pos_) return Error("expected a number", at);
    double v = 0;
    auto r = std::from_chars(q_.data() + s, q_.data() + pos_, v);
    if (r.ec != std::errc() || r.ptr != q_.data() + pos_ || !std::isfinite(v)) return Error("malformed number", s);
    if (!allow_frac && v != std::floor(v)) return Error("expected an integer", s);
    return v;
  }

  Status ReadBoost(QueryNode& n) {
    SkipSpaceNone();
    if (pos_ < q_.size() && q_[pos_] == '^') {
      size_t at = pos_++;
      auto v = ReadNumber(at, true);
      if (!v.ok()) return v.status();
      if (!(*v > 0)) return Error("boost must be > 0", at);
      n.boost *= *v;
    }
    return Status::Ok();
  }
  void SkipSpaceNone() {}

  // The bound of f:>x and friends: a quoted string, or characters up to a
  // space, ')' or '^' (a boost).
  Result<std::string> ReadOneSidedBound() {
    if (pos_ < q_.size() && q_[pos_] == '"') {
      bool open;
      return ReadBound(&open);  // a quoted bound is never open
    }
    std::string out;
    while (pos_ < q_.size() && !IsSpace(q_[pos_]) && q_[pos_] != ')' && q_[pos_] != '^') {
      if (q_[pos_] == '\\' && pos_ + 1 < q_.size()) ++pos_;
      out.push_back(q_[pos_++]);
    }
    if (out.empty()) return Error("expected a range bound", pos_);
    return out;
  }

  // A range bound: a quoted string, or characters up to space / ] / }.
  Result<std::string> ReadBound(bool* open) {
    SkipSpace();
    *open = false;
    if (pos_ == q_.size()) return Error("unterminated range", pos_);
    if (q_[pos_] == '"') {
      size_t at = pos_++;
      std::string out;
      while (pos_ < q_.size() && q_[pos_] != '"') {
        if (q_[pos_] == '\\' && pos_ + 1 < q_.size()) ++pos_;
        out.push_back(q_[pos_++]);
      }
      if (pos_ == q_.size()) return Error("unterminated quoted string", at);
      ++pos_;
      return out;
    }
    std::string out;
    while (pos_ < q_.size() && !IsSpace(q_[pos_]) && q_[pos_] != ']' && q_[pos_] != '}') {
      if (q_[pos_] == '\\' && pos_ + 1 < q_.size()) ++pos_;
      out.push_back(q_[pos_++]);
    }
    if (out.empty()) return Error("expected a range bound", pos_);
    if (out == "*") {
      *open = true;
      out.clear();
    }
    return out;
  }

  Result<std::unique_ptr<QueryNode>> ParseClause(const std::string& default_field) {
    SkipSpace();
    size_t start = pos_;
    std::string field = default_field;
    // field ':' ?
    {
      size_t save = pos_;
      bool esc;
      std::string word = ReadTerm(&esc);
      if (!word.empty() && pos_ < q_.size() && q_[pos_] == ':') {
        ++pos_;
        field = word == "*" ? std::string() : word;
        if (pos_ == q_.size() || IsSpace(q_[pos_]) || q_[pos_] == ')')
          return Error("expected a term after '" + word + ":'", save);
        if (word == "*") {
          // "*:*" (or "*:x", a bare term)
          if (q_.compare(pos_, 1, "*") == 0 && (pos_ + 1 == q_.size() || IsSpace(q_[pos_ + 1]) || q_[pos_ + 1] == ')')) {
            ++pos_;
            auto n = MatchAll(start);
            if (auto s = ReadBoost(*n); !s.ok()) return s;
            return n;
          }
        }
      } else {
        pos_ = save;
      }
    }
    if (pos_ >= q_.size()) return Error("expected a term", pos_);
    char c = q_[pos_];
    if (c == '(') {
      size_t at = pos_++;
      auto inner = ParseQuery(field, at);
      if (!inner.ok()) return inner;
      SkipSpace();
      if (pos_ >= q_.size() || q_[pos_] != ')') return Error("missing ')' for '('", at);
      ++pos_;
      auto n = std::move(inner).value();
      if (auto s = ReadBoost(*n); !s.ok()) return s;
      return n;
    }
    if (c == '"') {
      size_t at = pos_++;
      auto n = std::make_unique<QueryNode>();
      n->kind = QueryNode::Kind::kPhrase;
      n->field = field;
      n->offset = start;
      while (pos_ < q_.size() && q_[pos_] != '"') {
        if (q_[pos_] == '\\' && pos_ + 1 < q_.size()) ++pos_;
        n->text.push_back(q_[pos_++]);
      }
      if (pos_ == q_.size()) return Error("unterminated phrase", at);
      ++pos_;
      if (pos_ < q_.size() && q_[pos_] == '~') {
        // As Lucene: "~" alone keeps slop 0, a fraction is truncated.
        size_t t = pos_++;
        if (pos_ < q_.size() && q_[pos_] >= '0' && q_[pos_] <= '9') {
          auto v = ReadNumber(t, true);
          if (!v.ok()) return v.status();
          if (*v > 1e6) return Error("slop too large", t);
          n->slop = static_cast<uint32_t>(*v);
        }
      }
      if (auto s = ReadBoost(*n); !s.ok()) return s;
      return n;
    }
    if ((c == '>' || c == '<') && !field.empty()) {
      // Elasticsearch's one-sided ranges (query_string): f:>x is
      // f:{x TO *], f:>=x is f:[x TO *], f:<x is f:[* TO x}, f:<=x is
      // f:[* TO x]; also in a field's group, f:(>=1 AND <5).
      ++pos_;
      const bool incl = pos_ < q_.size() && q_[pos_] == '=';
      pos_ += incl;
      auto n = std::make_unique<QueryNode>();
      n->kind = QueryNode::Kind::kRange;
      n->field = field;
      n->offset = start;
      auto bound = ReadOneSidedBound();
      if (!bound.ok()) return bound.status();
      if (c == '>') {
        n->lo = std::move(bound).value();
        n->lo_incl = incl;
        n->hi_open = true;
      } else {
        n->hi = std::move(bound).value();
        n->hi_incl = incl;
        n->lo_open = true;
      }
      if (auto s = ReadBoost(*n); !s.ok()) return s;
      return n;
    }
    if (c == '[' || c == '{') {
      size_t at = pos_++;
      auto n = std::make_unique<QueryNode>();
      n->kind = QueryNode::Kind::kRange;
      n->field = field;
      n->offset = start;
      n->lo_incl = c == '[';
      auto lo = ReadBound(&n->lo_open);
      if (!lo.ok()) return lo.status();
      n->lo = std::move(lo).value();
      SkipSpace();
      if (q_.compare(pos_, 2, "TO") != 0 || (pos_ + 2 < q_.size() && !IsSpace(q_[pos_ + 2])))
        return Error("expected 'TO' in range", pos_);
      pos_ += 2;
      auto hi = ReadBound(&n->hi_open);
      if (!hi.ok()) return hi.status();
      n->hi = std::move(hi).value();
      SkipSpace();
      if (pos_ >= q_.size() || (q_[pos_] != ']' && q_[pos_] != '}')) return Error("missing ']' or '}' for range", at);
      n->hi_incl = q_[pos_] == ']';
      ++pos_;
      if (auto s = ReadBoost(*n); !s.ok()) return s;
      return n;
    }
    if (c == ')') return Error("unexpected ')'", pos_);
    size_t term_at = pos_;
    bool esc;
    std::vector<size_t> wild;
    std::string word = ReadTerm(&esc, &wild);
    if (word.empty()) return Error(std::string("unexpected '") + c + "'", pos_);
    // AND, OR and NOT are operators wherever they stand (Lucene's lexer):
    // one where a term should be is an error ("a AND OR b", "NOT NOT a",
    // "(AND)"). Quoted or escaped, they are words.
    if (!esc && (word == "AND" || word == "OR" || word == "NOT"))
      return Error("'" + word + "' where a term was expected (quote it to search for the word)", term_at);
    auto n = std::make_unique<QueryNode>();
    n->field = field;
    n->offset = start;
    if (!wild.empty() && wild.size() == word.size() && word.find('?') == std::string::npos) {  // "*" (or "**")
      if (field.empty()) {
        n = MatchAll(start);
      } else {
        // field:* — every document with a value in the field.
        n->kind = QueryNode::Kind::kRange;
        n->lo_open = n->hi_open = true;
      }
    } else if (wild.empty() && field == "_exists_") {
      // Elasticsearch's _exists_:f is f:* (a value in f).
      n->kind = QueryNode::Kind::kRange;
      n->field = std::move(word);
      n->lo_open = n->hi_open = true;
    } else if (wild.empty()) {
      n->kind = QueryNode::Kind::kTerm;
      n->text = std::move(word);
    } else if (wild.size() == 1 && wild[0] + 1 == word.size() && word.back() == '*') {
      n->kind = QueryNode::Kind::kPrefix;
      word.pop_back();
      n->text = std::move(word);
    } else {
      // Lucene's WildcardQuery: '*' any characters, '?' one; the pattern
      // keeps the characters that are not wildcards escaped (WildcardMatch).
      // Stars in a row are one ("a**b" is "a*b": the matcher's cost grows
      // with the pattern).
      n->kind = QueryNode::Kind::kWildcard;
      bool star = false;
      for (size_t i = 0, w = 0; i < word.size(); ++i) {
        const bool is_wild = w < wild.size() && wild[w] == i;
        w += is_wild;
        if (is_wild && word[i] == '*' && star) continue;
        star = is_wild && word[i] == '*';
        if (!is_wild && (word[i] == '*' || word[i] == '?' || word[i] == '\\')) n->text += '\\';
        n->text += word[i];
      }
    }
    if (pos_ < q_.size() && q_[pos_] == '~') {
      size_t t = pos_++;
      if (n->kind != QueryNode::Kind::kTerm) return Error("'~' applies to a term or a phrase", t);
      n->kind = QueryNode::Kind::kFuzzy;
      n->edits = 2;
      if (pos_ < q_.size() && q_[pos_] >= '0' && q_[pos_] <= '9') {
        // As Lucene's FuzzyQuery.floatToEdits: a distance of 1 or more is
        // capped at 2; a fraction is the old minimum similarity s, giving
        // (1 - s) * the word's length in code points edits (at most 2).
        auto v = ReadNumber(t, true);
        if (!v.ok()) return v.status();
        if (*v >= 1) {
          n->edits = static_cast<uint32_t>(std::min(*v, 2.0));
        } else if (*v == 0) {
          n->edits = 0;
        } else {
          const double similarity = static_cast<float>(*v);  // Lucene's is a float
          n->edits = static_cast<uint32_t>(std::min((1 - similarity) * static_cast<double>(CountCodePoints(n->text)), 2.0));
        }
      }
    }
    if (auto s = ReadBoost(*n); !s.ok()) return s;
    return n;
  }

  std::string_view q_;
  DefaultOperator op_;
  size_t pos_ = 0;
  int depth_ = 0;
};

void Render(const QueryNode& n, std::string& out) {
  auto boost = [&] {
    if (n.boost != 1.0) {
      char b[32];
      snprintf(b, sizeof b, "^%g", n.boost);
      out += b;
    }
  };
  auto field = [&] {
    if (!n.field.empty()) out += n.field + ":";
  };
  switch (n.kind) {
    case QueryNode::Kind::kBool: {
      out += "(";
      bool first = true;
      for (const auto& [occ, c] : n.clauses) {
        if (!first) out += " ";
        first = false;
        out += occ == Occur::kMust ? "+" : occ == Occur::kMustNot ? "-" : "";
        Render(*c, out);
      }
      out += ")";
      break;
    }
    case QueryNode::Kind::kTerm: field(); out += n.text; break;
    case QueryNode::Kind::kPhrase:
      field();
      out += "\"" + n.text + "\"";
      if (n.slop) {
        out += '~';
        out += std::to_string(n.slop);
      }
      break;
    case QueryNode::Kind::kPrefix: field(); out += n.text + "*"; break;
    case QueryNode::Kind::kWildcard:
      field();
      out += n.text;
      break;
    case QueryNode::Kind::kFuzzy:
      field();
      out += n.text;
      out += '~';
      out += std::to_string(n.edits);
      break;
    case QueryNode::Kind::kRange:
      field();
      out += n.lo_incl ? "[" : "{";
      out += n.lo_open ? "*" : n.lo;
      out += " TO ";
      out += n.hi_open ? "*" : n.hi;
      out += n.hi_incl ? "]" : "}";
      break;
    case QueryNode::Kind::kMatchAll: out += "*:*"; break;
  }
  boost();
}

}  // namespace

Result<std::unique_ptr<QueryNode>> ParseQuery(std::string_view q, DefaultOperator op) {
  return Parser(q, op).Parse();
}

std::string ToDebugString(const QueryNode& n) {
  std::string out;
  Render(n, out);
  return out;
}

}  // namespace corvid::postings
