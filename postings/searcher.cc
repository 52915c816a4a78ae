// The searcher: compiles a parsed query against a snapshot (field
// resolution, analysis, prefix/fuzzy expansion over the term dictionaries,
// global BM25 statistics over live documents), evaluates its boolean
// structure per segment with roaring bitmap algebra, scores matches with
// BM25 exactly as API.md defines it, and renders hits, facets, stored
// fields and highlights.
//
// Scoring rules (the oracle in tests/postings follows the same ones):
// - A term leaf scores idf*tf/(tf + k1*(1-b+b*len/avglen)) * field boost *
//   product of the query boosts above it; a bare word scores the sum over
//   the text fields it matches.
// - A query word that a field's analyzer turns into several tokens is a
//   phrase (slop 0) in that field; one that yields no token in any field is
//   dropped from its boolean (as Lucene does); a boolean left empty matches
//   nothing.
// - A phrase scores the sum of the BM25 of its distinct terms (each with its
//   own tf in the document), in documents where the phrase matches. With
//   slop s it matches when positions p_i of each phrase term i exist with
//   max(p_i - r_i) - min(p_i - r_i) <= s (r_i: the term's position in the
//   query; positions chosen independently per term, but a word the phrase
//   repeats needs a distinct position per repetition, as in Lucene).
// - Prefix and fuzzy leaves expand to the matching terms of the dictionary
//   and score the sum of the BM25 of the expanded terms the document has.
// - Ranges and numeric equality match without scoring (0).
// - A boolean scores the sum of its matching required and optional clauses.
// - Ties in score (or in sort keys) are broken by document id, ascending
//   bytewise.
//
// Deep paging (API.md): every hit carries its sort key, the values it was
// ordered by and then its id, so the key is a total order; a request with
// `search_after` keeps only the matches strictly after its key, checked as
// they are collected (TopK, or the field sort's bounded list), never by
// materializing every hit.
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>
#include <utility>

#include "common/exact_json.h"
#include "common/utf8.h"
#include "postings/fuzzy.h"
#include "postings/parallel.h"
#include "postings/query_parser.h"
#include "postings/rank_cursor.h"
#include "postings/snapshot.h"

namespace corvid::postings {
namespace {

constexpr double kK1 = 1.2;
constexpr double kB = 0.75;
// Flat disjunctions of more terms than this are scored term-at-a-time.
constexpr size_t kMaxScoreTerms = 16;

Status Bad(const std::string& msg) { return Status::InvalidArgument(msg); }

class VectorSink final : public analyzers::TokenSink {
 public:
  void OnToken(const analyzers::Token& t) override {
    terms.emplace_back(t.term);
    positions.push_back(t.position);
  }
  std::vector<std::string> terms;
  std::vector<uint32_t> positions;
};

// One alternative of a leaf in one text field: a term, a phrase, or an
// expansion (`any`: the dictionary terms a prefix or fuzzy word matched,
// each scored where it occurs; one Alt for all of them, so a prefix that
// expands to thousands of terms costs a few allocations, not thousands).
struct Alt {
  uint32_t field = 0;
  bool any = false;                // an expansion: matches where any of `terms` occurs
  std::vector<std::string> terms;  // in query order; one for a term; distinct, bytewise ascending when `any`
  std::vector<uint32_t> rel;       // query positions, relative to the first (empty when `any`)
  uint32_t slop = 0;
  // The distinct terms, when `terms` repeats one; empty otherwise (then
  // the score terms are `terms`).
  std::vector<std::string> score_terms;
  std::vector<double> idf;  // per score term
  double weight = 1.0;      // field boost * query boosts
  std::vector<int64_t> seg_terms;        // [segment * terms.size() + i]: dictionary index of terms[i], or -1
  std::vector<int64_t> seg_score_terms;  // likewise for score_terms (empty when it is)

  const std::vector<std::string>& ScoreTerms() const { return score_terms.empty() ? terms : score_terms; }
  // The dictionary indexes of `terms` in segment k.
  std::span<const int64_t> SegTerms(size_t k) const { return {seg_terms.data() + k * terms.size(), terms.size()}; }
  int64_t SegTerm(size_t k, size_t i) const { return SegTerms(k)[i]; }
  int64_t SegScoreTerm(size_t k, size_t i) const {
    return score_terms.empty() ? SegTerm(k, i) : seg_score_terms[k * score_terms.size() + i];
  }
};

struct CNode {
  enum class Kind { kBool, kLeaf, kNumRange, kTermRange, kAll, kNone, kDropped };
  Kind kind = Kind::kNone;
  int id = 0;
  std::vector<std::pair<Occur, std::unique_ptr<CNode>>> clauses;
  std::vector<Alt> alts;
  uint32_t slot = 0;  // numeric slot or text field
  Number lo{-HUGE_VAL, 0}, hi{HUGE_VAL, 0};
  bool lo_incl = true, hi_incl = true;
  std::string slo, shi;
  bool lo_open = true, hi_open = true;
};

// k1 * (1 - b + b * len / avglen): the part of BM25 that depends on the
// document (its field length) and not on the term.
double LengthNorm(uint32_t len, double avglen) { return kK1 * (1 - kB + kB * len / avglen); }

// BM25 of one term given the document's LengthNorm. Every path computes a
// score through here, with the norm from LengthNorm directly or memoized
// (FieldNorms), so scores are bit-identical whichever path runs.
double Bm25WithNorm(double idf, uint32_t tf, double norm) { return idf * tf / (tf + norm); }

double Bm25(double idf, uint32_t tf, uint32_t len, double avglen) {
  return Bm25WithNorm(idf, tf, LengthNorm(len, avglen));
}

// A text field's average length (over live documents, at query time) and
// its LengthNorm memoized for lengths below kMemoLengths: a query that
// scores many postings of the field divides once per distinct length, not
// once per posting. Single-threaded. The memo is taken from the thread's
// pool and given back: the next search of the same field in the same
// snapshot (the same average) finds its norms computed, and no search
// allocates or clears 8 KB per field.
class FieldNorms {
 public:
  static constexpr uint32_t kMemoLengths = 1024;
  explicit FieldNorms(double avglen) : memo_(TakeMemo(avglen)) {}
  ~FieldNorms() {
    if (pool.size() < kPoolSize) pool.push_back(std::move(memo_));
  }
  FieldNorms(const FieldNorms&) = delete;
  FieldNorms& operator=(const FieldNorms&) = delete;
  double avglen() const { return memo_->avglen; }
  double operator()(uint32_t len) {
    if (len >= kMemoLengths) return LengthNorm(len, memo_->avglen);
    double& n = memo_->norms[len];
    if (n < 0) n = LengthNorm(len, memo_->avglen);  // a norm is >= k1 * (1 - b) > 0
    return n;
  }

 private:
  struct Memo {
    double avglen;
    double norms[kMemoLengths];  // -1: not computed yet
  };
  // Enough for every field a search has in use at once (its own norms and
  // those of its segments' pieces), over a few fields.
  static constexpr size_t kPoolSize = 16;
  static thread_local std::vector<std::unique_ptr<Memo>> pool;

  // A memo of `avglen`'s norms: the pool's own if it has one (compared
  // bit for bit; a norm depends on nothing else, so any field with that
  // average may share it), else the last one given back, or a new one,
  // cleared for it.
  static std::unique_ptr<Memo> TakeMemo(double avglen) {
    if (pool.capacity() < kPoolSize) pool.reserve(kPoolSize);  // the destructor's push_back cannot throw
    const auto same = std::find_if(pool.begin(), pool.end(), [avglen](const std::unique_ptr<Memo>& m) {
      return std::memcmp(&m->avglen, &avglen, sizeof avglen) == 0;
    });
    const bool computed = same != pool.end();
    if (computed) std::iter_swap(same, pool.end() - 1);
    std::unique_ptr<Memo> m;
    if (pool.empty()) {
      m = std::make_unique<Memo>();
    } else {
      m = std::move(pool.back());
      pool.pop_back();
    }
    if (!computed) {
      m->avglen = avglen;
      std::fill_n(m->norms, kMemoLengths, -1.0);
    }
    return m;
  }

  std::unique_ptr<Memo> memo_;
};
thread_local std::vector<std::unique_ptr<FieldNorms::Memo>> FieldNorms::pool;

// One FieldNorms per text field of the snapshot, made at first use.
class Norms {
 public:
  explicit Norms(const Snapshot& snap) : snap_(snap), fields_(snap.sum_len.size()) {}
  // Inline where the norms exist already: scoring loops ask per list.
  FieldNorms& field(uint32_t f) { return fields_[f] ? *fields_[f] : Make(f); }

 private:
  [[gnu::noinline]] FieldNorms& Make(uint32_t f) {
    fields_[f] = std::make_unique<FieldNorms>(static_cast<double>(snap_.sum_len[f]) / snap_.with_tokens[f]);
    return *fields_[f];
  }
  const Snapshot& snap_;
  std::vector<std::unique_ptr<FieldNorms>> fields_;
};

// An upper bound of weight * Bm25 over postings whose tf is at most `tf`
// and length at least `len` (Bm25 grows with tf, shrinks with length),
// nudged up so that it is never below a rounded actual score.
double ScoreBound(double weight, double idf, uint32_t tf, uint32_t len, double avglen) {
  return weight * Bm25(idf, tf, len, avglen) * (1 + 1e-9) + 1e-300;
}

// ScoreBound over a block of postings: its largest tf, its shortest length.
double BlockBound(double weight, double idf, const BlockMax& bm, double avglen) {
  const uint32_t tf = bm.max_tf, len = bm.min_len;  // copies: BlockMax is packed, unaligned in the file
  return ScoreBound(weight, idf, tf, len, avglen);
}

// A number or date of a query: [start, end) is the period a date names
// ("2024-03-17" is that whole day; ParseIsoDate); end == start for a
// number, or a date with a fraction of a second (a point).
struct QueryValue {
  Number start, end;
};

// An integer literal is exact up to 64 bits, as a document's JSON integer
// is (Number); any other number is the nearest double.
std::optional<Number> ParseNumber(std::string_view s) {
  const char *b = s.data(), *e = s.data() + s.size();
  int64_t i = 0;
  if (auto r = std::from_chars(b, e, i); r.ec == std::errc() && r.ptr == e) return Number::Of(i);
  uint64_t u = 0;
  if (auto r = std::from_chars(b, e, u); r.ec == std::errc() && r.ptr == e) return Number::Of(u);
  double v = 0;
  if (auto r = std::from_chars(b, e, v); r.ec == std::errc() && r.ptr == e && std::isfinite(v)) return Number{v, 0};
  return std::nullopt;
}

Result<QueryValue> ParseNumberOrDate(const FieldDef& f, std::string_view s, size_t offset) {
  if (f.kind == FieldKind::kDate) {
    double end = 0;
    if (auto d = ParseIsoDate(s, &end)) return QueryValue{Number{*d, 0}, Number{end, 0}};
  }
  if (auto v = ParseNumber(s)) return QueryValue{*v, *v};
  return Bad("field '" + f.name + "' expects a " + (f.kind == FieldKind::kDate ? "date" : "number") + ", not '" +
             std::string(s) + "' at offset " + std::to_string(offset));
}

// A wildcard word (QueryNode::kWildcard: '*' any characters, none
// included, '?' exactly one code point, '\\' escaping the next character),
// as Lucene's WildcardQuery, normalized for one field.
struct WildcardWord {
  std::string pattern;   // each run between wildcards normalized as NormalizeMultiTermText does a word
  std::string head;      // its characters before the first wildcard: every match starts with them
  size_t min_bytes = 0;  // one per character and per '?': a shorter term cannot match
};

WildcardWord NormalizeWildcard(const FieldDef& field, std::string_view pattern) {
  WildcardWord w;
  std::string run;
  bool wild_seen = false;
  auto flush = [&] {
    const std::string normalized = NormalizeMultiTermText(field, run);
    if (!wild_seen) w.head = normalized;
    w.min_bytes += normalized.size();
    for (char c : normalized) {
      if (c == '*' || c == '?' || c == '\\') w.pattern += '\\';
      w.pattern += c;
    }
    run.clear();
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      run += pattern[++i];
    } else if (c == '*' || c == '?') {
      flush();
      wild_seen = true;
      w.pattern += c;
      w.min_bytes += c == '?';
    } else {
      run += c;
    }
  }
  flush();
  return w;
}

// Whether `term` matches `pattern` whole.
bool WildcardMatch(std::string_view pattern, std::string_view term) {
  // Greedy, backtracking to the last '*' only (which suffices: a later
  // star can absorb whatever an earlier one would have): O(|p| * |t|)
  // at worst. A '?' takes one code point, and so does each step of a '*'.
  size_t p = 0, t = 0, star = std::string_view::npos, star_t = 0;
  while (t < term.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = ++p;
      star_t = t;
      continue;
    }
    if (p < pattern.size() && pattern[p] == '?') {
      ++p;
      t = NextCodePoint(term, t);
      continue;
    }
    if (p < pattern.size()) {
      const size_t lit = pattern[p] == '\\' && p + 1 < pattern.size() ? p + 1 : p;
      if (pattern[lit] == term[t]) {
        p = lit + 1;
        ++t;
        continue;
      }
    }
    if (star == std::string_view::npos) return false;
    p = star;
    star_t = NextCodePoint(term, star_t);
    t = star_t;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// Bounds on what one query may ask for, checked before the memory is
// spent (docs/http-choices.md): Lucene's maxClauseCount and Elasticsearch's
// index.max_terms_count in spirit. Terms: every analyzed token of every
// word and phrase, per field. Expansions: the distinct dictionary terms one
// prefix, wildcard or fuzzy word expands to in one field. A fuzzy word's
// length bounds its edit-distance rows (fuzzy.cc).
constexpr size_t kMaxQueryTerms = 4096;
constexpr size_t kMaxExpansions = 65536;
constexpr size_t kMaxFuzzyCodePoints = 256;

class Compiler {
 public:
  Compiler(const Snapshot& snap) : snap_(snap), def_(*snap.def) {}
  int node_count() const { return next_id_; }

  Result<std::unique_ptr<CNode>> Compile(const QueryNode& q, double boost) {
    boost *= q.boost;
    // Bounded so that no score can overflow to infinity (which JSON cannot
    // carry): a term contributes at most ~50 * boost * field boost.
    if (!(boost <= kMaxBoost))
      return Bad("boosts multiply to more than " + std::string(kMaxBoostText) + " at offset " + std::to_string(q.offset));
    auto n = std::make_unique<CNode>();
    n->id = next_id_++;
    using K = QueryNode::Kind;
    switch (q.kind) {
      case K::kMatchAll:
        n->kind = CNode::Kind::kAll;
        return n;
      case K::kBool: {
        n->kind = CNode::Kind::kBool;
        for (const auto& [occ, c] : q.clauses) {
          auto cc = Compile(*c, boost);
          if (!cc.ok()) return cc;
          if ((*cc)->kind == CNode::Kind::kDropped) continue;
          n->clauses.emplace_back(occ, std::move(cc).value());
        }
        if (n->clauses.empty()) n->kind = CNode::Kind::kDropped;
        return n;
      }
      default:
        break;
    }
    std::vector<const FieldDef*> fields;
    if (q.field.empty()) {
      if (q.kind == K::kRange) return Bad("a range needs a field at offset " + std::to_string(q.offset));
      fields = def_.text_fields();
    } else {
      const FieldDef* f = def_.Find(q.field);
      if (f == nullptr) return Bad("unknown field '" + q.field + "' at offset " + std::to_string(q.offset));
      fields.push_back(f);
    }
    if (fields.size() == 1 && fields[0]->kind != FieldKind::kText) {
      const FieldDef& f = *fields[0];
      n->kind = CNode::Kind::kNumRange;
      n->slot = f.slot;
      // A date's period is rounded as Lucene's classic parser and
      // Elasticsearch round it: a value matches its whole period
      // (d:2024-03-17 is that day), an inclusive upper bound and an
      // exclusive lower one take the period's end ([* TO 2024-03-17]
      // takes the whole day, {2024-03-17 TO *] starts after it).
      if (q.kind == K::kTerm || q.kind == K::kPhrase) {
        auto v = ParseNumberOrDate(f, q.text, q.offset);
        if (!v.ok()) return v.status();
        n->lo = v->start;
        n->hi = v->end;
        n->hi_incl = v->end == v->start;
        return n;
      }
      if (q.kind != K::kRange)
        return Bad("field '" + f.name + "' takes a value or a range, not a prefix, wildcard or fuzzy term at offset " +
                   std::to_string(q.offset));
      if (!q.lo_open) {
        auto v = ParseNumberOrDate(f, q.lo, q.offset);
        if (!v.ok()) return v.status();
        const bool period = v->end != v->start;
        n->lo = q.lo_incl || !period ? v->start : v->end;
        n->lo_incl = q.lo_incl || period;
      }
      if (!q.hi_open) {
        auto v = ParseNumberOrDate(f, q.hi, q.offset);
        if (!v.ok()) return v.status();
        const bool period = v->end != v->start;
        n->hi = q.hi_incl && period ? v->end : v->start;
        n->hi_incl = q.hi_incl && !period;
      }
      return n;
    }
    if (q.kind == K::kRange) {
      n->kind = CNode::Kind::kTermRange;
      n->slot = fields[0]->slot;
      // Bounds normalized as prefix and fuzzy words are (Lucene's
      // Analyzer.normalize): title:[B TO D] is title:[b TO d].
      n->slo = q.lo_open ? q.lo : NormalizeMultiTermText(*fields[0], q.lo);
      n->shi = q.hi_open ? q.hi : NormalizeMultiTermText(*fields[0], q.hi);
      n->lo_open = q.lo_open;
      n->hi_open = q.hi_open;
      n->lo_incl = q.lo_incl;
      n->hi_incl = q.hi_incl;
      return n;
    }
    n->kind = CNode::Kind::kLeaf;
    if (q.kind == K::kPrefix || q.kind == K::kWildcard || q.kind == K::kFuzzy) {
      if ((terms_ += fields.size()) > kMaxQueryTerms)
        return Bad("the query has more than " + std::to_string(kMaxQueryTerms) + " terms at offset " +
                   std::to_string(q.offset));
      if (q.kind == K::kFuzzy && CountCodePoints(q.text) > kMaxFuzzyCodePoints)
        return Bad("a fuzzy word may have at most " + std::to_string(kMaxFuzzyCodePoints) +
                   " characters at offset " + std::to_string(q.offset));
      if (!Expand(q, fields, boost, *n))  // a word no dictionary has: a leaf that matches nothing
        return Bad("'" + std::string(Utf8Prefix(q.text, 100)) + "' expands to more than " +
                   std::to_string(kMaxExpansions) + " terms in one field at offset " + std::to_string(q.offset));
      if (fields.empty()) n->kind = CNode::Kind::kDropped;
      return n;
    }
    bool any_tokens = false;
    std::vector<std::pair<const analyzers::Analyzer*, VectorSink>> analyzed;  // the text, once per analyzer
    for (const FieldDef* f : fields) {
      double w = boost * f->boost;
      auto same = std::find_if(analyzed.begin(), analyzed.end(), [&](const auto& e) { return e.first == f->analyzer; });
      if (same == analyzed.end()) {
        analyzed.emplace_back(f->analyzer, VectorSink());
        Status st = f->analyzer->Analyze(q.text, analyzed.back().second);
        if (!st.ok()) return st;
        same = analyzed.end() - 1;
      }
      const VectorSink& sink = same->second;
      if (sink.terms.empty()) continue;
      any_tokens = true;
      if ((terms_ += sink.terms.size()) > kMaxQueryTerms)
        return Bad("the query has more than " + std::to_string(kMaxQueryTerms) + " terms at offset " +
                   std::to_string(q.offset));
      Alt a;
      a.field = f->slot;
      a.weight = w;
      a.slop = q.kind == K::kPhrase ? q.slop : 0;
      for (size_t i = 0; i < sink.terms.size(); ++i) {
        a.terms.push_back(sink.terms[i]);
        a.rel.push_back(sink.positions[i] - sink.positions[0]);
      }
      AddAlt(*n, std::move(a));
    }
    if (!any_tokens) n->kind = CNode::Kind::kDropped;
    return n;
  }

 private:
  // A prefix, wildcard or fuzzy word: per field, one Alt (`any`) of the dictionary
  // terms it matches in any segment. The dictionaries are searched, and
  // the matches' live document frequencies read, one piece per field and
  // segment, in parallel (a short prefix matches hundreds of terms, whose
  // list headers are cache misses); the pieces are merged here.
  // False if the word expands to more than kMaxExpansions terms in one
  // field segment (n is then incomplete).
  bool Expand(const QueryNode& q, const std::vector<const FieldDef*>& fields, double boost, CNode& n) {
    const size_t ns = snap_.segments.size();
    std::vector<std::string> text(fields.size());
    std::vector<WildcardWord> wildcard(q.kind == QueryNode::Kind::kWildcard ? fields.size() : 0);
    for (size_t fi = 0; fi < fields.size(); ++fi) {
      if (wildcard.empty()) {
        text[fi] = NormalizeMultiTermText(*fields[fi], q.text);
      } else {
        wildcard[fi] = NormalizeWildcard(*fields[fi], q.text);
        text[fi] = wildcard[fi].pattern;
      }
    }
    struct Found {
      std::vector<uint32_t> terms;  // dictionary indexes, in dictionary (bytewise) order
      std::vector<uint64_t> df;     // their live document frequencies
    };
    std::vector<Found> found(fields.size() * ns);
    std::atomic<bool> too_many{false};
    auto piece = [&](size_t p) {
      const size_t fi = p / ns, k = p % ns;
      const SegmentState& s = snap_.segments[k];
      const Segment& seg = *s.segment;
      const uint32_t slot = fields[fi]->slot;
      const std::string& t = text[fi];
      Found& out = found[p];
      if (q.kind == QueryNode::Kind::kPrefix) {
        const uint32_t lo = seg.LowerBound(slot, t);
        uint32_t i = lo;
        for (; i < seg.term_count(slot) && seg.term(slot, i).starts_with(t); ++i) {
          if (i - lo == kMaxExpansions) return too_many.store(true);
          out.terms.push_back(i);
        }
      } else if (q.kind == QueryNode::Kind::kWildcard) {
        // The terms starting with the pattern's literal head, matched.
        const WildcardWord& w = wildcard[fi];
        for (uint32_t i = seg.LowerBound(slot, w.head);
             i < seg.term_count(slot) && seg.term(slot, i).starts_with(w.head); ++i) {
          const std::string_view term = seg.term(slot, i);
          if (term.size() >= w.min_bytes && WildcardMatch(t, term)) {
            if (out.terms.size() == kMaxExpansions) return too_many.store(true);
            out.terms.push_back(i);
          }
        }
      } else {
        ForEachFuzzyTerm(seg, slot, t, q.edits, [&](uint32_t i) { out.terms.push_back(i); });
      }
      out.df.reserve(out.terms.size());
      for (uint32_t i : out.terms) out.df.push_back(LiveDocFreq(s, slot, i));
    };
    ParallelFor(found.size(), piece);
    if (too_many.load()) return false;
    for (size_t fi = 0; fi < fields.size(); ++fi) {
      // Merged into distinct terms, each with its index in every segment
      // (index[term * ns + k]; laid out by segment below).
      const uint32_t slot = fields[fi]->slot;
      const Found* seg_found = found.data() + fi * ns;
      Alt a;
      a.field = slot;
      a.weight = boost * fields[fi]->boost;
      a.any = true;
      std::vector<size_t> at(ns, 0);
      std::vector<int64_t> index;
      std::vector<uint64_t> df;
      std::vector<std::string_view> head(ns);  // segment k's next term; data() null when none is left
      auto advance = [&](size_t k) {
        const Found& f = seg_found[k];
        head[k] = at[k] < f.terms.size() ? snap_.segments[k].segment->term(slot, f.terms[at[k]]) : std::string_view();
      };
      for (size_t k = 0; k < ns; ++k) advance(k);
      std::vector<char> has(ns);  // whether segment k's head is the least term
      for (;;) {
        // One comparison per segment: a head equal to the least so far
        // joins it, a smaller one starts over.
        std::string_view least;
        for (size_t k = 0; k < ns; ++k) {
          has[k] = false;
          if (head[k].data() == nullptr) continue;
          const int c = least.data() == nullptr ? -1 : head[k].compare(least);
          if (c < 0) {
            std::fill_n(has.begin(), k, false);
            least = head[k];
          }
          has[k] = c <= 0;
        }
        if (least.data() == nullptr) break;
        a.terms.emplace_back(least);
        uint64_t n = 0;
        for (size_t k = 0; k < ns; ++k) {
          index.push_back(has[k] ? static_cast<int64_t>(seg_found[k].terms[at[k]]) : -1);
          if (!has[k]) continue;
          n += seg_found[k].df[at[k]++];
          advance(k);
        }
        df.push_back(n);
      }
      if (a.terms.empty()) continue;
      a.seg_terms.resize(index.size());
      for (size_t i = 0; i < a.terms.size(); ++i)
        for (size_t k = 0; k < ns; ++k) a.seg_terms[k * a.terms.size() + i] = index[i * ns + k];
      if (a.terms.size() > kMaxExpansions) return false;  // distinct across segments
      SetIdf(a, df);
      n.alts.push_back(std::move(a));
    }
    return true;
  }

  // Documents of segment s that contain term ti of field f and are live.
  static uint64_t LiveDocFreq(const SegmentState& s, uint32_t f, uint32_t ti) {
    uint64_t n = s.segment->doc_freq(f, ti);
    if (s.deleted_count > 0) {
      auto bm = s.segment->Postings(f, ti);
      n -= roaring_bitmap_and_cardinality(bm.get(), s.deleted.get());
    }
    return n;
  }

  void SetIdf(Alt& a, const std::vector<uint64_t>& df) {
    const double N = static_cast<double>(snap_.with_tokens[a.field]);
    a.idf.reserve(df.size());
    for (uint64_t n : df) a.idf.push_back(std::log(1.0 + (N - n + 0.5) / (n + 0.5)));
  }

  // Resolves a's terms in every segment and computes their idf.
  void AddAlt(CNode& n, Alt a) {
    for (const auto& t : a.terms)
      if (std::find(a.score_terms.begin(), a.score_terms.end(), t) == a.score_terms.end()) a.score_terms.push_back(t);
    if (a.score_terms.size() == a.terms.size()) a.score_terms.clear();  // no repeats: score terms are `terms`
    const size_t ns = snap_.segments.size();
    const size_t nscore = a.ScoreTerms().size();
    a.seg_terms.reserve(ns * a.terms.size());
    std::vector<uint64_t> df(nscore, 0);
    for (size_t k = 0; k < ns; ++k) {
      const SegmentState& s = snap_.segments[k];
      for (const auto& t : a.terms) a.seg_terms.push_back(s.segment->FindTerm(a.field, t));
      for (const auto& t : a.score_terms) a.seg_score_terms.push_back(s.segment->FindTerm(a.field, t));
      for (size_t i = 0; i < nscore; ++i) {
        const int64_t ti = a.SegScoreTerm(k, i);
        if (ti >= 0) df[i] += LiveDocFreq(s, a.field, static_cast<uint32_t>(ti));
      }
    }
    SetIdf(a, df);
    n.alts.push_back(std::move(a));
  }

  const Snapshot& snap_;
  const SearchDefinitionImpl& def_;
  int next_id_ = 0;
  size_t terms_ = 0;  // query terms so far (kMaxQueryTerms)
};

// Iterates one posting list in doc order with its rank (for term
// frequencies) and block-skipping Advance. Doc numbers are decoded a block
// (kPostingBlock postings, the unit of the skip table and block maxima)
// at a time.
class PostingCursor {
 public:
  PostingCursor(const Segment& seg, uint32_t field, uint32_t ti) {
    const TermEntry e = seg.entry(field, ti);  // decoded once for all four
    bm_ = seg.Postings(e);
    blocks_ = seg.Blocks(e, whole_);
    df_ = e.doc_freq;
    nblocks_ = static_cast<uint32_t>(BlockCount(df_));
    tfs_ = seg.Tfs(e);
    roaring_init_iterator(bm_.get(), &it_);
    LoadBlock(0);
  }
  // The list's block maxima (valid while the cursor is).
  const BlockMax* blocks() const { return blocks_; }
  bool valid() const { return rank_ < df_; }
  uint32_t doc() const { return buf_[rank_ - block_ * kPostingBlock]; }
  uint32_t rank() const { return rank_; }
  uint32_t tf() const { return tfs_[rank_]; }
  void Next() {
    if (++rank_ == (block_ + 1) * kPostingBlock) LoadBlock(block_ + 1);
  }
  // Moves to the first posting >= target.
  void Advance(uint32_t target) {
    if (!valid() || doc() >= target) return;
    if (blocks_[block_].last_doc < target) {
      uint32_t nb = block_ + 1;
      while (nb < nblocks_ && blocks_[nb].last_doc < target) ++nb;
      LoadBlock(nb);
      if (!valid()) return;
    }
    while (doc() < target) ++rank_;  // stops in this block: its last doc >= target
  }
  // Calls f(x, tf) for each docs[x] (x < n) in the list. `docs` ascends
  // from doc() and ends at or before the current block's last doc, so the
  // cursor stays in its block: a merge over decoded postings, no Advance
  // per document.
  template <class F>
  void ForEachInBlock(const uint32_t* docs, size_t n, F&& f) {
    const uint32_t base = block_ * kPostingBlock;
    uint32_t r = rank_;
    for (size_t x = 0; x < n; ++x) {
      while (buf_[r - base] < docs[x]) ++r;  // stops in this block: its last doc >= docs[x]
      if (buf_[r - base] == docs[x]) f(x, tfs_[r]);
    }
    rank_ = r;
  }

 private:
  // Decodes block b's doc numbers into buf_ (b == nblocks_: the end).
  void LoadBlock(uint32_t b) {
    block_ = b;
    rank_ = std::min(df_, b * kPostingBlock);
    if (b >= nblocks_) return;
    if (it_block_ != b) roaring_move_uint32_iterator_equalorlarger(&it_, blocks_[b - 1].last_doc + 1);  // b > 0 here
    roaring_read_uint32_iterator(&it_, buf_, kPostingBlock);
    it_block_ = b + 1;
  }

  ConstBitmap bm_;
  roaring_uint32_iterator_t it_;
  const BlockMax* blocks_;
  BlockMax whole_;  // a short list's one block (Segment::Blocks)
  uint32_t df_, nblocks_;
  TfArray tfs_;
  uint32_t rank_ = 0;
  uint32_t block_ = 0;     // the block in buf_
  uint32_t it_block_ = 0;  // the block it_ is at the start of
  uint32_t buf_[kPostingBlock];
};

// The encoded positions of one term's postings by rank (from a RankCursor
// over its bitmap): Segment::SkipTo gives the start of the nearest posting
// the skip table reaches, then the postings in between are skipped (tf
// varints each). Increasing ranks continue from the previous posting when
// that is nearer.
class PositionReader {
 public:
  PositionReader(const Segment& seg, uint32_t field, uint32_t ti)
      : seg_(seg), e_(seg.entry(field, ti)), tfs_(seg.Tfs(e_)) {}  // the header decoded once
  uint32_t tf(uint32_t rank) const { return tfs_[rank]; }
  // Posting `rank`'s positions: tf(rank) varint deltas from 0.
  const uint8_t* Begin(uint32_t rank) {
    if (ptr_ == nullptr || at_ > rank || at_ < Segment::SkipFrom(e_, rank)) ptr_ = seg_.SkipTo(e_, rank, &at_);
    if (at_ < rank) {
      size_t skip = 0;
      for (; at_ < rank; ++at_) skip += tfs_[at_];
      ptr_ = SkipVarints(ptr_, skip);
    }
    return ptr_;
  }
  // Decodes posting `rank`'s positions into out (absolute).
  void Decode(uint32_t rank, std::vector<uint32_t>& out) {
    const uint8_t* p = Begin(rank);
    out.clear();
    uint32_t acc = 0, v;
    for (uint32_t k = tfs_[rank]; k > 0; --k) {
      p = GetVarint(p, &v);
      acc += v;
      out.push_back(acc);
    }
    ptr_ = p;
    ++at_;
  }

 private:
  const Segment& seg_;
  TermEntry e_;
  TfArray tfs_;
  const uint8_t* ptr_ = nullptr;  // start of posting at_'s positions
  uint32_t at_ = 0;
};

// True if the phrase matches given each term's positions (see the rules
// above): some window [a, a + slop] holds a shifted position p - r_i of
// every term i. Equivalently, the smallest range that covers one shifted
// position of every list is at most slop: found in one merge pass over the
// lists (advance the list holding the minimum), O(sum of tf * terms).
bool PhraseMatches(const std::vector<std::vector<uint32_t>>& pos, const std::vector<uint32_t>& rel, uint32_t slop) {
  const size_t n = pos.size();
  for (const auto& p : pos)
    if (p.empty()) return false;
  if (n == 2) {
    const auto& x = pos[0];
    const auto& y = pos[1];
    const int64_t rx = rel[0], ry = rel[1];
    size_t i = 0, j = 0;
    while (i < x.size() && j < y.size()) {
      const int64_t qx = static_cast<int64_t>(x[i]) - rx, qy = static_cast<int64_t>(y[j]) - ry;
      if (qx <= qy) {
        if (qy - qx <= static_cast<int64_t>(slop)) return true;
        ++i;
      } else {
        if (qx - qy <= static_cast<int64_t>(slop)) return true;
        ++j;
      }
    }
    return false;
  }
  size_t idx_buf[16];
  std::vector<size_t> idx_vec;
  size_t* idx = idx_buf;
  if (n > 16) {
    idx_vec.assign(n, 0);
    idx = idx_vec.data();
  } else {
    std::fill(idx, idx + n, size_t{0});
  }
  for (;;) {
    int64_t mn = INT64_MAX, mx = INT64_MIN;
    size_t argmin = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t q = static_cast<int64_t>(pos[i][idx[i]]) - rel[i];
      if (q < mn) {
        mn = q;
        argmin = i;
      }
      mx = std::max(mx, q);
    }
    if (mx - mn <= static_cast<int64_t>(slop)) return true;
    if (++idx[argmin] == pos[argmin].size()) return false;
  }
}

// The windows where a phrase matches (the rules above), each repetition of
// a term taking its own position, as in Lucene's sloppy matcher.
// `same[i]`: the first phrase term with term i's term (i itself if none
// before). For each window start a (a shifted position of some term,
// ascending), every term i needs a position in [a + r_i, a + r_i + slop];
// the repetitions of one term take distinct ones greedily in query order
// (their windows are equally long, so the smallest free position for the
// earliest is never worse). Calls fn(taken) per matching window, taken[i]
// being term i's position there, until fn returns false.
template <typename F>
void ForEachPhraseWindow(const std::vector<std::vector<uint32_t>>& pos, const std::vector<uint32_t>& rel,
                         const std::vector<size_t>& same, uint32_t slop, F&& fn) {
  const size_t n = pos.size();
  for (const auto& p : pos)
    if (p.empty()) return;
  std::vector<int64_t> starts;
  for (size_t i = 0; i < n; ++i)
    for (uint32_t p : pos[i]) starts.push_back(static_cast<int64_t>(p) - rel[i]);
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  std::vector<int64_t> taken(n);  // by term: the position the window gave it
  for (const int64_t a : starts) {
    bool fits = true;
    for (size_t i = 0; i < n && fits; ++i) {
      int64_t from = a + rel[i];
      // The positions the earlier repetitions of this term took (query
      // order is window order) are all below from's next free one.
      for (size_t j = same[i]; j < i; ++j)
        if (same[j] == same[i]) from = std::max(from, taken[j] + 1);
      const auto it = std::lower_bound(pos[i].begin(), pos[i].end(), from,
                                       [](uint32_t p, int64_t v) { return static_cast<int64_t>(p) < v; });
      fits = it != pos[i].end() && static_cast<int64_t>(*it) <= a + rel[i] + static_cast<int64_t>(slop);
      if (fits) taken[i] = *it;
    }
    if (fits && !fn(std::as_const(taken))) return;
  }
}

// PhraseMatches for a phrase that repeats a term ("dog dog"~1, with slop
// > 0): some window of ForEachPhraseWindow.
bool PhraseMatchesRepeated(const std::vector<std::vector<uint32_t>>& pos, const std::vector<uint32_t>& rel,
                           const std::vector<size_t>& same, uint32_t slop) {
  bool match = false;
  ForEachPhraseWindow(pos, rel, same, slop, [&](const std::vector<int64_t>&) {
    match = true;
    return false;  // one window is enough
  });
  return match;
}

// PhraseMatches for two terms, straight from their encoded positions
// (x: tx varint deltas, query position rx; y likewise); stops at the first
// window found.
bool PhraseMatches2(const uint8_t* x, uint32_t tx, int64_t rx, const uint8_t* y, uint32_t ty, int64_t ry, uint32_t slop) {
  if (tx == 0 || ty == 0) return false;
  uint32_t vx, vy;
  x = GetVarint(x, &vx);
  y = GetVarint(y, &vy);
  int64_t px = vx, py = vy;
  --tx;
  --ty;
  const auto s = static_cast<int64_t>(slop);
  for (;;) {
    const int64_t qx = px - rx, qy = py - ry;
    if (qx <= qy) {
      if (qy - qx <= s) return true;
      if (tx == 0) return false;
      x = GetVarint(x, &vx);
      px += vx;
      --tx;
    } else {
      if (qx - qy <= s) return true;
      if (ty == 0) return false;
      y = GetVarint(y, &vy);
      py += vy;
      --ty;
    }
  }
}

// A verified phrase's matches and, per match, each query term's tf (row
// by row, `terms` order): read while verifying, so that Score does not
// look the same postings up again. Empty when the positions were not read
// (a term or a pair table answered) or nothing matched.
struct PhraseTfs {
  std::vector<uint32_t> docs;
  std::vector<uint32_t> tfs;  // [match * terms + i]
};

// Per-segment evaluation state of a compiled query of `nodes` nodes. A
// node's bitmap may be borrowed (a segment's posting list, or a child's
// bitmap) rather than copied.
struct SegEval {
  SegEval(const SegmentState& state, int nodes) : s(&state), node_bm(nodes), alt_bm(nodes), alt_tfs(nodes) {}
  const SegmentState* s;
  std::vector<const roaring_bitmap_t*> node_bm;  // by node id; owned by `owned` or `alt_bm`
  std::vector<std::vector<ConstBitmap>> alt_bm;  // by node id, alt index
  std::vector<std::vector<PhraseTfs>> alt_tfs;   // by node id, alt index
  std::vector<ConstBitmap> owned;
  const roaring_bitmap_t* Keep(Bitmap b) {
    owned.emplace_back(b.release());
    return owned.back().get();
  }
};

ConstBitmap Owned(Bitmap b) { return ConstBitmap(b.release()); }

// The union of `parts` (empty ones ignored), borrowed when only one is left.
const roaring_bitmap_t* Union(std::vector<const roaring_bitmap_t*>& parts, SegEval& ev) {
  std::erase_if(parts, [](const roaring_bitmap_t* b) { return roaring_bitmap_is_empty(b); });
  if (parts.empty()) return ev.Keep(NewBitmap());
  if (parts.size() == 1) return parts[0];
  // or_many is lazy (bitset containers, repaired at the end): only worth it for many inputs.
  if (parts.size() == 2) return ev.Keep(Bitmap(roaring_bitmap_or(parts[0], parts[1])));
  return ev.Keep(Bitmap(roaring_bitmap_or_many(parts.size(), parts.data())));
}

// The AND of two or more bitmaps, smallest first (each AND is at most as
// large as its first operand); reorders `in`.
Bitmap AndSmallestFirst(std::vector<const roaring_bitmap_t*>& in) {
  std::sort(in.begin(), in.end(), [](const roaring_bitmap_t* x, const roaring_bitmap_t* y) {
    return roaring_bitmap_get_cardinality(x) < roaring_bitmap_get_cardinality(y);
  });
  Bitmap out(roaring_bitmap_and(in[0], in[1]));
  for (size_t i = 2; i < in.size(); ++i) roaring_bitmap_and_inplace(out.get(), in[i]);
  return out;
}

// A phrase verifies a segment's candidates in chunks of at least
// kChunkCandidates (at most kMaxChunks) on every core: ~200 ns a
// candidate of "es aa" (a common word's 34 positions read), so ~200 us a
// chunk, where waking a helper costs tens of microseconds. ParallelFor's
// pieces are claimed, so small chunks even out a helper that wakes late.
constexpr uint64_t kChunkCandidates = 1024;
constexpr uint64_t kMaxChunks = 16;

ConstBitmap EvalAlt(const Alt& a, size_t k, const Segment& seg, PhraseTfs& phrase_tfs) {
  const std::span<const int64_t> ti = a.SegTerms(k);
  if (a.any) {
    std::vector<ConstBitmap> lists;
    std::vector<const roaring_bitmap_t*> parts;
    for (int64_t t : ti) {
      if (t < 0) continue;
      lists.push_back(seg.Postings(a.field, static_cast<uint32_t>(t)));
      parts.push_back(lists.back().get());
    }
    if (parts.empty()) return Owned(NewBitmap());
    if (parts.size() == 1) return std::move(lists[0]);
    return Owned(Bitmap(roaring_bitmap_or_many(parts.size(), parts.data())));
  }
  for (int64_t t : ti)
    if (t < 0) return Owned(NewBitmap());
  if (ti.size() == 1) return seg.Postings(a.field, static_cast<uint32_t>(ti[0]));
  // Adjacent common words: the segment's pair table lists the documents
  // where one follows the other (pairs.h). For two words that is the
  // answer; for more, a much smaller candidate set.
  std::vector<ConstBitmap> pairs;
  if (a.slop == 0) {
    for (size_t i = 0; i + 1 < ti.size(); ++i) {
      ConstBitmap p;
      if (a.rel[i + 1] - a.rel[i] == 1 &&
          seg.PairPostings(a.field, static_cast<uint32_t>(ti[i]), static_cast<uint32_t>(ti[i + 1]), &p))
        pairs.push_back(std::move(p));
    }
    if (ti.size() == 2 && !pairs.empty()) return std::move(pairs[0]);
  }
  // Candidates: the terms' postings ANDed smallest first (and the pairs).
  std::vector<ConstBitmap> lists;
  for (int64_t t : ti) lists.push_back(seg.Postings(a.field, static_cast<uint32_t>(t)));
  std::vector<const roaring_bitmap_t*> order;
  for (const auto& l : lists) order.push_back(l.get());
  for (const auto& p : pairs) order.push_back(p.get());
  Bitmap cand = AndSmallestFirst(order);
  const uint64_t nc = roaring_bitmap_get_cardinality(cand.get());
  if (nc == 0) return Owned(std::move(cand));
  std::vector<uint32_t> cdocs(nc);
  roaring_bitmap_to_uint32_array(cand.get(), cdocs.data());
  // A repeated term needs distinct positions, which only slop can violate.
  std::vector<size_t> same(ti.size());
  bool repeats = false;
  for (size_t i = 0; i < ti.size(); ++i) {
    same[i] = static_cast<size_t>(std::find(ti.begin(), ti.end(), ti[i]) - ti.begin());
    repeats = repeats || (same[i] != i && a.slop > 0);
  }
  // Verifies the candidates of one chunk into its matches and their tfs.
  // Each candidate is in every term's postings: its rank there (RankCursor)
  // reaches its positions through the list's skip table, without
  // decoding the doc numbers of the postings in between.
  struct Chunk {
    std::vector<uint32_t> matched, tfs;
  };
  auto verify = [&](std::span<const uint32_t> docs, Chunk& out) {
    std::vector<RankCursor> ranks;
    std::vector<PositionReader> readers;
    for (size_t i = 0; i < ti.size(); ++i) {
      ranks.emplace_back(lists[i].get());
      readers.emplace_back(seg, a.field, static_cast<uint32_t>(ti[i]));
    }
    if (ti.size() == 2 && !repeats) {  // most phrases: positions compared in place, not decoded
      for (uint32_t d : docs) {
        uint32_t r0, r1;
        ranks[0].Find(d, &r0);
        ranks[1].Find(d, &r1);
        if (!PhraseMatches2(readers[0].Begin(r0), readers[0].tf(r0), a.rel[0], readers[1].Begin(r1), readers[1].tf(r1),
                            a.rel[1], a.slop))
          continue;
        out.tfs.push_back(readers[0].tf(r0));
        out.tfs.push_back(readers[1].tf(r1));
        out.matched.push_back(d);
      }
      return;
    }
    std::vector<std::vector<uint32_t>> pos(ti.size());
    for (uint32_t d : docs) {
      for (size_t i = 0; i < ti.size(); ++i) {
        uint32_t r = 0;  // set by Find: a candidate is in every list
        ranks[i].Find(d, &r);
        readers[i].Decode(r, pos[i]);
      }
      if (!(repeats ? PhraseMatchesRepeated(pos, a.rel, same, a.slop) : PhraseMatches(pos, a.rel, a.slop))) continue;
      for (const auto& p : pos) out.tfs.push_back(static_cast<uint32_t>(p.size()));
      out.matched.push_back(d);
    }
  };
  // Many candidates (a common word's long position lists read for each:
  // "es aa", 20-30k in W2's largest segment, ~200 ns each) are verified
  // in chunks on every core; the chunks' matches are concatenated in order.
  const size_t chunks = std::clamp<uint64_t>(nc / kChunkCandidates, 1, kMaxChunks);
  std::vector<Chunk> done(chunks);
  auto piece = [&](size_t c) {
    verify(std::span<const uint32_t>(cdocs).subspan(nc * c / chunks, nc * (c + 1) / chunks - nc * c / chunks), done[c]);
  };
  ParallelFor(chunks, piece);  // one chunk: on this thread
  // The first chunk's arrays are moved, not copied (a phrase of fewer than
  // two chunks' candidates, most of them, has only it); phrase_tfs is
  // empty (one Eval per node and segment).
  std::vector<uint32_t> matched = std::move(done[0].matched);
  phrase_tfs.tfs = std::move(done[0].tfs);
  for (size_t c = 1; c < chunks; ++c) {
    matched.insert(matched.end(), done[c].matched.begin(), done[c].matched.end());
    phrase_tfs.tfs.insert(phrase_tfs.tfs.end(), done[c].tfs.begin(), done[c].tfs.end());
  }
  Bitmap out(roaring_bitmap_of_ptr(matched.size(), matched.data()));
  phrase_tfs.docs = std::move(matched);
  return Owned(std::move(out));
}

const roaring_bitmap_t* Eval(const CNode& n, size_t k, SegEval& ev) {
  const Segment& seg = *ev.s->segment;
  const roaring_bitmap_t* out = nullptr;
  switch (n.kind) {
    case CNode::Kind::kAll:
      out = ev.Keep(Bitmap(roaring_bitmap_from_range(0, seg.doc_count(), 1)));
      break;
    case CNode::Kind::kNone:
    case CNode::Kind::kDropped:
      out = ev.Keep(NewBitmap());
      break;
    case CNode::Kind::kBool: {
      std::vector<const roaring_bitmap_t*> must, should, not_;
      for (const auto& [occ, c] : n.clauses) {
        const roaring_bitmap_t* b = Eval(*c, k, ev);
        (occ == Occur::kMust ? must : occ == Occur::kShould ? should : not_).push_back(b);
      }
      Bitmap own;
      if (must.size() >= 2) {
        own = AndSmallestFirst(must);
      } else if (!must.empty()) {
        out = must[0];
      } else if (!should.empty()) {
        out = Union(should, ev);
      } else {
        own.reset(roaring_bitmap_from_range(0, seg.doc_count(), 1));
      }
      if (!not_.empty() && !own) own.reset(roaring_bitmap_copy(out));
      for (auto* b : not_) roaring_bitmap_andnot_inplace(own.get(), b);
      if (own) out = ev.Keep(std::move(own));
      break;
    }
    case CNode::Kind::kLeaf: {
      auto& alts = ev.alt_bm[n.id];
      auto& tfs = ev.alt_tfs[n.id];
      tfs.resize(n.alts.size());
      std::vector<const roaring_bitmap_t*> parts;
      for (size_t ai = 0; ai < n.alts.size(); ++ai) {
        const Alt& a = n.alts[ai];
        alts.push_back(EvalAlt(a, k, seg, tfs[ai]));
        parts.push_back(alts.back().get());
      }
      out = Union(parts, ev);
      break;
    }
    case CNode::Kind::kNumRange: {
      Bitmap own = NewBitmap();
      auto sorted = seg.sorted(n.slot);
      auto lo = std::lower_bound(sorted.begin(), sorted.end(), n.lo, [&](const NumEntry& e, const Number& v) {
        return n.lo_incl ? e.number() < v : e.number() <= v;
      });
      std::vector<uint32_t> docs;
      for (auto it = lo; it != sorted.end(); ++it) {
        if (n.hi_incl ? it->number() > n.hi : it->number() >= n.hi) break;
        docs.push_back(it->doc);
      }
      roaring_bitmap_add_many(own.get(), docs.size(), docs.data());
      out = ev.Keep(std::move(own));
      break;
    }
    case CNode::Kind::kTermRange: {
      std::vector<ConstBitmap> keep;
      std::vector<const roaring_bitmap_t*> parts;
      uint32_t i = n.lo_open ? 0 : seg.LowerBound(n.slot, n.slo);
      for (; i < seg.term_count(n.slot); ++i) {
        std::string_view t = seg.term(n.slot, i);
        if (!n.lo_open && !n.lo_incl && t == n.slo) continue;
        if (!n.hi_open && (n.hi_incl ? t > n.shi : t >= n.shi)) break;
        keep.push_back(seg.Postings(n.slot, i));
        parts.push_back(keep.back().get());
      }
      // The union may borrow one of `keep`: copy it before they go.
      out = parts.empty() ? ev.Keep(NewBitmap()) : ev.Keep(Bitmap(roaring_bitmap_or_many(parts.size(), parts.data())));
      break;
    }
  }
  ev.node_bm[n.id] = out;
  return out;
}

// Calls f(doc) for every document of b, in order, 256 decoded at a time.
template <typename F>
void ForEachDoc(const roaring_bitmap_t* b, F&& f) {
  uint32_t buf[256];
  roaring_uint32_iterator_t it;
  roaring_init_iterator(b, &it);
  while (uint32_t got = roaring_read_uint32_iterator(&it, buf, 256))
    for (uint32_t i = 0; i < got; ++i) f(buf[i]);
}

// Leaf `n`'s alternative ai's matches among anc: anc itself for a leaf of
// one alternative, else their AND, kept in *own.
const roaring_bitmap_t* AltBitmap(const CNode& n, size_t ai, const roaring_bitmap_t* anc, const SegEval& ev,
                                  Bitmap* own) {
  if (n.alts.size() == 1) return anc;
  own->reset(roaring_bitmap_and(anc, ev.alt_bm[n.id][ai].get()));
  return own->get();
}

// The same matches, ascending, into out.
void AltMatches(const CNode& n, size_t ai, const roaring_bitmap_t* anc, const SegEval& ev, std::vector<uint32_t>& out) {
  Bitmap own;
  const roaring_bitmap_t* eb = AltBitmap(n, ai, anc, ev, &own);
  out.resize(roaring_bitmap_get_cardinality(eb));
  roaring_bitmap_to_uint32_array(eb, out.data());
}

// Score term i of leaf `n`'s alternative ai: its tf at the alternative's
// matches, asked in ascending order. A verified phrase's tfs were read
// with its positions; otherwise by rank in the postings (matches are often
// far sparser than the postings: a phrase's in a common word's list).
// Valid while ev is.
class ScoreTermTfs {
 public:
  ScoreTermTfs(const CNode& n, size_t ai, size_t i, size_t k, const SegEval& ev) {
    const Alt& a = n.alts[ai];
    if (const PhraseTfs& known = ev.alt_tfs[n.id][ai]; !known.docs.empty()) {
      known_ = &known;
      nt_ = a.terms.size();
      q_ = static_cast<size_t>(std::find(a.terms.begin(), a.terms.end(), a.ScoreTerms()[i]) - a.terms.begin());
      return;
    }
    const int64_t ti = a.SegScoreTerm(k, i);
    if (ti < 0) return;  // not in the segment: tf 0 everywhere
    postings_ = ev.s->segment->Postings(a.field, static_cast<uint32_t>(ti));
    ranks_.emplace(postings_.get());
    tfs_ = ev.s->segment->Tfs(a.field, static_cast<uint32_t>(ti));
  }
  // d's tf, 0 if d does not hold the term; d ascending, a match of the alternative.
  uint32_t Tf(uint32_t d) {
    if (known_ != nullptr) {
      while (known_->docs[m_] < d) ++m_;
      return known_->tfs[m_ * nt_ + q_];
    }
    uint32_t r;
    return ranks_ && ranks_->Find(d, &r) ? tfs_[r] : 0;
  }

 private:
  const PhraseTfs* known_ = nullptr;
  size_t nt_ = 0, q_ = 0, m_ = 0;  // known_: terms per row, this term's column, next row
  ConstBitmap postings_;
  std::optional<RankCursor> ranks_;
  TfArray tfs_;
};

// Adds the BM25 contributions of `n` to scores[], where docs[] is the
// segment's sorted final matches and `anc` the docs where n and every
// ancestor match (a subset of docs and of n's matches).
void Score(const CNode& n, const roaring_bitmap_t* anc, size_t k, Norms& norms, SegEval& ev,
           const std::vector<uint32_t>& docs, std::vector<double>& scores) {
  if (n.kind == CNode::Kind::kBool) {
    for (const auto& [occ, c] : n.clauses) {
      if (occ == Occur::kMustNot) continue;
      if (occ == Occur::kMust) {
        Score(*c, anc, k, norms, ev, docs, scores);  // n matches only where its required clauses do
        continue;
      }
      Bitmap a2(roaring_bitmap_and(anc, ev.node_bm[c->id]));
      if (!roaring_bitmap_is_empty(a2.get())) Score(*c, a2.get(), k, norms, ev, docs, scores);
    }
    return;
  }
  if (n.kind != CNode::Kind::kLeaf) return;
  const Segment& seg = *ev.s->segment;
  std::vector<uint32_t> eff;
  for (size_t ai = 0; ai < n.alts.size(); ++ai) {
    const Alt& a = n.alts[ai];
    FieldNorms& norm = norms.field(a.field);
    const uint32_t* lens = seg.lengths(a.field);
    const double w = a.weight;
    if (a.any) {
      // Many expanded terms: each one's documents among the alternative's
      // matches by bitmap AND, rather than a rank lookup per match.
      Bitmap own;
      const roaring_bitmap_t* eb = AltBitmap(n, ai, anc, ev, &own);
      if (roaring_bitmap_is_empty(eb)) continue;
      for (size_t i = 0; i < a.ScoreTerms().size(); ++i) {
        const int64_t ti = a.SegScoreTerm(k, i);
        if (ti < 0) continue;
        ConstBitmap postings = seg.Postings(a.field, static_cast<uint32_t>(ti));
        RankCursor ranks(postings.get());
        const TfArray tfs = seg.Tfs(a.field, static_cast<uint32_t>(ti));
        Bitmap both(roaring_bitmap_and(postings.get(), eb));
        size_t j = 0;
        ForEachDoc(both.get(), [&](uint32_t d) {
          uint32_t r = 0;  // d is in the postings: Find sets it
          ranks.Find(d, &r);
          while (docs[j] < d) ++j;
          scores[j] += w * Bm25WithNorm(a.idf[i], tfs[r], norm(lens[d]));
        });
      }
      continue;
    }
    AltMatches(n, ai, anc, ev, eff);
    for (size_t i = 0; i < a.ScoreTerms().size() && !eff.empty(); ++i) {
      ScoreTermTfs tfs(n, ai, i, k, ev);
      size_t j = 0;
      for (uint32_t d : eff) {
        const uint32_t tf = tfs.Tf(d);
        if (tf == 0) continue;
        while (docs[j] < d) ++j;
        scores[j] += w * Bm25WithNorm(a.idf[i], tf, norm(lens[d]));
      }
    }
  }
}

struct SortKey {
  const FieldDef* field = nullptr;  // nullptr: _score
  bool desc = true;
};

struct Hit {
  double score;
  uint32_t seg;
  uint32_t doc;
  std::string_view id;
  std::vector<Number> num;            // per sort key (numeric)
  std::vector<std::string_view> str;  // per sort key (keyword)
  std::vector<bool> missing;
};

// What a query marks in a field's text (highlighting): its terms and
// expansions wherever they occur, its phrases only where they match (as
// Elasticsearch's highlighters do), from its leaves that are not negated.
struct HighlightQuery {
  std::set<std::string, std::less<>> terms;
  std::vector<const Alt*> phrases;
};

void CollectHighlight(const CNode& n, bool negated, std::map<uint32_t, HighlightQuery>& out) {
  if (n.kind == CNode::Kind::kBool) {
    for (const auto& [occ, c] : n.clauses) CollectHighlight(*c, negated || occ == Occur::kMustNot, out);
    return;
  }
  if (n.kind != CNode::Kind::kLeaf || negated) return;
  for (const Alt& a : n.alts) {
    HighlightQuery& h = out[a.field];
    if (a.any || a.terms.size() == 1)
      h.terms.insert(a.terms.begin(), a.terms.end());
    else
      h.phrases.push_back(&a);
  }
}

// Collects the byte spans to mark in one analyzed value: every term
// occurrence, and the positions a phrase takes in each window where it
// matches (ForEachPhraseWindow: the search's own rule).
class HighlightSink final : public analyzers::TokenSink {
 public:
  explicit HighlightSink(const HighlightQuery& q) : q_(q), pos_(q.phrases.size()) {
    for (size_t p = 0; p < q.phrases.size(); ++p) pos_[p].resize(q.phrases[p]->terms.size());
  }
  void OnToken(const analyzers::Token& t) override {
    if (t.start == t.end) return;  // an empty keyword value: nothing to mark
    bool phrase_word = false;
    for (size_t p = 0; p < q_.phrases.size(); ++p)
      for (size_t i = 0; i < q_.phrases[p]->terms.size(); ++i)
        if (q_.phrases[p]->terms[i] == t.term) {
          pos_[p][i].push_back(t.position);
          phrase_word = true;
        }
    if (q_.terms.find(t.term) != q_.terms.end())
      spans_.emplace_back(t.start, t.end);
    else if (phrase_word)
      words_.push_back(Word{t.position, t.start, t.end});
  }
  // The spans, in text order.
  std::vector<std::pair<uint32_t, uint32_t>> Spans() {
    std::vector<uint32_t> marked;  // positions
    for (size_t p = 0; p < q_.phrases.size(); ++p) {
      const Alt& a = *q_.phrases[p];
      std::vector<size_t> same(a.terms.size());
      for (size_t i = 0; i < same.size(); ++i)
        same[i] = static_cast<size_t>(std::find(a.terms.begin(), a.terms.end(), a.terms[i]) - a.terms.begin());
      ForEachPhraseWindow(pos_[p], a.rel, same, a.slop, [&](const std::vector<int64_t>& taken) {
        for (int64_t x : taken) marked.push_back(static_cast<uint32_t>(x));
        return true;
      });
    }
    std::sort(marked.begin(), marked.end());
    for (const Word& w : words_)
      if (std::binary_search(marked.begin(), marked.end(), w.position)) spans_.emplace_back(w.start, w.end);
    std::sort(spans_.begin(), spans_.end());
    return std::move(spans_);
  }

 private:
  struct Word {
    uint32_t position, start, end;
  };
  const HighlightQuery& q_;
  std::vector<std::vector<std::vector<uint32_t>>> pos_;  // [phrase][word]: its positions in the value
  std::vector<std::pair<uint32_t, uint32_t>> spans_;
  std::vector<Word> words_;  // tokens of phrase words that are not also terms
};

// Fragments of up to kContext bytes each side of matched tokens, merged
// when they overlap, cut at whitespace so that no word is cut in two (or,
// in text without a space within kBoundaryScan bytes of the cut, at a
// UTF-8 boundary); at most kMaxFragments.
void Fragments(std::string_view text, const std::vector<std::pair<uint32_t, uint32_t>>& spans, std::vector<std::string>& out) {
  constexpr uint32_t kContext = 60;
  constexpr uint32_t kBoundaryScan = 20;
  constexpr size_t kMaxFragments = 5;
  auto snap_back = [&](uint32_t p) {
    while (p > 0 && p < text.size() && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
    return p;
  };
  size_t i = 0;
  while (i < spans.size() && out.size() < kMaxFragments) {
    uint32_t start = snap_back(spans[i].first > kContext ? spans[i].first - kContext : 0);
    size_t j = i;
    uint32_t end = std::min<uint32_t>(static_cast<uint32_t>(text.size()), spans[i].second + kContext);
    while (j + 1 < spans.size() && spans[j + 1].first < end) {
      ++j;
      end = std::min<uint32_t>(static_cast<uint32_t>(text.size()), spans[j].second + kContext);
    }
    end = snap_back(end);
    if (end < spans[j].second) end = spans[j].second;
    // Mid-word: move the cut to a space at most kBoundaryScan bytes inward
    // (Elasticsearch's boundary_max_scan), so that a space next to the
    // match in text that otherwise has none (CJK) does not drop the context.
    auto space = [&](uint32_t p) { return text[p] == ' ' || text[p] == '\t' || text[p] == '\n' || text[p] == '\r'; };
    if (start > 0 && !space(start - 1)) {
      const uint32_t limit = std::min(spans[i].first, start + kBoundaryScan);
      uint32_t q = start;
      while (q < limit && !space(q)) ++q;
      if (q < limit) start = q + 1;
    }
    if (end < text.size() && !space(end)) {
      const uint32_t limit = std::max(spans[j].second, end > kBoundaryScan ? end - kBoundaryScan : 0);
      uint32_t q = end;
      while (q > limit && !space(q - 1)) --q;
      if (q > limit) end = q - 1;
    }
    std::string frag;
    if (start > 0) frag += "…";
    uint32_t p = start;
    for (size_t m = i; m <= j; ++m) {
      frag.append(text.substr(p, spans[m].first - p));
      frag += "<em>";
      frag.append(text.substr(spans[m].first, spans[m].second - spans[m].first));
      frag += "</em>";
      p = spans[m].second;
    }
    frag.append(text.substr(p, end - p));
    if (end < text.size()) frag += "…";
    out.push_back(std::move(frag));
    i = j + 1;
  }
}

// Top-k by (score desc, id asc); the heap's front is the worst kept entry.
// With a searchAfter key (`after`), only entries strictly after the key are
// kept, so every threshold (the heap's, a floor, a shared one) is that of
// entries that can be answered, and the pruning that compares bounds with
// it stays exact: a later page only lowers what can enter.
struct TopEntry {
  double score;
  uint32_t seg, doc;
  std::string_view id;
};
inline bool Better(const TopEntry& a, const TopEntry& b) { return a.score != b.score ? a.score > b.score : a.id < b.id; }

class TopK {
 public:
  // `after` (borrowed; null: none) must outlive the top-k.
  explicit TopK(size_t k, const TopEntry* after = nullptr) : k_(k), after_(after) {}
  size_t k() const { return k_; }
  const TopEntry* after() const { return after_; }
  // Returns true if the threshold may have changed.
  bool Offer(const TopEntry& e) {
    if (k_ == 0) return false;
    if (after_ != nullptr && !Better(*after_, e)) return false;  // at or before the key: an earlier page's
    if (heap_.size() < k_) {
      heap_.push_back(e);
      std::push_heap(heap_.begin(), heap_.end(), Better);
      if (heap_.size() < k_) return false;
      Publish(heap_.front().score);
      return true;
    }
    if (!Better(e, heap_.front())) return false;
    std::pop_heap(heap_.begin(), heap_.end(), Better);
    heap_.back() = e;
    std::push_heap(heap_.begin(), heap_.end(), Better);
    Publish(heap_.front().score);
    return true;
  }
  // A document scoring below this cannot enter (none can when k is 0).
  double threshold() const {
    if (k_ == 0) return HUGE_VAL;
    const double own = std::max(floor_, heap_.size() < k_ ? -HUGE_VAL : heap_.front().score);
    return shared_ == nullptr ? own : std::max(own, shared_->load(std::memory_order_relaxed));
  }
  // For a caller that knows k documents scoring at least f are yet to be
  // offered: none scoring below f can enter.
  void RaiseFloor(double f) {
    floor_ = std::max(floor_, f);
    Publish(f);
  }
  // For top-ks of the same k over disjoint documents, merged after (a
  // search's segments in parallel): each raises `floor` to its threshold
  // and reads theirs, since a document below any of them cannot enter the
  // merged top-k either.
  void Share(std::atomic<double>* floor) { shared_ = floor; }
  std::vector<TopEntry> Sorted() && {
    std::sort(heap_.begin(), heap_.end(), Better);
    return std::move(heap_);
  }

 private:
  void Publish(double t) {
    if (shared_ == nullptr) return;
    double seen = shared_->load(std::memory_order_relaxed);
    while (t > seen && !shared_->compare_exchange_weak(seen, t, std::memory_order_relaxed)) {
    }
  }
  size_t k_;
  const TopEntry* after_;
  double floor_ = -HUGE_VAL;
  std::atomic<double>* shared_ = nullptr;
  std::vector<TopEntry> heap_;
};

// One scoring term of a flat disjunction: term i of an alternative (0 but
// in an expansion).
struct FlatTerm {
  const Alt* alt;
  uint32_t i;
  int64_t SegTerm(size_t k) const { return alt->SegScoreTerm(k, i); }
  double idf() const { return alt->idf[i]; }
};

// The k-th largest of v (1 <= k <= v.size()), counting repeats. For a
// page's end (k small beside v) one pass keeps the k largest in a min-heap,
// most values failing one comparison against its front; deeper, nth_element
// on a copy.
double KthLargest(const std::vector<double>& v, size_t k) {
  if (k > 256 || k * 16 > v.size()) {
    std::vector<double> order = v;
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k - 1), order.end(), std::greater<>());
    return order[k - 1];
  }
  std::vector<double> heap(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k));
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  for (size_t j = k; j < v.size(); ++j) {
    if (v[j] <= heap.front()) continue;
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    heap.back() = v[j];
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  }
  return heap.front();
}

// Offers the top of segment k's final matches `docs` of a leaf (the whole
// query, by relevance) to `top` without scoring every match in full, when
// some of its terms are light: their bound is at most 1/1000 of the
// largest (a stop word beside rarer words: "aa" in every body, next to
// "ab" in 89% of them, over 73k matches). The other terms' contributions
// are summed first; the want-th largest of those partial sums bounds the
// want-th final score from below, so only matches whose partial sum plus
// the light terms' bounds reach it can rank, and only those are scored in
// full, in Score's order (bit-identical). False, having offered nothing,
// when no term is light, an alternative is an expansion, or the matches
// are no more than the places.
bool ScoreLeafTopK(const CNode& leaf, size_t k, Norms& norms, SegEval& ev, const roaring_bitmap_t* final_bm,
                   const std::vector<uint32_t>& docs, size_t want, TopK& top) {
  if (want == 0 || docs.size() <= want) return false;
  const Segment& seg = *ev.s->segment;
  struct Item {
    size_t ai, i;
    double bound;
    FieldNorms* norm;
    const uint32_t* lens;
    bool light = false;
    double Contribution(const Alt& a, uint32_t tf, uint32_t d) const {
      return a.weight * Bm25WithNorm(a.idf[i], tf, (*norm)(lens[d]));
    }
  };
  std::vector<Item> items;  // Score's order
  double heaviest = 0;
  for (size_t ai = 0; ai < leaf.alts.size(); ++ai) {
    const Alt& a = leaf.alts[ai];
    if (a.any) return false;
    for (size_t i = 0; i < a.ScoreTerms().size(); ++i) {
      const int64_t ti = a.SegScoreTerm(k, i);
      if (ti < 0) continue;
      FieldNorms& norm = norms.field(a.field);
      const TermEntry e = seg.entry(a.field, static_cast<uint32_t>(ti));
      items.push_back(Item{ai, i, BlockBound(a.weight, a.idf[i], e.whole, norm.avglen()), &norm, seg.lengths(a.field)});
      heaviest = std::max(heaviest, items.back().bound);
    }
  }
  double light = 0;  // the light terms' bounds summed
  for (Item& t : items) {
    t.light = t.bound <= heaviest * 1e-3;
    if (t.light) light += t.bound;
  }
  if (light == 0) return false;
  // Each alternative's matches among docs (docs itself for one alternative).
  std::vector<std::vector<uint32_t>> eff(leaf.alts.size());
  if (leaf.alts.size() > 1)
    for (size_t ai = 0; ai < leaf.alts.size(); ++ai) AltMatches(leaf, ai, final_bm, ev, eff[ai]);
  auto matches = [&](size_t ai) -> const std::vector<uint32_t>& { return leaf.alts.size() == 1 ? docs : eff[ai]; };
  std::vector<double> partial(docs.size(), 0.0);
  for (const Item& t : items) {
    if (t.light) continue;
    ScoreTermTfs tfs(leaf, t.ai, t.i, k, ev);
    size_t j = 0;
    for (uint32_t d : matches(t.ai)) {
      const uint32_t tf = tfs.Tf(d);
      if (tf == 0) continue;
      while (docs[j] < d) ++j;
      partial[j] += t.Contribution(leaf.alts[t.ai], tf, d);
    }
  }
  // The bar a match must reach, less a margin for the partial sums'
  // different order of addition (ScoreBound's margin covers the bounds).
  // After a searchAfter key only the matches that certainly follow it
  // count: those whose partial sum plus the light terms' bounds (nudged
  // up: another order of addition) is below the key's score.
  double kth = -HUGE_VAL;
  if (const TopEntry* after = top.after()) {
    std::vector<double> below;
    for (double p : partial)
      if ((p + light) * (1 + 1e-9) < after->score) below.push_back(p);
    if (below.size() >= want) kth = KthLargest(below, want);
  } else {
    kth = KthLargest(partial, want);
  }
  const double bar = std::max(kth, top.threshold());
  const double need = bar - std::abs(bar) * 1e-9 - light;
  std::vector<ScoreTermTfs> tfs;
  for (const Item& t : items) tfs.emplace_back(leaf, t.ai, t.i, k, ev);
  std::vector<size_t> at(leaf.alts.size(), 0);  // per alternative: the next of its matches to compare
  for (size_t j = 0; j < docs.size(); ++j) {
    if (partial[j] < need) continue;
    const uint32_t d = docs[j];
    double score = 0;
    for (size_t x = 0; x < items.size(); ++x) {
      const Item& t = items[x];
      const std::vector<uint32_t>& e = matches(t.ai);
      size_t& p = at[t.ai];
      while (p < e.size() && e[p] < d) ++p;
      if (p == e.size() || e[p] != d) continue;
      const uint32_t tf = tfs[x].Tf(d);
      if (tf != 0) score += t.Contribution(leaf.alts[t.ai], tf, d);
    }
    if (score >= top.threshold()) top.Offer(TopEntry{score, static_cast<uint32_t>(k), d, seg.id(d)});
  }
  return true;
}

// The terms that make up the whole score, in Score's order, if the query
// is a flat disjunction: one leaf, or a boolean of optional leaves (and any
// prohibited clauses, which only remove documents), whose alternatives are
// terms or expansions. Otherwise false.
bool FlatTerms(const CNode& root, std::vector<FlatTerm>& out) {
  auto leaf = [&](const CNode& n) {
    if (n.kind != CNode::Kind::kLeaf) return false;
    for (const Alt& a : n.alts)
      if (!a.any && a.terms.size() != 1) return false;
    for (const Alt& a : n.alts)
      for (uint32_t i = 0; i < a.terms.size(); ++i) out.push_back(FlatTerm{&a, i});
    return true;
  };
  if (root.kind == CNode::Kind::kLeaf) return leaf(root);
  if (root.kind != CNode::Kind::kBool) return false;
  bool any = false;
  for (const auto& [occ, c] : root.clauses) {
    if (occ == Occur::kMustNot) continue;
    if (occ == Occur::kMust || !leaf(*c)) return false;
    any = true;
  }
  return any;
}

// MaxScore with block-max bounds over the posting lists of `alts` in
// segment k: only documents that can still enter `top` are fully scored.
// Each document's score is summed in alternative order, so it is
// bit-identical to the exhaustive path (Score).
void MaxScoreSegment(const std::vector<FlatTerm>& flat, size_t k, const Snapshot& snap, Norms& norms,
                     const roaring_bitmap_t* final_bm, TopK& top) {
  const SegmentState& st = snap.segments[k];
  const Segment& seg = *st.segment;
  struct T {
    std::unique_ptr<PostingCursor> cur;
    double weight, idf, ub, avg;
    FieldNorms* norm;
    const BlockMax* blocks;
    const uint32_t* lens;
    size_t order;
    uint32_t block = UINT32_MAX;  // the block `block_ub` bounds
    double block_ub = 0;
    double Contribution(uint32_t d) const { return weight * Bm25WithNorm(idf, cur->tf(), (*norm)(lens[d])); }
  };
  std::vector<T> ts;
  for (size_t o = 0; o < flat.size(); ++o) {
    const Alt& a = *flat[o].alt;
    int64_t ti = flat[o].SegTerm(k);
    if (ti < 0) continue;
    T t;
    t.cur = std::make_unique<PostingCursor>(seg, a.field, static_cast<uint32_t>(ti));
    t.weight = a.weight;
    t.idf = flat[o].idf();
    t.norm = &norms.field(a.field);
    t.avg = t.norm->avglen();
    t.blocks = t.cur->blocks();
    t.lens = seg.lengths(a.field);
    t.order = o;
    t.ub = 0;
    const uint64_t nb = BlockCount(seg.doc_freq(a.field, static_cast<uint32_t>(ti)));
    for (uint32_t b = 0; b < nb; ++b) t.ub = std::max(t.ub, BlockBound(t.weight, t.idf, t.blocks[b], t.avg));
    ts.push_back(std::move(t));
  }
  if (ts.empty()) return;
  std::sort(ts.begin(), ts.end(), [](const T& a, const T& b) { return a.ub < b.ub; });
  const size_t n = ts.size();
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + ts[i].ub;
  std::vector<double> contrib(flat.size(), 0.0);
  size_t first_ess = 0;
  auto recompute = [&] {
    double th = top.threshold();
    first_ess = 0;
    while (first_ess < n && prefix[first_ess + 1] < th) ++first_ess;
  };
  recompute();
  while (first_ess < n) {
    uint32_t d = UINT32_MAX;
    for (size_t i = first_ess; i < n; ++i)
      if (ts[i].cur->valid()) d = std::min(d, ts[i].cur->doc());
    if (d == UINT32_MAX) break;
    // Block-max skip: every essential list's postings in [d, end] lie in
    // its current block, so if those blocks' bounds plus the non-essential
    // lists' bounds cannot reach the threshold, no document up to `end`
    // can enter the top-k.
    uint32_t end = UINT32_MAX;
    for (size_t i = first_ess; i < n; ++i) {
      T& t = ts[i];
      if (!t.cur->valid()) continue;
      const uint32_t b = t.cur->rank() / kPostingBlock;
      if (t.block != b) {
        t.block = b;
        t.block_ub = BlockBound(t.weight, t.idf, t.blocks[b], t.avg);
      }
      const uint32_t last = t.blocks[b].last_doc;  // a copy: BlockMax is packed, unaligned in the file
      end = std::min(end, last);
    }
    // Lists whose next posting lies past the window add nothing in it.
    double bound = prefix[first_ess];
    for (size_t i = first_ess; i < n; ++i)
      if (ts[i].cur->valid() && ts[i].cur->doc() <= end) bound += ts[i].block_ub;
    if (bound < top.threshold()) {
      for (size_t i = first_ess; i < n; ++i) ts[i].cur->Advance(end + 1);
      continue;
    }
    double partial = 0;
    std::fill(contrib.begin(), contrib.end(), 0.0);
    for (size_t i = first_ess; i < n; ++i) {
      T& t = ts[i];
      if (!t.cur->valid() || t.cur->doc() != d) continue;
      const double c = t.Contribution(d);
      contrib[t.order] = c;
      partial += c;
      t.cur->Next();
    }
    if (final_bm != nullptr && !roaring_bitmap_contains(final_bm, d)) continue;
    const double th = top.threshold();
    bool pruned = false;
    for (size_t i = first_ess; i-- > 0;) {
      if (partial + prefix[i + 1] < th) {
        pruned = true;
        break;
      }
      T& t = ts[i];
      t.cur->Advance(d);
      if (!t.cur->valid() || t.cur->doc() != d) continue;
      const double c = t.Contribution(d);
      contrib[t.order] = c;
      partial += c;
    }
    if (pruned) continue;
    double score = 0;
    for (double c : contrib) score += c;
    if (top.Offer(TopEntry{score, static_cast<uint32_t>(k), d, seg.id(d)})) recompute();
  }
}

// The scoring alternatives of a boolean of leaves with at least one
// required leaf ("a AND b", "+a b -c"), each a single term, in the order
// Score adds them; false for any other shape.
bool ConjunctionTerms(const CNode& root, std::vector<const Alt*>& out) {
  if (root.kind != CNode::Kind::kBool) return false;
  bool any_must = false;
  for (const auto& [occ, c] : root.clauses) {
    if (occ == Occur::kMustNot) continue;
    if (c->kind != CNode::Kind::kLeaf) return false;
    for (const Alt& a : c->alts)
      if (a.terms.size() != 1) return false;
    any_must |= occ == Occur::kMust;
  }
  if (!any_must) return false;
  for (const auto& [occ, c] : root.clauses)
    if (occ != Occur::kMustNot)
      for (const Alt& a : c->alts) out.push_back(&a);
  return true;
}

// A single-term alternative's list in segment k, read once (header, doc
// numbers, bound) for every path of a segment's top-k that uses it.
struct TermList {
  const Alt* alt;
  TermEntry e;
  ConstBitmap postings;
  double bound;  // ScoreBound over the whole list
};

// The lists of `alts` (single terms) in segment k, in alts order (Score's
// order), the terms absent from the segment left out.
std::vector<TermList> TermLists(const std::vector<const Alt*>& alts, size_t k, const Segment& seg, Norms& norms) {
  std::vector<TermList> lists;
  lists.reserve(alts.size());
  for (const Alt* a : alts) {
    const int64_t ti = a->SegScoreTerm(k, 0);
    if (ti < 0) continue;
    const TermEntry e = seg.entry(a->field, static_cast<uint32_t>(ti));
    const uint32_t max_tf = e.whole.max_tf, min_len = e.whole.min_len;  // copies: BlockMax is packed
    lists.push_back(TermList{a, e, seg.Postings(e),
                             ScoreBound(a->weight, a->idf[0], max_tf, min_len, norms.field(a->field).avglen())});
  }
  return lists;
}

// Offers every document of `docs` to `top`, scored as the sum over `lists`
// of their contributions, each found by rank. The terms are read largest
// bound first, and a document is dropped as soon as its contributions so
// far plus the later terms' bounds cannot reach the threshold: among many
// matches of common words, most are decided by one or two terms.
void ScoreByRank(const std::vector<TermList>& lists, size_t k, const Segment& seg, Norms& norms,
                 const roaring_bitmap_t* docs, TopK& top) {
  struct T {
    RankCursor ranks;
    TfArray tfs;
    double weight, idf;
    FieldNorms* norm;
    const uint32_t* lens;
    double bound;             // of the whole list
    double later = 0;         // the bounds of the terms read after this one, summed
    double contribution = 0;  // to the current document
  };
  std::vector<T> ts;
  ts.reserve(lists.size());
  for (const TermList& l : lists) {
    const Alt& a = *l.alt;
    ts.push_back(T{RankCursor(l.postings.get()), seg.Tfs(l.e), a.weight, a.idf[0], &norms.field(a.field),
                   seg.lengths(a.field), l.bound});
  }
  std::vector<T*> order;  // largest bound first
  for (T& t : ts) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const T* a, const T* b) { return a->bound > b->bound; });
  for (size_t j = order.size(); j-- > 1;) order[j - 1]->later = order[j]->later + order[j]->bound;
  ForEachDoc(docs, [&](uint32_t d) {
    const double threshold = top.threshold();
    double partial = 0;
    for (T* t : order) {
      uint32_t r;
      t->contribution = t->ranks.Find(d, &r) ? t->weight * Bm25WithNorm(t->idf, t->tfs[r], (*t->norm)(t->lens[d])) : 0;
      partial += t->contribution;
      // Nudged up: partial is summed in another order than the score.
      if ((partial + t->later) * (1 + 1e-9) < threshold) return;
    }
    double score = 0;  // in Score's order (bit-identical); an absent term adds 0
    for (const T& t : ts) score += t.contribution;
    if (score >= threshold) top.Offer(TopEntry{score, static_cast<uint32_t>(k), d, seg.id(d)});
  });
}

constexpr uint64_t kDenseConjunction = 4096;  // DisjunctionSegment: a list this long may make terms required

// A conjunction with this many matches or more scores first those most
// likely to rank (WalkRequiredFirst): "con AND prepreal" (1,700 matches in
// a segment, "con" in most of them) is decided by the few with "prepreal"
// in the title, and walking all its matches cost ~240 us where this costs
// ~90 (bench/postings/RESULTS.md, 2026-12-02).
constexpr uint64_t kManyMatches = 64;

// A set of `docs` documents among terms with `postings` postings in all is
// scored by rank (ScoreByRank) when it is this much sparser: the block
// walks (windows, MaxScore) would decode most of the postings.
bool SparseBesidePostings(uint64_t docs, uint64_t postings) { return docs * 4 <= postings; }

// The common-word reasoning of WalkRequiredFirst and DisjunctionSegment,
// over a segment's TermLists (borrowed: they must outlive it). With the
// terms ordered by their list's bound (largest first), `deep[j]` holds the
// documents that count (`from`; all when null) with the first j + 1 terms,
// intersected as long as at least `want` remain. A document lacking term t scores at most the
// other terms' bounds summed: when that sum is below the threshold, t is
// required, and the required terms are a prefix of the order.
class RequiredTerms {
 public:
  RequiredTerms(const std::vector<TermList>& lists, const roaring_bitmap_t* from, size_t want) {
    for (const TermList& l : lists) lists_.push_back(List{l.postings.get(), l.bound});
    std::stable_sort(lists_.begin(), lists_.end(), [](const List& x, const List& y) { return x.bound > y.bound; });
    for (const List& l : lists_) {
      const roaring_bitmap_t* prev = deep_.empty() ? from : deep_.back();
      if (prev == nullptr) {  // the first list, borrowed
        if (roaring_bitmap_get_cardinality(l.postings) < want) break;
        deep_.push_back(l.postings);
        continue;
      }
      Bitmap next(roaring_bitmap_and(prev, l.postings));
      if (roaring_bitmap_get_cardinality(next.get()) < want) break;
      owned_.push_back(std::move(next));
      deep_.push_back(owned_.back().get());
    }
  }
  const std::vector<const roaring_bitmap_t*>& deep() const { return deep_; }
  // How many terms `threshold` makes required.
  size_t Required(double threshold) const {
    size_t required = 0;
    for (; required < lists_.size(); ++required) {
      double others = 0;
      for (size_t i = 0; i < lists_.size(); ++i)
        if (i != required) others += lists_[i].bound;
      if (others >= threshold) break;
    }
    return required;
  }

 private:
  struct List {
    const roaring_bitmap_t* postings;  // borrowed from the TermList
    double bound;                      // of the whole list
  };
  std::vector<List> lists_;
  std::vector<const roaring_bitmap_t*> deep_;
  std::vector<Bitmap> owned_;
};

// A conjunction of many matches (kManyMatches; common words, or a common
// word beside a rarer one): the matches that can still rank are found by bitmap algebra
// (RequiredTerms), so that `walk` (which offers a set of matches to the
// top-k) need not visit every match. The deepest intersection is walked
// first, which sets the threshold; then only the matches holding the
// required terms that were not walked yet.
template <class Walk>
void WalkRequiredFirst(const std::vector<TermList>& lists, const roaring_bitmap_t* final_bm, TopK& top, Walk&& walk) {
  if (roaring_bitmap_get_cardinality(final_bm) < kManyMatches) return walk(final_bm);
  const RequiredTerms terms(lists, final_bm, top.k());
  const auto& deep = terms.deep();
  if (deep.empty()) return walk(final_bm);
  walk(deep.back());
  const size_t required = terms.Required(top.threshold());
  if (required >= deep.size()) return;  // every match that can rank is walked
  const Bitmap rest(roaring_bitmap_andnot(required == 0 ? final_bm : deep[required - 1], deep.back()));
  walk(rest.get());
}

// Offers the documents of `docs` (final matches of a ConjunctionTerms
// query) to `top`, document at a time with block-max skipping: for the
// window up to the nearest end of the terms' current blocks, the sum of
// those blocks' bounds bounds every document's score; a window that cannot
// reach the threshold is skipped without touching the postings. Scores
// are summed in Score's order (bit-identical).
void ConjunctionWindows(const std::vector<const Alt*>& alts, size_t k, const Segment& seg, Norms& norms,
                        const roaring_bitmap_t* docs, TopK& top) {
  constexpr uint32_t kTfBounds = 256;  // TfBound is memoized below this tf
  struct T {
    std::unique_ptr<PostingCursor> cur;
    double weight, idf, avg;
    FieldNorms* norm;
    const uint32_t* lens;
    const BlockMax* blocks;
    uint32_t bound_block = UINT32_MAX;  // the block `bound` bounds
    double bound = 0;
    uint32_t min_len = 0;          // the shortest length among the term's postings (TermEntry::whole)
    std::vector<double> tf_bound;  // by tf < kTfBounds: TfBound, or -1 until needed (made at first use)
    // ScoreBound at this tf and the term's shortest length: bounds one
    // posting's contribution from its tf alone, without a division (once
    // per distinct tf).
    double TfBound(uint32_t tf) {
      if (tf_bound.empty()) tf_bound.assign(kTfBounds, -1.0);
      if (tf >= kTfBounds) return ScoreBound(weight, idf, tf, min_len, avg);
      double& b = tf_bound[tf];
      if (b < 0) b = ScoreBound(weight, idf, tf, min_len, avg);
      return b;
    }
    double Contribution(uint32_t tf, uint32_t doc) const { return weight * Bm25WithNorm(idf, tf, (*norm)(lens[doc])); }
  };
  std::vector<T> ts;
  for (const Alt* a : alts) {
    const int64_t ti = a->SegScoreTerm(k, 0);
    if (ti < 0) continue;
    T t;
    t.cur = std::make_unique<PostingCursor>(seg, a->field, static_cast<uint32_t>(ti));
    t.weight = a->weight;
    t.idf = a->idf[0];
    t.norm = &norms.field(a->field);
    t.avg = t.norm->avglen();
    t.lens = seg.lengths(a->field);
    t.blocks = t.cur->blocks();
    t.min_len = seg.entry(a->field, static_cast<uint32_t>(ti)).whole.min_len;
    ts.push_back(std::move(t));
  }
  // The final matches are read kBuf at a time (the per-element roaring
  // iterator costs more than scoring a dense conjunction's document).
  constexpr uint32_t kBuf = 256;
  uint32_t buf[kBuf];
  uint32_t got = 0, i = 0;
  double doc_bound[kBuf];                  // [x]: buf[i + x]'s TfBounds so far
  uint32_t alive[kBuf], alive_docs[kBuf];  // the x not dropped yet, and their buf[i + x]
  std::vector<uint32_t> tf_at;             // [term * kBuf + x]: buf[i + x]'s tf, 0 if absent
  std::vector<size_t> active;              // the window's terms, largest bound first
  std::vector<double> rest;                // [j]: the bounds of active[j + 1..] summed
  bool ranked = false;                     // active and rest are sorted for this window
  roaring_uint32_iterator_t it;
  roaring_init_iterator(docs, &it);
  uint32_t window_end = 0;
  bool in_window = false;
  for (;;) {
    if (i == got) {
      got = roaring_read_uint32_iterator(&it, buf, kBuf);
      i = 0;
      if (got == 0) break;
    }
    const uint32_t d = buf[i];
    if (!in_window || d > window_end) {
      uint32_t end = UINT32_MAX;
      for (T& t : ts) {
        t.cur->Advance(d);
        if (!t.cur->valid()) continue;  // no more postings: contributes nothing
        const uint32_t b = t.cur->rank() / kPostingBlock;
        if (t.bound_block != b) {
          t.bound = BlockBound(t.weight, t.idf, t.blocks[b], t.avg);
          t.bound_block = b;
        }
        const uint32_t last = t.blocks[b].last_doc;  // a copy: BlockMax is packed, unaligned in the file
        end = std::min(end, last);
      }
      // A term whose next posting lies past the window adds nothing in it
      // (a title term is sparse where its body term is dense).
      active.clear();
      double bound = 0;
      for (size_t t = 0; t < ts.size(); ++t) {
        if (!ts[t].cur->valid() || ts[t].cur->doc() > end) continue;
        active.push_back(t);
        bound += ts[t].bound;
      }
      ranked = false;
      window_end = end;
      in_window = true;
      if (bound < top.threshold()) {
        if (end == UINT32_MAX) break;
        while (i < got && buf[i] <= end) ++i;
        if (i == got) roaring_move_uint32_iterator_equalorlarger(&it, end + 1);  // past the buffer too
        in_window = false;
        continue;
      }
    }
    // The window's final documents in the buffer, a term at a time, the
    // largest bound first: each document's TfBounds are summed, and after
    // each term the documents whose sum plus the later terms' block bounds
    // cannot reach the threshold are dropped (with common words nearly
    // every window may reach it, and few documents do: a document without
    // the terms of large bounds is dropped before the others are read).
    // Each term's tf is kept for the exact score.
    size_t n = i;
    while (n < got && buf[n] <= window_end) ++n;
    n -= i;
    if (n == 1) {
      // A lone document (a sparse conjunction's windows): scored directly,
      // bounding it would cost more.
      double score = 0;
      for (T& t : ts) {
        if (!t.cur->valid() || t.cur->doc() > window_end) continue;
        t.cur->Advance(d);
        if (t.cur->doc() == d) score += t.Contribution(t.cur->tf(), d);
      }
      if (score >= top.threshold()) top.Offer(TopEntry{score, static_cast<uint32_t>(k), d, seg.id(d)});
      ++i;
      continue;
    }
    tf_at.resize(ts.size() * kBuf);  // allocated by the first window with several documents
    if (!ranked) {
      // The window's terms, largest bound first, and the bounds after each.
      std::sort(active.begin(), active.end(), [&](size_t a, size_t b) { return ts[a].bound > ts[b].bound; });
      rest.assign(active.size(), 0.0);
      for (size_t j = active.size(); j-- > 1;) rest[j - 1] = rest[j] + ts[active[j]].bound;
      ranked = true;
    }
    size_t alive_n = n;
    for (size_t x = 0; x < n; ++x) {
      alive[x] = static_cast<uint32_t>(x);
      alive_docs[x] = buf[i + x];
      doc_bound[x] = 0;
    }
    for (size_t t = 0; t < ts.size(); ++t) std::fill_n(tf_at.data() + t * kBuf, n, 0u);
    for (size_t j = 0; j < active.size() && alive_n > 0; ++j) {
      T& term = ts[active[j]];
      uint32_t* tf = tf_at.data() + active[j] * kBuf;
      term.cur->ForEachInBlock(alive_docs, alive_n, [&](size_t y, uint32_t f) {
        tf[alive[y]] = f;
        doc_bound[alive[y]] += term.TfBound(f);
      });
      const double need = top.threshold() - rest[j];
      size_t m = 0;
      for (size_t y = 0; y < alive_n; ++y) {
        if (doc_bound[alive[y]] < need) continue;
        alive[m] = alive[y];
        alive_docs[m++] = alive_docs[y];
      }
      alive_n = m;
    }
    for (size_t y = 0; y < alive_n; ++y) {
      const size_t x = alive[y];
      if (doc_bound[x] < top.threshold()) continue;
      const uint32_t doc = buf[i + x];
      double score = 0;
      for (size_t t = 0; t < ts.size(); ++t) {
        const uint32_t f = tf_at[t * kBuf + x];
        if (f != 0) score += ts[t].Contribution(f, doc);
      }
      // Below the threshold it cannot enter: skip building the entry (the id lookup).
      if (score >= top.threshold()) top.Offer(TopEntry{score, static_cast<uint32_t>(k), doc, seg.id(doc)});
    }
    i += n;
  }
}

// Top-k over the final matches of a ConjunctionTerms query in segment k:
// the required terms first when most documents match
// (WalkRequiredFirst), each set of matches walked by ConjunctionWindows,
// or by rank when it is small.
void ConjunctionSegment(const std::vector<const Alt*>& alts, size_t k, const Snapshot& snap, Norms& norms,
                        const roaring_bitmap_t* final_bm, TopK& top) {
  const Segment& seg = *snap.segments[k].segment;
  // Few matches (no more than the longest list has blocks): block-max
  // skipping would decode about a block per match and term, so each match
  // is scored directly, its tf found by rank. So are the sets
  // WalkRequiredFirst picks out of many matches when they are much
  // sparser than the postings, which the windows would decode in full.
  const std::vector<TermList> lists = TermLists(alts, k, seg, norms);
  uint64_t max_blocks = 0, postings = 0;
  for (const TermList& l : lists) {
    max_blocks = std::max(max_blocks, BlockCount(l.e.doc_freq));
    postings += l.e.doc_freq;
  }
  const bool many = roaring_bitmap_get_cardinality(final_bm) >= kManyMatches;
  WalkRequiredFirst(lists, final_bm, top, [&](const roaring_bitmap_t* docs) {
    const uint64_t n = roaring_bitmap_get_cardinality(docs);
    if (n <= max_blocks || (many && SparseBesidePostings(n, postings)))
      ScoreByRank(lists, k, seg, norms, docs, top);
    else
      ConjunctionWindows(alts, k, seg, norms, docs, top);
  });
}

// Top-k of a flat disjunction of single terms in segment k (`check`, if
// not null: the only documents that count), by MaxScore; first, when a
// list is long (common words), the reasoning of RequiredTerms: a sample
// of the deepest intersection is scored aside, and the k-th of those
// scores becomes the top-k's floor (they are scored again, in place, by
// the walk); only the documents holding the terms the floor makes
// required are scored. "aa OR ab", both in nearly every body and in a
// third of the titles, is decided by the titles: the documents with both.
void DisjunctionSegment(const std::vector<FlatTerm>& flat, size_t k, const Snapshot& snap, Norms& norms,
                        const roaring_bitmap_t* check, TopK& top) {
  const Segment& seg = *snap.segments[k].segment;
  uint64_t max_df = 0, postings = 0;
  for (const FlatTerm& f : flat) {
    if (f.alt->any) return MaxScoreSegment(flat, k, snap, norms, check, top);  // an expansion
    const int64_t ti = f.SegTerm(k);
    if (ti < 0) continue;
    const uint32_t df = seg.doc_freq(f.alt->field, static_cast<uint32_t>(ti));
    max_df = std::max<uint64_t>(max_df, df);
    postings += df;
  }
  // Worth its bitmap work only with a list in a quarter of the segment or
  // more: below that, MaxScore rarely reads enough postings to lose.
  if (max_df < kDenseConjunction || max_df * 4 < seg.doc_count() || top.k() == 0)
    return MaxScoreSegment(flat, k, snap, norms, check, top);
  std::vector<const Alt*> alts;
  for (const FlatTerm& f : flat) alts.push_back(f.alt);
  const std::vector<TermList> lists = TermLists(alts, k, seg, norms);
  const RequiredTerms terms(lists, check, top.k());
  const auto& deep = terms.deep();
  // Without an intersection, MaxScore's essential lists do as well; when
  // scoring it by rank would read most of the postings (one field of
  // common words), MaxScore's block bounds do better.
  if (deep.size() < 2 || !SparseBesidePostings(roaring_bitmap_get_cardinality(deep.back()), postings))
    return MaxScoreSegment(flat, k, snap, norms, check, top);
  // The floor from the first of them: enough for a threshold near the
  // final one, without scoring them all twice.
  Bitmap sample(roaring_bitmap_copy(deep.back()));
  uint32_t past = 0;
  if (roaring_bitmap_select(sample.get(), static_cast<uint32_t>(std::min<uint64_t>(128 + 8 * top.k(), UINT32_MAX)),
                            &past))
    roaring_bitmap_remove_range_closed(sample.get(), past, UINT32_MAX);
  TopK seeds(top.k(), top.after());  // the key's: a floor from the sample's answerable scores
  ScoreByRank(lists, k, seg, norms, sample.get(), seeds);
  top.RaiseFloor(seeds.threshold());
  const size_t required = terms.Required(top.threshold());
  if (required == 0) return MaxScoreSegment(flat, k, snap, norms, check, top);
  const roaring_bitmap_t* docs = deep[std::min(required, deep.size()) - 1];
  if (SparseBesidePostings(roaring_bitmap_get_cardinality(docs), postings))
    ScoreByRank(lists, k, seg, norms, docs, top);
  else
    MaxScoreSegment(flat, k, snap, norms, docs, top);
}

// Term-at-a-time for flat disjunctions of many terms (prefix and fuzzy
// expansions), without a bitmap union: every posting adds its contribution
// to a dense per-document accumulator and marks its document in a dense
// bitset, whose marked documents are the matches. Contributions are added
// in `flat` order, as Score adds them (bit-identical).
// `drop`: documents that do not count (deleted, prohibited); `keep`, if
// not null: the only ones that do (a filter, or matches found already).
// Offers the matches that count to `top` and returns their number.
uint64_t AccumulateSegment(const std::vector<FlatTerm>& flat, size_t k, const Snapshot& snap, Norms& norms,
                           const roaring_bitmap_t* keep, std::span<const roaring_bitmap_t* const> drop, TopK& top) {
  const Segment& seg = *snap.segments[k].segment;
  const uint32_t n = seg.doc_count();
  const size_t words = (n + 63) / 64;
  // Reused by every search on this thread. `acc` is all zeros between
  // searches (the final scan zeroes what the postings touched), so a
  // search does not pay for clearing a whole segment's worth of doubles.
  static thread_local std::vector<double> acc;
  static thread_local std::vector<uint64_t> seen, mask;
  if (acc.size() < n) acc.resize(n, 0.0);
  seen.assign(words, 0);
  for (const FlatTerm& t : flat) {
    const int64_t ti = t.SegTerm(k);
    if (ti < 0) continue;
    const Alt& a = *t.alt;
    FieldNorms& norm = norms.field(a.field);
    const double weight = a.weight, idf = t.idf();
    const uint32_t* lens = seg.lengths(a.field);
    const TermEntry e = seg.entry(a.field, static_cast<uint32_t>(ti));  // decoded once for both
    const TfArray tfs = seg.Tfs(e);
    // Captures by value: the stores cannot then alias what it reads (the
    // compiler would reload weight and idf after every store otherwise).
    seg.ForEachDoc(e,
                   [weight, idf, tfs, lens, &norm, sums = acc.data(), marks = seen.data(), rank = uint32_t{0}](uint32_t d) mutable {
                     sums[d] += weight * Bm25WithNorm(idf, tfs[rank++], norm(lens[d]));
                     marks[d >> 6] |= uint64_t{1} << (d & 63);
                   });
  }
  const bool restricted = keep != nullptr || !drop.empty();
  if (restricted) {
    mask.assign(words, keep == nullptr ? ~uint64_t{0} : 0);
    if (keep != nullptr) ForEachDoc(keep, [&](uint32_t d) { mask[d >> 6] |= uint64_t{1} << (d & 63); });
    for (const roaring_bitmap_t* x : drop) ForEachDoc(x, [&](uint32_t d) { mask[d >> 6] &= ~(uint64_t{1} << (d & 63)); });
  }
  uint64_t total = 0;
  double threshold = top.threshold();
  for (size_t w = 0; w < words; ++w) {
    uint64_t bits = seen[w];
    const uint64_t live = restricted ? bits & mask[w] : bits;
    total += std::popcount(live);
    for (; bits != 0; bits &= bits - 1) {
      const uint32_t bit = std::countr_zero(bits);
      const uint32_t d = static_cast<uint32_t>(w * 64) + bit;
      const double score = acc[d];
      acc[d] = 0;
      if (score >= threshold && (live >> bit & 1) != 0) {
        top.Offer(TopEntry{score, static_cast<uint32_t>(k), d, seg.id(d)});
        threshold = top.threshold();
      }
    }
  }
  return total;
}

// The number of documents of segment k in which any of `flat` (at most
// kMaxScoreTerms) occurs, counted in a dense bitset; or nullopt when the
// lists hold fewer than doc_count / 512 postings. Zeroing and counting the
// bitset are doc_count / 32 word operations whatever the lists, so rare
// terms in a large segment are left to roaring unions (one step or so per
// posting); the bound of 512 is a choice, not a measured break-even.
std::optional<uint64_t> CountFlatMatches(const std::vector<FlatTerm>& flat, size_t k, const Segment& seg) {
  TermEntry entries[kMaxScoreTerms];
  size_t n = 0;
  uint64_t postings = 0;
  for (const FlatTerm& t : flat) {
    const int64_t ti = t.SegTerm(k);
    if (ti < 0) continue;
    entries[n] = seg.entry(t.alt->field, static_cast<uint32_t>(ti));
    postings += entries[n++].doc_freq;
  }
  if (postings < seg.doc_count() / 512) return std::nullopt;
  static thread_local std::vector<uint64_t> words;  // reused by every search on this thread
  words.assign((seg.doc_count() + 63) / 64, 0);
  for (size_t i = 0; i < n; ++i) seg.MarkDocs(entries[i], words);
  uint64_t count = 0;
  for (uint64_t w : words) count += static_cast<uint64_t>(std::popcount(w));
  return count;
}

// What a searchAfter value is, for messages.
std::string DescribeSortValue(const SortValue& v) {
  switch (v.type) {
    case SortValue::Type::kNull:
      return "null";
    case SortValue::Type::kNumber:
      return "the number " + v.text;
    case SortValue::Type::kString:
      break;
  }
  return "a string";
}

// Reads req.search_after against the request's sort keys into `after`: a
// Hit with that key (score, per sort key its value or missing, and the id;
// strings point into req). InvalidArgument "searchAfter..." when offset is
// not 0 or the key does not fit the sort; `after` is then unspecified.
Status ReadSearchAfter(const std::vector<SortKey>& sort, const SearchRequest& req, Hit& after) {
  const std::vector<SortValue>& key = *req.search_after;
  const size_t n = sort.empty() ? 1 : sort.size();  // the default sort is by score
  auto name = [&](size_t i) -> std::string {
    if (i == n) return "the document id";
    if (sort.empty() || sort[i].field == nullptr) return "_score";
    return "sort field '" + sort[i].field->name + "'";
  };
  if (req.offset != 0)
    return Bad("searchAfter: offset must be 0 with searchAfter (the key says where the page starts), got " +
               std::to_string(req.offset));
  if (key.size() != n + 1) {
    std::string expected;
    for (size_t i = 0; i <= n; ++i) expected += (i == 0 ? "" : i == n ? ", then " : ", ") + name(i);
    return Bad("searchAfter: expected " + std::to_string(n + 1) + " values as a hit's \"sort\" holds them (" +
               expected + "), got " + std::to_string(key.size()));
  }
  after = Hit{0, 0, 0, {}, {}, {}, {}};
  after.num.assign(sort.size(), Number{});
  after.str.assign(sort.size(), std::string_view());
  after.missing.assign(sort.size(), false);
  bool score_read = false;
  for (size_t i = 0; i <= n; ++i) {
    const SortValue& v = key[i];
    const FieldDef* fd = i == n || sort.empty() ? nullptr : sort[i].field;
    auto wrong = [&](const char* expected) {
      return Bad("searchAfter[" + std::to_string(i) + "]: " + name(i) + " takes " + expected + ", got " +
                 DescribeSortValue(v));
    };
    if (i == n) {
      if (v.type != SortValue::Type::kString) return wrong("a string");
      after.id = v.text;
    } else if (fd == nullptr) {
      const std::optional<Number> x = v.type == SortValue::Type::kNumber ? ParseNumber(v.text) : std::nullopt;
      if (!x) return wrong("a number");
      // A hit has one score: a sort naming _score twice carries it twice, and the first is read.
      if (!score_read) after.score = x->value;
      score_read = true;
    } else if (v.type == SortValue::Type::kNull) {
      after.missing[i] = true;  // missing values sort last, whatever the direction
    } else if (fd->kind != FieldKind::kText) {
      const std::optional<Number> x = v.type == SortValue::Type::kNumber ? ParseNumber(v.text) : std::nullopt;
      if (!x)
        return wrong(fd->kind == FieldKind::kDate ? "a number (milliseconds since the epoch) or null"
                                                  : "a number or null");
      after.num[i] = *x;
    } else {
      if (v.type != SortValue::Type::kString) return wrong("a string or null");
      after.str[i] = v.text;
    }
  }
  return Status::Ok();
}

// A number or date sort value as JSON text that ParseNumber reads back to
// the same Number: an integer exactly (with its residual beyond 2^53), any
// other value as RapidJSON's round-trip double.
template <class Writer>
void WriteSortNumber(Writer& w, Number n) {
  if (n.residual != 0) {
    __extension__ using Int128 = __int128;
    const Int128 v = static_cast<Int128>(n.value) + n.residual;
    if (v < 0)
      w.Int64(static_cast<int64_t>(v));
    else
      w.Uint64(static_cast<uint64_t>(v));
    return;
  }
  if (std::trunc(n.value) == n.value && n.value >= -0x1p63 && n.value < 0x1p64) {
    if (n.value < 0x1p63)
      w.Int64(static_cast<int64_t>(n.value));
    else
      w.Uint64(static_cast<uint64_t>(n.value));
    return;
  }
  w.Double(n.value);
}

}  // namespace

std::string NormalizeMultiTermText(const FieldDef& field, std::string_view text) {
  if (field.analyzer_name == "keyword") return std::string(text);
  auto normalized = analyzers::NormalizeText(text, /*fold=*/field.analyzer_name == "folding");
  return normalized.ok() ? *std::move(normalized) : std::string(text);
}

uint32_t EditDistance(std::string_view a8, std::string_view b8, uint32_t max) {
  auto decode = [](std::string_view s, std::u32string& out) {
    out.clear();
    for (size_t i = 0; i < s.size();) {
      unsigned char c = s[i];
      uint32_t cp;
      size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
      for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
      out.push_back(cp);
      i += n;
    }
  };
  thread_local std::u32string a, b;
  decode(a8, a);
  decode(b8, b);
  const size_t n = a.size(), m = b.size();
  if ((n > m ? n - m : m - n) > max) return max + 1;
  thread_local std::vector<uint32_t> d;
  d.assign((n + 1) * (m + 1), 0);
  auto at = [&](size_t i, size_t j) -> uint32_t& { return d[i * (m + 1) + j]; };
  for (size_t i = 0; i <= n; ++i) at(i, 0) = static_cast<uint32_t>(i);
  for (size_t j = 0; j <= m; ++j) at(0, j) = static_cast<uint32_t>(j);
  for (size_t i = 1; i <= n; ++i) {
    uint32_t row_min = UINT32_MAX;
    for (size_t j = 1; j <= m; ++j) {
      uint32_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      uint32_t v = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) v = std::min(v, at(i - 2, j - 2) + 1);
      at(i, j) = v;
      row_min = std::min(row_min, v);
    }
    if (row_min > max) return max + 1;
  }
  return std::min(at(n, m), max + 1);
}

// `names` without repeats, in first-seen order: facets=tags,tags counts
// (and highlight=body,body renders) a field once.
std::vector<std::string> Distinct(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& n : names)
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

Result<SearchResult> RunSearch(const Snapshot& snap, const SearchRequest& req) {
  const SearchDefinitionImpl& def = *snap.def;
  const std::vector<std::string> facets = Distinct(req.facets), highlight = Distinct(req.highlight);
  // Request validation.
  std::vector<SortKey> sort;
  if (!req.sort.empty()) {
    size_t start = 0;
    while (start <= req.sort.size()) {
      size_t comma = req.sort.find(',', start);
      std::string item = req.sort.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      start = comma == std::string::npos ? req.sort.size() + 1 : comma + 1;
      while (!item.empty() && item.front() == ' ') item.erase(item.begin());
      while (!item.empty() && item.back() == ' ') item.pop_back();
      if (item.empty()) return Bad("sort: empty sort key");
      SortKey key;
      key.desc = item[0] == '-';
      if (item[0] == '-' || item[0] == '+') item.erase(item.begin());
      if (item == "_score") {
        key.desc = true;
      } else {
        key.field = def.Find(item);
        if (key.field == nullptr) return Bad("sort: unknown field '" + item + "'");
        if (key.field->kind == FieldKind::kText && !(key.field->facet || key.field->analyzer_name == "keyword"))
          return Bad("sort: field '" + item + "' is a text field; sort on number, date or keyword/facet fields");
      }
      sort.push_back(key);
    }
  }
  for (const auto& f : facets) {
    const FieldDef* fd = def.Find(f);
    if (fd == nullptr) return Bad("facets: unknown field '" + f + "'");
    if (fd->kind != FieldKind::kText || !(fd->facet || fd->analyzer_name == "keyword"))
      return Bad("facets: field '" + f + "' is not a keyword/facet field");
  }
  for (const auto& f : highlight) {
    const FieldDef* fd = def.Find(f);
    if (fd == nullptr) return Bad("highlight: unknown field '" + f + "'");
    if (fd->kind != FieldKind::kText) return Bad("highlight: field '" + f + "' is not a text field");
  }
  // searchAfter: the key as a hit (`after`, for a field sort) and as a
  // top-k entry (`after_entry`, for a ranking by score).
  Hit after_hit{0, 0, 0, {}, {}, {}, {}};
  const Hit* after = nullptr;
  TopEntry after_top{0, 0, 0, {}};
  const TopEntry* after_entry = nullptr;
  if (req.search_after) {
    if (Status st = ReadSearchAfter(sort, req, after_hit); !st.ok()) return st;
    after = &after_hit;
    after_top = TopEntry{after_hit.score, 0, 0, after_hit.id};
    after_entry = &after_top;
  }
  std::string_view qtext = req.q;
  while (!qtext.empty() && (qtext.front() == ' ')) qtext.remove_prefix(1);
  auto parsed = ParseQuery(qtext == "*" ? std::string_view() : std::string_view(req.q), req.op);
  if (!parsed.ok()) return parsed.status();
  Compiler comp(snap);
  auto root = comp.Compile(**parsed, 1.0);
  if (!root.ok()) return root.status();
  std::unique_ptr<CNode> filter;
  int filter_nodes = 0;
  if (!req.filter.empty()) {
    auto pf = ParseQuery(req.filter, req.op);
    if (!pf.ok()) return Bad("filter: " + pf.status().message());
    Compiler fc(snap);
    auto f = fc.Compile(**pf, 1.0);
    if (!f.ok()) return Bad("filter: " + f.status().message());
    filter = std::move(f).value();
    filter_nodes = fc.node_count();
  }
  const bool need_scores = sort.empty() || std::any_of(sort.begin(), sort.end(), [](const SortKey& k) { return k.field == nullptr; });
  SearchResult result;
  result.snapshot_etag = snap.etag;
  std::vector<Hit> hits;
  std::map<std::string, std::map<std::string, uint64_t>> facet_counts;
  const size_t want = req.limit > SIZE_MAX - req.offset ? SIZE_MAX : req.offset + req.limit;
  // Relevance order only: a bounded top-k, with MaxScore for flat disjunctions.
  const bool by_score = sort.empty() || (sort.size() == 1 && sort[0].field == nullptr);
  TopK topk(want, after_entry);
  std::vector<FlatTerm> flat;
  const bool use_maxscore = by_score && FlatTerms(**root, flat);
  std::vector<const Alt*> conj;
  const bool use_conjunction = by_score && !use_maxscore && ConjunctionTerms(**root, conj);
  const bool flat_has_not = use_maxscore && std::any_of((**root).clauses.begin(), (**root).clauses.end(),
                                                        [](const auto& c) { return c.first == Occur::kMustNot; });
  // Many flat terms (an expansion) and no facets: term-at-a-time finds the
  // matches itself, without the union Eval would build.
  const bool accumulate = use_maxscore && flat.size() > kMaxScoreTerms && facets.empty();
  Norms norms(snap);
  // Runs segment(k, norms, top) -> matches counted for every segment k in
  // parallel, each with its own norms and top-k (sharing their thresholds),
  // merged after: the same hits and scores as one after another.
  auto in_parallel = [&](auto&& segment) {
    struct Piece {
      uint64_t total = 0;
      std::vector<TopEntry> top;
    };
    std::vector<Piece> pieces(snap.segments.size());
    std::atomic<double> shared_floor{-HUGE_VAL};
    auto piece = [&](size_t k) {
      Norms piece_norms(snap);
      TopK top(want, after_entry);
      top.Share(&shared_floor);
      pieces[k].total = segment(k, piece_norms, top);
      pieces[k].top = std::move(top).Sorted();
    };
    ParallelFor(pieces.size(), piece);
    for (Piece& p : pieces) {
      result.total += p.total;
      for (const TopEntry& e : p.top) topk.Offer(e);
    }
  };
  // Term-at-a-time over a segment (`accumulate`).
  auto accumulate_segment = [&](size_t k, Norms& piece_norms, TopK& top) {
    const SegmentState& s = snap.segments[k];
    SegEval ev(s, comp.node_count());
    std::vector<const roaring_bitmap_t*> drop;
    if (s.deleted_count > 0) drop.push_back(s.deleted.get());
    for (const auto& [occ, c] : (**root).clauses)
      if (occ == Occur::kMustNot) drop.push_back(Eval(*c, k, ev));
    SegEval fev(s, filter ? filter_nodes : 0);
    const roaring_bitmap_t* keep = filter ? Eval(*filter, k, fev) : nullptr;
    return AccumulateSegment(flat, k, snap, piece_norms, keep, drop, top);
  };
  // The answer's order: a total order, its last key the id (the key
  // searchAfter compares with).
  auto less = [&](const Hit& a, const Hit& b) {
    for (size_t si = 0; si < sort.size(); ++si) {
      const SortKey& key = sort[si];
      if (key.field == nullptr) {
        if (a.score != b.score) return a.score > b.score;
        continue;
      }
      if (a.missing[si] != b.missing[si]) return b.missing[si];  // missing values sort last
      if (a.missing[si]) continue;
      if (key.field->kind != FieldKind::kText) {
        if (a.num[si] != b.num[si]) return key.desc ? a.num[si] > b.num[si] : a.num[si] < b.num[si];
      } else if (a.str[si] != b.str[si]) {
        return key.desc ? a.str[si] > b.str[si] : a.str[si] < b.str[si];
      }
    }
    if (a.score != b.score) return a.score > b.score;  // _score as the tie-break
    return a.id < b.id;
  };
  // A field sort keeps at most about twice `want` hits: when the list
  // reaches that, the best `want` are kept (want > 0).
  auto keep_hit = [&](Hit&& h) {
    if (after != nullptr && !less(*after, h)) return;  // at or before the key: an earlier page's
    hits.push_back(std::move(h));
    if (hits.size() > want && hits.size() - want >= std::max(want, size_t{1024})) {
      std::nth_element(hits.begin(), hits.begin() + static_cast<std::ptrdiff_t>(want), hits.end(), less);
      hits.erase(hits.begin() + static_cast<std::ptrdiff_t>(want), hits.end());
    }
  };
  // One segment's matches: counted (returned) and, ranked by score, offered
  // to `top`; or, sorted by fields, kept in `hits` (keep_hit).
  auto segment_matches = [&](size_t k, Norms& seg_norms, TopK& top) -> uint64_t {
    const SegmentState& s = snap.segments[k];
    const Segment& seg = *s.segment;
    // A flat disjunction where every document its terms reach counts needs
    // only their number: from the postings marked in a dense bitset rather
    // than from the roaring unions Eval would build, when the lists are long.
    std::optional<uint64_t> counted;
    if (use_maxscore && flat.size() <= kMaxScoreTerms && facets.empty() && !filter && !flat_has_not &&
        s.deleted_count == 0)
      counted = CountFlatMatches(flat, k, seg);
    if (counted) {
      if (*counted > 0 && want > 0) DisjunctionSegment(flat, k, snap, seg_norms, nullptr, top);
      return *counted;
    }
    SegEval ev(s, comp.node_count());
    const roaring_bitmap_t* matches = Eval(**root, k, ev);
    // The final matches: the query's, restricted by the filter and deletes.
    const bool restricted = filter != nullptr || s.deleted_count > 0;
    Bitmap restricted_bm;
    if (restricted) {
      restricted_bm.reset(roaring_bitmap_copy(matches));
      if (filter) {
        SegEval fev(s, filter_nodes);
        roaring_bitmap_and_inplace(restricted_bm.get(), Eval(*filter, k, fev));
      }
      roaring_bitmap_andnot_inplace(restricted_bm.get(), s.deleted.get());
      matches = restricted_bm.get();
    }
    const roaring_bitmap_t* final_bm = matches;
    const uint64_t m = roaring_bitmap_get_cardinality(final_bm);
    if (m == 0) return 0;
    for (const auto& f : facets) {
      const FieldDef* fd = def.Find(f);
      auto& counts = facet_counts[f];
      for (uint32_t ti = 0; ti < seg.term_count(fd->slot); ++ti) {
        auto bm = seg.Postings(fd->slot, ti);
        uint64_t c = roaring_bitmap_and_cardinality(bm.get(), final_bm);
        if (c > 0) counts[std::string(seg.term(fd->slot, ti))] += c;
      }
    }
    if (want == 0) return m;
    if (use_maxscore) {
      // Without a filter, deletes or prohibited clauses, every document
      // the flat terms reach is a match: no membership test per document.
      const roaring_bitmap_t* check = restricted || flat_has_not ? final_bm : nullptr;
      if (flat.size() > kMaxScoreTerms)
        AccumulateSegment(flat, k, snap, seg_norms, final_bm, {}, top);  // final_bm: its matches, found for the facets
      else
        DisjunctionSegment(flat, k, snap, seg_norms, check, top);
      return m;
    }
    if (use_conjunction) {
      ConjunctionSegment(conj, k, snap, seg_norms, final_bm, top);
      return m;
    }
    std::vector<uint32_t> docs(m);
    roaring_bitmap_to_uint32_array(final_bm, docs.data());
    if (by_score && (**root).kind == CNode::Kind::kLeaf &&
        ScoreLeafTopK(**root, k, seg_norms, ev, final_bm, docs, want, top))
      return m;
    std::vector<double> scores(m, 0.0);
    if (need_scores) Score(**root, final_bm, k, seg_norms, ev, docs, scores);
    if (by_score) {
      // Below the threshold a match cannot enter: no entry (the id lookup) for it.
      for (size_t j = 0; j < m; ++j)
        if (scores[j] >= top.threshold())
          top.Offer(TopEntry{scores[j], static_cast<uint32_t>(k), docs[j], seg.id(docs[j])});
      return m;
    }
    // A document with several values sorts by its smallest ascending and
    // its largest descending (Elasticsearch's default sort mode).
    // Keyword sort keys: from the terms in dictionary order.
    std::vector<std::vector<std::string_view>> kw(sort.size());
    for (size_t si = 0; si < sort.size(); ++si) {
      const FieldDef* fd = sort[si].field;
      if (fd == nullptr || fd->kind != FieldKind::kText) continue;
      const bool largest = sort[si].desc;
      kw[si].assign(m, std::string_view());
      std::vector<bool> set(m, false);
      for (uint32_t ti = 0; ti < seg.term_count(fd->slot); ++ti) {
        auto bm = seg.Postings(fd->slot, ti);
        Bitmap both(roaring_bitmap_and(bm.get(), final_bm));
        roaring_uint32_iterator_t it;
        roaring_init_iterator(both.get(), &it);
        for (; it.has_value; roaring_advance_uint32_iterator(&it)) {
          size_t j = std::lower_bound(docs.begin(), docs.end(), it.current_value) - docs.begin();
          if (!set[j] || largest) {
            set[j] = true;
            kw[si][j] = seg.term(fd->slot, ti);
          }
        }
      }
      for (size_t j = 0; j < m; ++j)
        if (!set[j]) kw[si][j] = std::string_view(nullptr, 0);
    }
    // Numeric keys from the values in ascending order, where the column
    // (the double of each document's smallest value) is not the key: the
    // largest value descending when some document has several, and every
    // key when some value is an integer beyond 2^53 (a residual).
    std::vector<std::vector<Number>> exact(sort.size());
    for (size_t si = 0; si < sort.size(); ++si) {
      const FieldDef* fd = sort[si].field;
      if (fd == nullptr || fd->kind == FieldKind::kText) continue;
      const bool largest = sort[si].desc && seg.multi_valued(fd->slot);
      if (!largest && !seg.has_residuals(fd->slot)) continue;
      exact[si].assign(m, Number{std::numeric_limits<double>::quiet_NaN(), 0});
      for (const NumEntry& e : seg.sorted(fd->slot)) {
        const uint32_t doc = e.doc;  // a copy: NumEntry is packed
        const auto at = std::lower_bound(docs.begin(), docs.end(), doc);
        if (at == docs.end() || *at != doc) continue;
        Number& key = exact[si][at - docs.begin()];
        if (largest || std::isnan(key.value)) key = e.number();
      }
    }
    for (size_t j = 0; j < m; ++j) {
      Hit h{scores[j], static_cast<uint32_t>(k), docs[j], seg.id(docs[j]), {}, {}, {}};
      for (size_t si = 0; si < sort.size(); ++si) {
        const FieldDef* fd = sort[si].field;
        Number v;
        std::string_view sv;
        bool missing = false;
        if (fd != nullptr && fd->kind != FieldKind::kText) {
          v = exact[si].empty() ? Number{seg.column(fd->slot)[docs[j]], 0} : exact[si][j];
          missing = std::isnan(v.value);
        } else if (fd != nullptr) {
          sv = kw[si][j];
          missing = sv.data() == nullptr;
        }
        h.num.push_back(v);
        h.str.push_back(sv);
        h.missing.push_back(missing);
      }
      keep_hit(std::move(h));
    }
    return m;
  };
  // Ranked by score without facets, the segments run in parallel (a
  // conjunction of two mid-frequency words spends most of its time in each
  // segment's lists); sorted or faceted, one after another (they share the
  // hits and the facet counts).
  if (accumulate) {
    in_parallel(accumulate_segment);
  } else if (by_score && facets.empty() && want > 0 && snap.segments.size() >= 2) {
    in_parallel(segment_matches);
  } else {
    for (size_t k = 0; k < snap.segments.size(); ++k) result.total += segment_matches(k, norms, topk);
  }
  if (by_score) {
    for (const TopEntry& e : std::move(topk).Sorted()) hits.push_back(Hit{e.score, e.seg, e.doc, e.id, {}, {}, {}});
  }
  size_t top = std::min(want, hits.size());
  std::partial_sort(hits.begin(), hits.begin() + static_cast<std::ptrdiff_t>(top), hits.end(), less);
  // Rendering.
  std::map<uint32_t, HighlightQuery> hl_terms;
  if (!highlight.empty()) CollectHighlight(**root, false, hl_terms);
  // A hit's "fields" come from its segment when every path asked for is
  // one the definition stores there (the default: all of them, copied as
  // indexed); otherwise, and for "*" and highlights, from the document.
  const std::vector<std::string>* store_paths = &def.store();
  const std::vector<std::vector<std::string>>* store_split = &def.store_split();
  bool store_all = def.store_all();
  std::vector<std::string> asked_paths;
  std::vector<std::vector<std::string>> asked_split;
  if (req.fields) {
    store_all = false;
    for (const auto& f : *req.fields) {
      if (f == "*") {
        store_all = true;
      } else if (std::find(asked_paths.begin(), asked_paths.end(), f) == asked_paths.end()) {
        asked_paths.push_back(f);
        asked_split.push_back(SplitPath(f));
      }
    }
    store_paths = &asked_paths;
    store_split = &asked_split;
  }
  const bool want_fields = store_all || !store_paths->empty();
  const bool all_stored = def.stores_in_segments() && !store_all &&
                          std::all_of(store_paths->begin(), store_paths->end(), [&](const std::string& p) {
                            return std::find(def.store().begin(), def.store().end(), p) != def.store().end();
                          });
  const bool whole_stored = all_stored && *store_paths == def.store();  // copy the segment's object as it is
  std::string scratch;  // a hit's stored object, parsed in place when only some paths are asked for
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartArray();
  for (size_t i = req.offset; i < top; ++i) {
    const Hit& h = hits[i];
    w.StartObject();
    w.Key("id");
    w.String(h.id.data(), static_cast<rapidjson::SizeType>(h.id.size()));
    w.Key("score");
    w.Double(h.score);
    const Segment& seg = *snap.segments[h.seg].segment;
    const bool fields_from_segment = want_fields && all_stored && seg.has_stored();
    if (fields_from_segment) {
      const std::string_view stored = seg.stored(h.doc);
      w.Key("fields");
      if (whole_stored) {
        w.RawValue(stored.data(), stored.size(), rapidjson::kObjectType);
      } else {
        scratch.assign(stored.data(), stored.size());
        rapidjson::Document d;
        if (ParseInsituWithExactNumbers(d, scratch.data()).IsError() || !d.IsObject())
          return Status::Corruption("a stored-fields record of segment " + std::to_string(h.seg) + " is not an object");
        w.StartObject();
        for (const std::string& p : *store_paths) {
          auto m = d.FindMember(rapidjson::StringRef(p.data(), p.size()));
          if (m == d.MemberEnd()) continue;
          w.Key(p.data(), static_cast<rapidjson::SizeType>(p.size()));
          m->value.Accept(w);
        }
        w.EndObject();
      }
    }
    const bool fetch = ((want_fields && !fields_from_segment) || !highlight.empty()) && req.fetch_document;
    if (fetch) {
      auto json = req.fetch_document(h.id);
      // The whole document goes out as it is stored: the same JSON value,
      // every number exactly as written (API.md), and no parse unless
      // paths or highlights need one.
      const bool whole = json && want_fields && !fields_from_segment && store_all;
      if (whole) {
        w.Key("fields");
        w.RawValue(json->data(), json->size(), rapidjson::kObjectType);
      }
      rapidjson::Document d;
      // In place: the values point into *json (which outlives d) instead
      // of being copied; a stored body was validated when written, so it
      // holds no raw NUL before its end.
      const bool parse = json && ((want_fields && !fields_from_segment && !store_all) || !highlight.empty());
      if (parse && !ParseInsituWithExactNumbers(d, json->data()).IsError() && d.IsObject()) {
        if (want_fields && !fields_from_segment && !store_all) {
          w.Key("fields");
          WriteStoredFields(d, *store_paths, *store_split, w);
        }
        if (!highlight.empty()) {
          w.Key("highlights");
          w.StartObject();
          for (const auto& f : highlight) {
            const FieldDef* fd = def.Find(f);
            std::vector<std::string> frags;
            auto it = hl_terms.find(fd->slot);
            if (it != hl_terms.end()) {
              ForEachValue(d, fd->path, 0, [&](const rapidjson::Value& v) {
                if (!v.IsString()) return;
                std::string_view text(v.GetString(), v.GetStringLength());
                HighlightSink sink(it->second);
                if (!fd->analyzer->Analyze(text, sink).ok()) return;
                Fragments(text, sink.Spans(), frags);
              });
            }
            w.Key(f.data(), static_cast<rapidjson::SizeType>(f.size()));
            w.StartArray();
            for (const auto& fr : frags) w.String(fr.data(), static_cast<rapidjson::SizeType>(fr.size()));
            w.EndArray();
          }
          w.EndObject();
        }
      }
    }
    // Written after the rest of the hit, as Elasticsearch places "sort".
    w.Key("sort");
    w.StartArray();
    if (sort.empty()) w.Double(h.score);
    for (size_t si = 0; si < sort.size(); ++si) {
      const FieldDef* fd = sort[si].field;
      if (fd == nullptr) {
        w.Double(h.score);
      } else if (h.missing[si]) {
        w.Null();
      } else if (fd->kind != FieldKind::kText) {
        WriteSortNumber(w, h.num[si]);
      } else {
        w.String(h.str[si].data(), static_cast<rapidjson::SizeType>(h.str[si].size()));
      }
    }
    w.String(h.id.data(), static_cast<rapidjson::SizeType>(h.id.size()));
    w.EndArray();
    w.EndObject();
    if (buf.GetSize() > req.max_response_bytes)
      return Status::TooLarge("the hits would exceed " + std::to_string(req.max_response_bytes) +
                              " bytes; ask for fewer with limit, or for fewer fields");
  }
  w.EndArray();
  result.hits_json.assign(buf.GetString(), buf.GetSize());
  if (!facets.empty()) {
    rapidjson::StringBuffer fb;
    rapidjson::Writer<rapidjson::StringBuffer> fw(fb);
    fw.StartObject();
    for (const auto& f : facets) {
      fw.Key(f.data(), static_cast<rapidjson::SizeType>(f.size()));
      std::vector<std::pair<std::string, uint64_t>> v(facet_counts[f].begin(), facet_counts[f].end());
      std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
      fw.StartObject();
      for (const auto& [val, c] : v) {
        fw.Key(val.data(), static_cast<rapidjson::SizeType>(val.size()));
        fw.Uint64(c);
      }
      fw.EndObject();
    }
    fw.EndObject();
    result.facets_json.assign(fb.GetString(), fb.GetSize());
  }
  return result;
}

}  // namespace corvid::postings
