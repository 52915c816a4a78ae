// The oracle: random multilingual corpora with updates and deletes, random
// queries of every type, each checked against a brute-force evaluator that
// re-analyzes the raw documents with the same analyzers and recomputes
// matches and BM25 (the rules at the top of postings/searcher.cc) from
// scratch: matching sets exactly, scores within 1e-6 relative, order by
// (score desc, id asc) — and top-k equal to the head of the full ranking.
#include <catch2/catch.hpp>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>
#include <iomanip>
#include <map>
#include <random>
#include <set>

#include "common/sanitizers.h"
#include "postings/definition.h"
#include "postings/query_parser.h"
#include "postings/snapshot.h"
#include "tests/postings/test_util.h"

namespace corvid::postings {
namespace {

using testing::ParseHits;
using testing::Store;
using testing::TempDir;

constexpr const char* kDef = R"({"type": "search", "collection": "c",
  "fields": {"title": {"analyzer": "standard", "boost": 2.5}, "body": {"analyzer": "english"},
             "notes": {"analyzer": "folding"}, "tags": {"analyzer": "keyword", "facet": true},
             "n": {"type": "number"}, "d": {"type": "date"}}})";

const std::vector<std::string> kWords = {
    "the", "a", "of", "and", "search", "engine", "searching", "engines", "index", "indexes", "indexed", "fast",
    "faster", "query", "queries", "running", "runs", "run", "document", "documents", "store", "stored", "bitmap",
    "roaring", "postings", "score", "scoring", "café", "Café", "naïve", "résumé", "über", "Straße", "straße", "Müller",
    "mueller", "niño", "élan", "東京", "大学", "東京大学", "日本語", "テスト", "北京", "中文", "搜索", "引擎",
    "data", "date", "dare", "dart", "cart", "card", "care", "car", "cat", "bat", "bad", "bed", "zebra", "x1", "42",
    "3.14", "C++", "e-mail", "don't", "is", "not", "to", "be", "or"};
const std::vector<std::string> kTags = {"red", "green", "blue", "c++", "Rust", "go lang", "日本"};

struct BDoc {
  std::vector<std::vector<std::pair<std::string, uint32_t>>> text;  // per text slot: (term, position)
  std::vector<std::vector<double>> nums;                             // per numeric slot
};

class TokenCollector final : public analyzers::TokenSink {
 public:
  void OnToken(const analyzers::Token& t) override { out.emplace_back(std::string(t.term), t.position); }
  std::vector<std::pair<std::string, uint32_t>> out;
};

// The same extraction as indexing (arrays flattened, +100 position gap),
// written independently.
BDoc Extract(const SearchDefinitionImpl& def, const std::string& json) {
  rapidjson::Document d;
  d.Parse(json.c_str());
  BDoc b;
  b.text.resize(def.text_fields().size());
  b.nums.resize(def.numeric_fields().size());
  for (const FieldDef* f : def.text_fields()) {
    uint32_t base = 0;
    ForEachValue(d, f->path, 0, [&](const rapidjson::Value& v) {
      if (!v.IsString()) return;
      TokenCollector c;
      REQUIRE(f->analyzer->Analyze(std::string_view(v.GetString(), v.GetStringLength()), c).ok());
      uint32_t maxp = 0;
      bool any = false;
      for (auto& [t, p] : c.out) {
        b.text[f->slot].emplace_back(t, base + p);
        maxp = std::max(maxp, base + p);
        any = true;
      }
      if (any) base = maxp + 1 + kArrayPositionGap;
    });
  }
  for (const FieldDef* f : def.numeric_fields()) {
    ForEachValue(d, f->path, 0, [&](const rapidjson::Value& v) {
      if (v.IsNumber()) b.nums[f->slot].push_back(v.GetDouble());
      if (v.IsString() && f->kind == FieldKind::kDate) b.nums[f->slot].push_back(*ParseIsoDate(v.GetString()));
    });
  }
  return b;
}

uint32_t Osa(const std::u32string& a, const std::u32string& b) {
  std::vector<std::vector<uint32_t>> d(a.size() + 1, std::vector<uint32_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}
std::string Utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}
std::u32string U32(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}
// A wildcard pattern (QueryNode::text) as code points, kAnyRun for '*'
// and kAnyOne for '?', each run of other characters normalized whole as a
// prefix is; and a recursive matcher over it (the engine's is iterative,
// over bytes).
constexpr char32_t kAnyRun = 0x110000, kAnyOne = 0x110001;
std::u32string WildcardPattern(const FieldDef& f, const std::string& text) {
  std::u32string out;
  std::string run;
  auto flush = [&] {
    out += U32(NormalizeMultiTermText(f, run));
    run.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      run += text[++i];
    } else if (text[i] == '*' || text[i] == '?') {
      flush();
      out += text[i] == '*' ? kAnyRun : kAnyOne;
    } else {
      run += text[i];
    }
  }
  flush();
  return out;
}
bool WildcardMatches(const std::u32string& p, size_t i, const std::u32string& t, size_t j) {
  if (i == p.size()) return j == t.size();
  if (p[i] == kAnyRun) return WildcardMatches(p, i + 1, t, j) || (j < t.size() && WildcardMatches(p, i, t, j + 1));
  if (j == t.size()) return false;
  return (p[i] == kAnyOne || p[i] == t[j]) && WildcardMatches(p, i + 1, t, j + 1);
}

class Oracle {
 public:
  Oracle(const SearchDefinitionImpl& def, const std::map<std::string, std::string>& docs) : def_(def) {
    for (const auto& [id, json] : docs) docs_.emplace(id, Extract(def, json));
    const size_t nf = def.text_fields().size();
    n_with_.assign(nf, 0);
    sum_.assign(nf, 0);
    df_.resize(nf);
    for (const auto& [id, b] : docs_) {
      for (size_t f = 0; f < nf; ++f) {
        if (b.text[f].empty()) continue;
        n_with_[f]++;
        sum_[f] += b.text[f].size();
        std::set<std::string> seen;
        for (auto& [t, p] : b.text[f]) seen.insert(t);
        for (auto& t : seen) df_[f][t]++;
      }
    }
  }

  // Matching ids with scores.
  std::map<std::string, double> Run(const QueryNode& q, const QueryNode* filter) const {
    std::map<std::string, double> out;
    for (const auto& [id, b] : docs_) {
      double s = 0;
      if (Dropped(q) || !Match(q, b, 1.0, &s)) continue;
      double ignored = 0;
      if (filter && (Dropped(*filter) || !Match(*filter, b, 1.0, &ignored))) continue;
      out[id] = s;
    }
    return out;
  }

 private:
  std::vector<const FieldDef*> Fields(const QueryNode& q) const {
    if (q.field.empty()) return def_.text_fields();
    return {def_.Find(q.field)};
  }
  std::vector<std::pair<std::string, uint32_t>> Analyze(const FieldDef& f, const std::string& text) const {
    TokenCollector c;
    REQUIRE(f.analyzer->Analyze(text, c).ok());
    return c.out;
  }
  bool Dropped(const QueryNode& q) const {
    using K = QueryNode::Kind;
    if (q.kind == K::kBool) {
      for (auto& [o, c] : q.clauses)
        if (!Dropped(*c)) return false;
      return true;
    }
    if (q.kind != K::kTerm && q.kind != K::kPhrase) return false;
    auto fields = Fields(q);
    if (fields.size() == 1 && fields[0]->kind != FieldKind::kText) return false;
    for (auto* f : fields)
      if (!Analyze(*f, q.text).empty()) return false;
    return true;
  }
  double Bm25(uint32_t f, const std::string& t, const BDoc& b) const {
    double N = n_with_[f];
    auto it = df_[f].find(t);
    double n = it == df_[f].end() ? 0 : it->second;
    double idf = std::log(1 + (N - n + 0.5) / (n + 0.5));
    double tf = 0;
    for (auto& [x, p] : b.text[f]) tf += x == t;
    double len = b.text[f].size(), avg = sum_[f] / N;
    return idf * tf / (tf + 1.2 * (1 - 0.75 + 0.75 * len / avg));
  }
  // Some choice of a position p_i per phrase term, all distinct (a
  // repeated word needs an occurrence per repetition), with
  // max(p_i - rel_i) - min(p_i - rel_i) <= slop.
  static bool Phrase(const std::vector<std::vector<uint32_t>>& pos, const std::vector<int64_t>& rel, int64_t slop, size_t i,
                     int64_t lo, int64_t hi, std::vector<uint32_t>& chosen) {
    if (i == pos.size()) return hi - lo <= slop;
    for (uint32_t p : pos[i]) {
      if (std::find(chosen.begin(), chosen.end(), p) != chosen.end()) continue;
      int64_t v = static_cast<int64_t>(p) - rel[i];
      int64_t nlo = i == 0 ? v : std::min(lo, v), nhi = i == 0 ? v : std::max(hi, v);
      if (nhi - nlo > slop) continue;
      chosen.push_back(p);
      const bool found = Phrase(pos, rel, slop, i + 1, nlo, nhi, chosen);
      chosen.pop_back();
      if (found) return true;
    }
    return false;
  }
  bool Match(const QueryNode& q, const BDoc& b, double boost, double* score) const {
    using K = QueryNode::Kind;
    boost *= q.boost;
    switch (q.kind) {
      case K::kMatchAll: return true;
      case K::kBool: {
        bool has_must = false, has_should = false, any_should = false;
        double s = 0;
        for (auto& [o, c] : q.clauses) {
          if (Dropped(*c)) continue;
          double cs = 0;
          bool m = Match(*c, b, boost, &cs);
          if (o == Occur::kMustNot) {
            if (m) return false;
          } else if (o == Occur::kMust) {
            has_must = true;
            if (!m) return false;
            s += cs;
          } else {
            has_should = true;
            if (m) {
              any_should = true;
              s += cs;
            }
          }
        }
        if (!has_must && has_should && !any_should) return false;
        *score += s;
        return true;
      }
      default: break;
    }
    auto fields = Fields(q);
    if (fields.size() == 1 && fields[0]->kind != FieldKind::kText) {
      const FieldDef& f = *fields[0];
      // [start, end): the period a date names (end == start: a point).
      auto parse = [&](const std::string& s) {
        double end = 0;
        if (f.kind == FieldKind::kDate)
          if (auto d = ParseIsoDate(s, &end)) return std::pair(*d, end);
        return std::pair(std::stod(s), std::stod(s));
      };
      auto match = [&](double v) {
        if (q.kind != K::kRange) {
          auto [start, end] = parse(q.text);
          return end > start ? v >= start && v < end : v == start;
        }
        if (!q.lo_open) {
          auto [start, end] = parse(q.lo);
          if (q.lo_incl ? v < start : end > start ? v < end : v <= start) return false;
        }
        if (!q.hi_open) {
          auto [start, end] = parse(q.hi);
          if (q.hi_incl ? (end > start ? v >= end : v > start) : v >= start) return false;
        }
        return true;
      };
      for (double v : b.nums[f.slot])
        if (match(v)) return true;
      return false;
    }
    bool matched = false;
    double s = 0;
    for (const FieldDef* f : fields) {
      const auto& toks = b.text[f->slot];
      std::set<std::string> doc_terms;
      for (auto& [t, p] : toks) doc_terms.insert(t);
      double w = boost * f->boost;
      if (q.kind == K::kRange) {
        const std::string lo = NormalizeMultiTermText(*f, q.lo), hi = NormalizeMultiTermText(*f, q.hi);
        for (auto& t : doc_terms) {
          bool ok = (q.lo_open || (q.lo_incl ? t >= lo : t > lo)) && (q.hi_open || (q.hi_incl ? t <= hi : t < hi));
          if (ok) matched = true;
        }
      } else if (q.kind == K::kPrefix || q.kind == K::kFuzzy || q.kind == K::kWildcard) {
        std::string t = NormalizeMultiTermText(*f, q.text);
        const std::u32string pattern = q.kind == K::kWildcard ? WildcardPattern(*f, q.text) : U"";
        for (auto& x : doc_terms) {
          bool ok = q.kind == K::kPrefix  ? x.rfind(t, 0) == 0
                    : q.kind == K::kFuzzy ? Osa(U32(x), U32(t)) <= q.edits
                                          : WildcardMatches(pattern, 0, U32(x), 0);
          if (!ok) continue;
          matched = true;
          s += w * Bm25(f->slot, x, b);
        }
      } else {
        auto qt = Analyze(*f, q.text);
        if (qt.empty()) continue;
        std::vector<std::vector<uint32_t>> pos(qt.size());
        std::vector<int64_t> rel;
        for (size_t i = 0; i < qt.size(); ++i) {
          rel.push_back(static_cast<int64_t>(qt[i].second) - qt[0].second);
          for (auto& [t, p] : toks)
            if (t == qt[i].first) pos[i].push_back(p);
        }
        bool ok = true;
        for (auto& p : pos) ok = ok && !p.empty();
        std::vector<uint32_t> chosen;
        if (ok && qt.size() > 1) ok = Phrase(pos, rel, q.kind == K::kPhrase ? q.slop : 0, 0, 0, 0, chosen);
        if (!ok) continue;
        matched = true;
        std::set<std::string> distinct;
        for (auto& [t, p] : qt) distinct.insert(t);
        for (auto& t : distinct) s += w * Bm25(f->slot, t, b);
      }
    }
    if (matched) *score += s;
    return matched;
  }

  const SearchDefinitionImpl& def_;
  std::map<std::string, BDoc> docs_;
  std::vector<double> n_with_, sum_;
  std::vector<std::map<std::string, double>> df_;
};

class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}
  size_t U(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool P(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  const std::string& Word() {
    // Skewed: low indexes are frequent.
    size_t i = std::min(U(kWords.size()), U(kWords.size()));
    return kWords[i];
  }
  std::string Text(size_t max_words) {
    std::string s;
    size_t n = U(max_words + 1);
    for (size_t i = 0; i < n; ++i) {
      if (i) s += P(0.1) ? ", " : P(0.05) ? ". " : " ";
      s += Word();
    }
    return s;
  }
  static std::string Quote(const std::string& s) {
    rapidjson::StringBuffer b;
    rapidjson::Writer<rapidjson::StringBuffer> w(b);
    w.String(s.data(), s.size());
    return b.GetString();
  }
  std::string Doc() {
    std::string j = "{";
    j += "\"title\": " + Quote(Text(6));
    if (P(0.8)) j += ", \"body\": " + Quote(Text(30));
    if (P(0.5)) {
      j += ", \"notes\": [";
      size_t n = U(3) + 1;
      for (size_t i = 0; i < n; ++i) j += (i ? ", " : "") + Quote(Text(5));
      j += "]";
    }
    if (P(0.7)) {
      j += ", \"tags\": [";
      size_t n = U(3) + 1;
      for (size_t i = 0; i < n; ++i) j += (i ? ", " : "") + Quote(kTags[U(kTags.size())]);
      j += "]";
    }
    if (P(0.8)) j += ", \"n\": " + std::to_string(static_cast<int>(U(100)) - 20);
    if (P(0.7)) j += ", \"d\": \"2024-0" + std::to_string(U(9) + 1) + "-1" + std::to_string(U(9)) + "\"";
    return j + "}";
  }
  std::string Field() {
    static const std::vector<std::string> f = {"", "", "", "title:", "body:", "notes:"};
    return f[U(f.size())];
  }
  std::string Leaf() {
    switch (U(10)) {
      case 0: case 1: case 2: return Field() + Escape(Word()) + (P(0.15) ? "^" + std::to_string(U(3) + 1) : "");
      case 3: {
        std::string p = Word() + " " + Word();
        if (P(0.4)) p += " " + Word();
        return Field() + "\"" + p + "\"" + (P(0.5) ? "~" + std::to_string(U(4)) : "");
      }
      case 4: {
        std::string w = Word();
        auto u = U32(w);
        if (u.size() < 2) return Field() + Escape(w);
        if (P(0.5)) {
          // A wildcard pattern: code points become '?', '*'s go in (the
          // other characters escaped as needed); at least one wildcard
          // that is not a lone trailing '*'.
          std::string pat;
          bool wild = false;
          for (size_t i = 0; i < u.size(); ++i) {
            if (P(0.15)) pat += '*';
            if (i + 1 == u.size() && !wild) {
              pat += '?';
            } else if (P(0.2)) {
              pat += '?';
              wild = true;
            } else {
              pat += Escape(Utf8(u[i]));
            }
          }
          return Field() + pat + (P(0.3) ? "*" : "");
        }
        std::u32string pre = u.substr(0, 1 + U(std::min<size_t>(3, u.size() - 1)));
        std::string s;
        for (char32_t c : pre) s += Utf8(c);
        std::string esc = Escape(s);
        if (esc.find('\\') != std::string::npos || esc.find('-') == 0) return Field() + Escape(w);
        return Field() + esc + "*";
      }
      case 5: {
        std::string w = Word();
        if (P(0.5) && w.size() > 2 && static_cast<unsigned char>(w[1]) < 0x80) w[1] = 'q';
        return Field() + Escape(w) + "~" + (P(0.3) ? "" : std::to_string(U(3)));
      }
      case 6: {
        int a = static_cast<int>(U(100)) - 20, b = a + static_cast<int>(U(50));
        return "n:" + std::string(P(0.5) ? "[" : "{") + (P(0.2) ? "*" : std::to_string(a)) + " TO " +
               (P(0.2) ? "*" : std::to_string(b)) + (P(0.5) ? "]" : "}");
      }
      case 7: return "d:[2024-0" + std::to_string(U(9) + 1) + "-01 TO " + (P(0.3) ? "*" : "2024-09-15") + "]";
      case 8: return "tags:" + Escape(kTags[U(kTags.size())]);
      default: return P(0.5) ? "tags:[c TO h]" : "n:" + std::to_string(static_cast<int>(U(100)) - 20);
    }
  }
  static std::string Escape(const std::string& w) {
    std::string out;
    for (char c : w) {
      if (c == ' ' || c == '+' || c == '-' || c == ':' || c == '(' || c == ')' || c == '"' || c == '^' || c == '~' || c == '*' ||
          c == '\\' || c == '!' || c == '/' || c == '[' || c == ']' || c == '{' || c == '}' || c == '?' || c == '&' || c == '|')
        out += '\\';
      out += c;
    }
    return out;
  }
  std::string Query(int depth = 0) {
    size_t n = 1 + U(depth > 1 ? 2 : 4);
    std::string q;
    for (size_t i = 0; i < n; ++i) {
      if (i) q += P(0.3) ? " AND " : P(0.3) ? " OR " : " ";
      if (P(0.15)) q += "-";
      else if (P(0.15)) q += "+";
      else if (i && P(0.05)) q += "NOT ";
      if (depth < 2 && P(0.2)) q += "(" + Query(depth + 1) + ")" + (P(0.2) ? "^2" : "");
      else q += Leaf();
    }
    return q;
  }

 private:
  std::mt19937 rng_;
};

// "d<n>" (built without operator+(const char*, string&&), which GCC 12
// warns about spuriously under -Wrestrict).
std::string DocId(uint64_t n) {
  std::string id = "d";
  id += std::to_string(n);
  return id;
}

void CheckQuery(SearchIndex& idx, const Oracle& oracle, const std::string& q,
                const std::string& filter, DefaultOperator op) {
  INFO("query: " << q << "  filter: " << filter << "  op: " << (op == DefaultOperator::kAnd ? "and" : "or"));
  auto parsed = ParseQuery(q, op);
  REQUIRE(parsed.ok());
  std::unique_ptr<QueryNode> pf;
  if (!filter.empty()) pf = std::move(ParseQuery(filter, op)).value();
  auto expected = oracle.Run(**parsed, pf.get());
  SearchRequest r;
  r.q = q;
  r.filter = filter;
  r.op = op;
  r.limit = 1000000;
  auto res = idx.Search(r);
  REQUIRE(res.ok());
  auto hits = ParseHits(res->hits_json);
  CHECK(res->total == expected.size());
  REQUIRE(hits.size() == expected.size());
  for (size_t i = 0; i < hits.size(); ++i) {
    auto it = expected.find(hits[i].id);
    REQUIRE(it != expected.end());
    INFO("doc " << hits[i].id);
    CHECK(hits[i].score == Approx(it->second).epsilon(1e-6).margin(1e-12));
    if (i > 0) {
      const auto& a = hits[i - 1];
      const auto& b = hits[i];
      double ea = expected[a.id], eb = expected[b.id];
      // Order: score desc, then id asc (when the exact scores differ clearly).
      if (std::abs(ea - eb) > 1e-9 * std::max(1.0, std::abs(ea))) CHECK(ea > eb);
      // Mathematically equal sums may differ in the last ulp (summation
      // order), so within 1e-9 either order is accepted; bit-equal scores
      // must be in id order.
      else if (a.score == b.score && std::abs(ea - eb) == 0) {
        INFO("tie " << a.id << " " << std::setprecision(17) << a.score << " / " << b.id << " " << b.score);
        CHECK(a.id < b.id);
      }
    }
  }
  // Top-k is the head of the full ranking.
  r.limit = 7;
  r.offset = 2;
  auto top = idx.Search(r);
  REQUIRE(top.ok());
  auto th = ParseHits(top->hits_json);
  CHECK(top->total == expected.size());
  for (size_t i = 0; i < th.size(); ++i) CHECK(th[i].id == hits[i + 2].id);
}

// CheckQuery, then each page (offset, limit) of the ranking against the
// same slice of the full ranking (which keeps every match, so nothing is
// pruned): ids and scores bit-identical, not approximately.
void CheckPages(SearchIndex& idx, const Oracle& oracle, const std::string& q,
                std::initializer_list<std::pair<size_t, size_t>> pages) {
  CheckQuery(idx, oracle, q, "", DefaultOperator::kOr);
  INFO("query: " << q);
  SearchRequest r;
  r.q = q;
  r.limit = 1000000;
  auto all = idx.Search(r);
  REQUIRE(all.ok());
  const auto full = ParseHits(all->hits_json);
  for (auto [offset, limit] : pages) {
    r.offset = offset;
    r.limit = limit;
    auto top = idx.Search(r);
    REQUIRE(top.ok());
    CHECK(top->total == all->total);
    const auto hits = ParseHits(top->hits_json);
    REQUIRE(hits.size() == std::min(limit, full.size() - std::min(offset, full.size())));
    for (size_t i = 0; i < hits.size(); ++i) {
      CHECK(hits[i].id == full[offset + i].id);
      CHECK(hits[i].score == full[offset + i].score);
    }
  }
}

// An empty index of kDef in a temporary directory, and the store that
// feeds it.
struct TestIndex {
  std::shared_ptr<const SearchDefinitionImpl> def = std::move(SearchDefinitionImpl::CompileImpl(kDef)).value();
  TempDir dir;
  Store store;
  std::unique_ptr<SearchIndex> idx = std::move(SearchIndex::Open(dir.path(), def)).value();
};

void RunOracle(uint32_t seed, size_t rounds, size_t queries_per_round) {
  TestIndex t;
  auto& def = t.def;
  auto& store = t.store;
  auto& idx = t.idx;
  Gen g(seed);
  int next_id = 0;
  for (size_t round = 0; round < rounds; ++round) {
    size_t n = 1 + g.U(60);
    for (size_t i = 0; i < n; ++i) {
      if (!store.docs.empty() && g.P(0.2)) {
        auto it = store.docs.begin();
        std::advance(it, g.U(store.docs.size()));
        std::string id = it->first;
        if (g.P(0.5)) store.Delete(id);
        else store.Put(id, g.Doc());
      } else {
        store.Put(std::string("d").append(std::to_string(next_id++)), g.Doc());
      }
    }
    REQUIRE(store.Flush(*idx).ok());
    if (g.P(0.2)) {
      idx.reset();
      idx = std::move(SearchIndex::Open(t.dir.path(), def)).value();
      REQUIRE(idx->LastAppliedEtag() == store.etag);
    }
    REQUIRE(idx->LiveDocuments() == store.docs.size());
    Oracle oracle(*def, store.docs);
    for (size_t qi = 0; qi < queries_per_round; ++qi) {
      std::string q = g.Query();
      std::string filter = g.P(0.15) ? g.Leaf() : "";
      CheckQuery(*idx, oracle, q, filter, g.P(0.3) ? DefaultOperator::kAnd : DefaultOperator::kOr);
    }
  }
}

TEST_CASE("oracle: random corpora and queries", "[postings][heavy]") {
  // One seed under a sanitizer (each costs eight times more there); the
  // Release run checks all three.
  for (uint32_t seed : {1u, 2u, 3u}) {
    if (kSanitizerBuild && seed > 1) break;
    INFO("seed " << seed);
    RunOracle(seed, 25, 40);
  }
}

TEST_CASE("oracle: one seed", "[.seed]") {
  const char* s = std::getenv("ORACLE_SEED");
  RunOracle(s ? std::atoi(s) : 1, 60, 60);
}

TEST_CASE("oracle: long run", "[postings][.slow]") {
  for (uint32_t seed = 100; seed < 120; ++seed) {
    INFO("seed " << seed);
    RunOracle(seed, 60, 60);
  }
}

// Top-k pruning (block bounds, per-document tf bounds) matters when terms
// are in most documents and most windows may reach the threshold, which
// the small random corpora above rarely produce: thousands of documents of
// a dozen words. Every query is checked against the brute-force oracle,
// and every top-k against the head of the full ranking (which keeps every
// match, so nothing is pruned), scores bit-identical.
TEST_CASE("top-k of dense terms is the head of the full ranking", "[postings][heavy]") {
  TestIndex t;
  auto& store = t.store;
  auto& idx = t.idx;
  const std::vector<std::string> words = {"alpha", "beta",  "gamma", "delta", "eps", "zeta",
                                          "eta",   "theta", "iota",  "kappa", "lam", "mu"};
  std::mt19937 rng(11);
  auto word = [&] {  // Zipf-like: the first words in most documents, often many times
    return words[std::min<size_t>(
        words.size() - 1, static_cast<size_t>(std::exp2(std::uniform_real_distribution<double>(0, 3.6)(rng))) - 1)];
  };
  for (int batch = 0; batch < 6; ++batch) {
    for (int i = 0; i < 700; ++i) {
      std::string title, body;
      for (int k = 1 + static_cast<int>(rng() % 6); k > 0; --k) title += word() + " ";
      for (int k = 5 + static_cast<int>(rng() % 80); k > 0; --k) body += word() + " ";
      store.Put(DocId(batch * 700 + i), R"({"title": ")" + title + R"(", "body": ")" + body + R"("})");
    }
    for (int i = 0; i < 50; ++i) store.Delete(DocId(rng() % ((batch + 1) * 700)));
    REQUIRE(store.Flush(*idx).ok());
  }
  const Oracle oracle(*t.def, store.docs);
  std::vector<std::string> queries;
  for (size_t a = 0; a < 6; ++a) {
    for (size_t b = a + 1; b < 7; ++b) {
      queries.push_back(words[a] + " AND " + words[b]);
      queries.push_back("+" + words[a] + " " + words[b] + " -" + words[(b + 1) % words.size()]);
      queries.push_back(words[a] + " OR " + words[b]);
      queries.push_back("\"" + words[a] + " " + words[b] + "\"");
      queries.push_back("\"" + words[b] + " " + words[a] + "\"~2");
    }
    queries.push_back(words[a]);
    queries.push_back(words[a].substr(0, 1) + "*");
  }
  // Under a sanitizer every other query (the same kinds, half the cost).
  for (size_t i = 0; i < queries.size(); i += kSanitizerBuild ? 2 : 1)
    CheckPages(*idx, oracle, queries[i], {{0, 10}, {3, 5}});
}

// A phrase of common words is answered by the segment's pair table
// (segments of 1,024 documents or more), its terms' tfs unread, and
// matches in most documents; each phrase term counts only in the fields
// where the phrase matches: here the titles hold the words apart as often
// as together. Checked against the oracle, and the top-10 against the
// head of the full ranking, bit-identical.
TEST_CASE("dense phrases from the pair table count only where they match", "[postings]") {
  TestIndex t;
  auto& store = t.store;
  auto& idx = t.idx;
  std::mt19937 rng(23);
  const std::vector<std::string> words = {"alpha", "beta", "gamma", "delta", "eps"};
  auto pick = [&](std::initializer_list<const char*> options) { return std::string(*(options.begin() + rng() % options.size())); };
  for (int batch = 0; batch < 2; ++batch) {
    for (int i = 0; i < 1100; ++i) {  // segments of 1,024 documents or more have pair tables
      std::string title = pick({"alpha beta", "beta gamma alpha", "alpha delta beta", "gamma"}) + " " + words[rng() % 5];
      std::string body;
      for (int k = 2 + static_cast<int>(rng() % 30); k > 0; --k)
        body += (rng() % 3 == 0 ? "alpha beta" : words[rng() % 5]) + " ";
      store.Put(DocId(batch * 1100 + i), R"({"title": ")" + title + R"(", "body": ")" + body + R"("})");
    }
    for (int i = 0; i < 30; ++i) store.Delete(DocId(rng() % ((batch + 1) * 1100)));
    REQUIRE(store.Flush(*idx).ok());
  }
  const Oracle oracle(*t.def, store.docs);
  for (const std::string q : {"\"alpha beta\"", "\"beta alpha\"", "\"alpha beta\" gamma", "+\"alpha beta\" +gamma",
                              "\"alpha beta\" -delta", "title:\"alpha beta\"^3 body:\"alpha beta\"", "\"alpha beta\" \"beta gamma\""}) {
    CheckPages(*idx, oracle, q, {{0, 10}});
  }
}

// A phrase of a rarer word and one in every document ("zed every") ranks
// its matches by the rarer word's partial sums first: the page's end-th
// largest of them is the bar the rest must reach. Here the partial sums
// differ from document to document (tf 1-4, lengths 3-200), so a bar one
// place too high or too low changes the page.
TEST_CASE("a leaf's light terms leave its top pages as the oracle ranks them", "[postings]") {
  TestIndex t;
  auto& store = t.store;
  auto& idx = t.idx;
  std::mt19937 rng(37);
  const std::vector<std::string> fillers = {"kilo", "lima", "mike", "oscar", "papa", "quebec", "romeo"};
  for (int i = 0; i < 3000; ++i) {
    std::string body = "every";
    for (int k = static_cast<int>(rng() % 200); k > 0; --k) body += " " + fillers[rng() % fillers.size()];
    if (rng() % 3 == 0)
      for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k) body += " zed every";
    store.Put(DocId(i), R"({"title": "x", "body": ")" + body + R"("})");
  }
  REQUIRE(store.Flush(*idx).ok());
  const Oracle oracle(*t.def, store.docs);
  for (const std::string q : {"\"zed every\"", "body:\"zed every\"", "\"every zed\"~3"})
    CheckPages(*idx, oracle, q, {{0, 1}, {0, 10}, {3, 7}, {0, 60}, {0, 300}});
}

// A phrase whose verification reads many candidates in a segment (2,048
// or more) verifies them in chunks on every core, concatenated after: the
// matches, their tfs (which scoring reads) and so the totals, hits and
// order must be the serial search's, which the oracle and the full ranking
// give, with deletes, a filter, deep pages and a limit of zero. One large
// segment (chunked) and one small (serial).
TEST_CASE("a phrase verified in chunks on every core matches the oracle", "[postings]") {
  TestIndex t;
  auto& store = t.store;
  auto& idx = t.idx;
  std::mt19937 rng(29);
  const std::vector<std::string> words = {"alpha", "beta", "gamma", "delta", "eps", "zeta"};
  const std::vector<std::string> tags = {"red", "green", "blue"};
  int next = 0;
  for (const int batch : {9000, 300}) {
    for (int i = 0; i < batch; ++i, ++next) {
      std::string title = words[rng() % 6] + " " + words[rng() % 6], body;
      for (int k = 2 + static_cast<int>(rng() % 30); k > 0; --k)
        body += (rng() % 3 == 0 ? "alpha beta" : words[rng() % 6]) + " ";
      store.Put(DocId(next), R"({"title": ")" + title + R"(", "body": ")" + body + R"(", "tags": ")" + tags[rng() % 3] +
                                 R"(", "n": )" + std::to_string(rng() % 100) + "}");
    }
    for (int i = 0; i < 50; ++i) store.Delete(DocId(static_cast<int>(rng() % static_cast<unsigned>(next))));
    REQUIRE(store.Flush(*idx).ok());
  }
  const Oracle oracle(*t.def, store.docs);
  // Verified with slop, verified among a pair's candidates, in one field
  // only, a repeated word, and (for contrast) answered by the pair table.
  for (const std::string q : {"\"beta alpha\"~2", "\"gamma delta\"~1", "\"alpha beta gamma\"", "body:\"zeta eps\"~1",
                              "\"alpha alpha\"~2", "\"alpha beta\""}) {
    CheckPages(*idx, oracle, q, {{0, 10}, {7, 25}, {0, 3000}});
    CheckQuery(*idx, oracle, q, "n:[10 TO 60]", DefaultOperator::kOr);
    CheckQuery(*idx, oracle, q, "tags:red", DefaultOperator::kAnd);
    INFO("query: " << q);
    SearchRequest r;
    r.q = q;
    r.limit = 10;
    auto plain = idx->Search(r);
    r.limit = 0;
    auto counted = idx->Search(r);
    REQUIRE(plain.ok());
    REQUIRE(counted.ok());
    CHECK(counted->total == plain->total);
    CHECK(counted->hits_json == "[]");
  }
}

// A conjunction of common words over one segment of 20,000 documents, most
// of which match (bitset containers, not arrays), and the block-max windows run
// through most of the segment with deletes and a filter restricting them.
// Pages must be the oracle's, scores bit-identical.
TEST_CASE("a dense conjunction over a large segment matches the oracle", "[postings][heavy]") {
  TestIndex t;
  auto& store = t.store;
  auto& idx = t.idx;
  std::mt19937 rng(31);
  const std::vector<std::string> words = {"alpha", "beta", "gamma", "delta"};
  int next = 0;
  for (const int batch : {20000, 500}) {
    for (int i = 0; i < batch; ++i, ++next) {
      std::string title = words[rng() % 4], body;
      for (int k = 8 + static_cast<int>(rng() % 12); k > 0; --k) body += words[rng() % 4] + " ";
      store.Put(DocId(next), R"({"title": ")" + title + R"(", "body": ")" + body + R"(", "n": )" +
                                 std::to_string(rng() % 100) + "}");
    }
    for (int i = 0; i < 300; ++i) store.Delete(DocId(static_cast<int>(rng() % static_cast<unsigned>(next))));
    REQUIRE(store.Flush(*idx).ok());
  }
  const Oracle oracle(*t.def, store.docs);
  for (const std::string q : {"alpha AND beta", "body:gamma AND body:delta AND alpha"}) {
    CheckPages(*idx, oracle, q, {{0, 10}, {7, 25}, {0, 200}});
    CheckQuery(*idx, oracle, q, "n:[10 TO 60]", DefaultOperator::kOr);
  }
}

// A conjunction or disjunction of common words over titles and bodies:
// most documents match, and the top is found by intersecting the terms of
// largest bound first, scoring those deepest matches (for an OR, a sample
// of them sets a floor), then only the matches that hold the terms the
// threshold makes required. Here the body words repeat and the titles are
// long or short, so that for some queries and pages a match without the
// title terms still ranks (nothing is required), for others one or two
// title terms are. Checked against the oracle, and each page against the
// head of the full ranking (which scores every match), bit-identical.
TEST_CASE("common words find their top through the required terms", "[postings][heavy]") {
  TestIndex t;
  auto& store = t.store;
  auto& idx = t.idx;
  std::mt19937 rng(47);
  const std::vector<std::string> words = {"alpha", "beta",  "gamma", "delta", "eps", "zeta",
                                          "eta",   "theta", "iota",  "kappa", "lam", "mu"};
  int next = 0;
  for (const int batch : {9000, 300}) {
    for (int i = 0; i < batch; ++i, ++next) {
      std::string title, body;
      for (int k = 1 + static_cast<int>(rng() % 8); k > 0; --k) title += words[rng() % words.size()] + " ";
      for (int k = 10 + static_cast<int>(rng() % 40); k > 0; --k) {
        // A word and its run of repeats: tfs up to about 20.
        const std::string& w = words[rng() % words.size()];
        for (int r = rng() % 4 == 0 ? 1 + static_cast<int>(rng() % 8) : 1; r > 0; --r) body += w + " ";
      }
      store.Put(DocId(next), R"({"title": ")" + title + R"(", "body": ")" + body + R"("})");
    }
    for (int i = 0; i < 200; ++i) store.Delete(DocId(static_cast<int>(rng() % static_cast<unsigned>(next))));
    REQUIRE(store.Flush(*idx).ok());
  }
  const Oracle oracle(*t.def, store.docs);
  for (const std::string q : {"alpha AND beta", "beta AND gamma", "alpha AND delta", "delta AND eps",
                              "alpha AND beta AND gamma", "gamma AND gamma", "alpha OR beta", "gamma OR delta",
                              "alpha OR beta OR gamma", "eps OR eps", "alpha OR body:beta", "body:alpha OR body:beta"})
    CheckPages(*idx, oracle, q, {{0, 10}, {4, 12}, {0, 60}, {30, 300}});
}

// Prefix and fuzzy words that expand to many terms (more than the
// MaxScore path takes) are scored term-at-a-time into a dense accumulator
// that also finds the matches; deletes, filters and prohibited clauses
// restrict it afterwards, and facets give it the matches ready-made. Each
// shape is checked against the brute-force oracle, across several segments.
TEST_CASE("wide prefix and fuzzy expansions match the oracle", "[postings]") {
  TestIndex t;
  auto& store = t.store;
  auto& idx = t.idx;
  std::mt19937 rng(5);
  // 3 x 26 x 4 words sharing prefixes: "pab1", "pqz3", "rzz0", ...
  auto word = [&] {
    const char w[4] = {"prs"[rng() % 3], static_cast<char>('a' + rng() % 26), static_cast<char>('a' + rng() % 26),
                       static_cast<char>('0' + rng() % 4)};
    return std::string(w, 4);
  };
  const std::vector<std::string> tags = {"red", "green", "blue"};
  for (int batch = 0; batch < 4; ++batch) {
    for (int i = 0; i < 300; ++i) {
      std::string title, body;
      for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k) title += word() + " ";
      for (int k = 3 + static_cast<int>(rng() % 40); k > 0; --k) body += word() + " ";
      store.Put(DocId(batch * 300 + i), R"({"title": ")" + title + R"(", "body": ")" + body +
                                                           R"(", "tags": ")" + tags[rng() % 3] + R"(", "n": )" +
                                                           std::to_string(rng() % 100) + "}");
    }
    for (int i = 0; i < 40; ++i) store.Delete(DocId(rng() % ((batch + 1) * 300)));
    REQUIRE(store.Flush(*idx).ok());
  }
  const Oracle oracle(*t.def, store.docs);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"p*", ""},           {"pa*", ""},          {"pa* pb* pc*", ""},      {"p* -pa*", ""},
      {"pa* -title:pb*", ""}, {"p*", "tags:red"}, {"pa* OR sab1", "n:[10 TO 60]"}, {"paa0~2", ""},
      {"title:p*^2 body:r*", ""}, {"+pa* +r*", ""}, {"(pa* pb*) AND NOT s*", "tags:blue"}};
  for (const auto& [q, filter] : cases) {
    CheckQuery(*idx, oracle, q, filter, DefaultOperator::kOr);
    // With facets the matches come from the bitmap evaluation instead;
    // the hits must not change.
    INFO("query: " << q << "  filter: " << filter);
    SearchRequest r;
    r.q = q;
    r.filter = filter;
    r.limit = 10;
    auto plain = idx->Search(r);
    r.facets = {"tags"};
    auto faceted = idx->Search(r);
    REQUIRE(plain.ok());
    REQUIRE(faceted.ok());
    CHECK(plain->total == faceted->total);
    CHECK(plain->hits_json == faceted->hits_json);
    // The facet counts over the oracle's matches.
    auto parsed = ParseQuery(q, DefaultOperator::kOr);
    std::unique_ptr<QueryNode> pf;
    if (!filter.empty()) pf = std::move(ParseQuery(filter, DefaultOperator::kOr)).value();
    std::map<std::string, uint64_t> want;
    for (const auto& [id, score] : oracle.Run(**parsed, pf.get())) {
      const std::string& json = store.docs.at(id);
      const size_t at = json.find(R"("tags": ")") + 9;
      ++want[json.substr(at, json.find('"', at) - at)];
    }
    rapidjson::Document facets;
    facets.Parse(faceted->facets_json.c_str());
    REQUIRE(facets.IsObject());
    std::map<std::string, uint64_t> got;
    for (const auto& m : facets["tags"].GetObject()) got[m.name.GetString()] = m.value.GetUint64();
    CHECK(got == want);
    // limit=0 asks for the total alone (no top-k to fill).
    r.facets.clear();
    r.limit = 0;
    auto counted = idx->Search(r);
    REQUIRE(counted.ok());
    CHECK(counted->total == plain->total);
    CHECK(counted->hits_json == "[]");
  }
}

}  // namespace
}  // namespace corvid::postings
