// The query compiler (compiler.h).
#include "postings/search/compiler.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>

#include "common/utf8.h"
#include "postings/fuzzy.h"
#include "postings/parallel.h"
#include "postings/term_merge.h"

namespace corvid::postings::search {

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


namespace {

class VectorSink final : public analyzers::TokenSink {
 public:
  void OnToken(const analyzers::Token& t) override {
    terms.emplace_back(t.term);
    positions.push_back(t.position);
  }
  std::vector<std::string> terms;
  std::vector<uint32_t> positions;
};

// A number or date of a query: [start, end) is the period a date names
// ("2024-03-17" is that whole day; ParseIsoDate); end == start for a
// number, or a date with a fraction of a second (a point).
struct QueryValue {
  Number start, end;
};

Result<QueryValue> ParseNumberOrDate(const FieldDef& f, std::string_view s, size_t offset) {
  if (f.kind == FieldKind::kDate) {
    double end = 0;
    if (auto d = ParseIsoDate(s, &end)) return QueryValue{Number{*d, 0}, Number{end, 0}};
  }
  if (auto v = ParseNumber(s)) return QueryValue{*v, *v};
  return BadAt("field '" + f.name + "' expects a " + (f.kind == FieldKind::kDate ? "date" : "number") + ", not '" +
             std::string(s) + "'", offset);
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
      return BadAt("boosts multiply to more than " + std::string(kMaxBoostText), q.offset);
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
      if (q.kind == K::kRange) return BadAt("a range needs a field", q.offset);
      fields = def_.text_fields();
    } else {
      const FieldDef* f = def_.Find(q.field);
      if (f == nullptr) return BadAt("unknown field '" + q.field + "'", q.offset);
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
        return BadAt("field '" + f.name + "' takes a value or a range, not a prefix, wildcard or fuzzy term", q.offset);
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
        return BadAt("the query has more than " + std::to_string(kMaxQueryTerms) + " terms", q.offset);
      if (q.kind == K::kFuzzy && CountCodePoints(q.text) > kMaxFuzzyCodePoints)
        return BadAt("a fuzzy word may have at most " + std::to_string(kMaxFuzzyCodePoints) +
                   " characters", q.offset);
      if (!Expand(q, fields, boost, *n))  // a word no dictionary has: a leaf that matches nothing
        return BadAt("'" + std::string(Utf8Prefix(q.text, 100)) + "' expands to more than " +
                   std::to_string(kMaxExpansions) + " terms in one field", q.offset);
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
        return BadAt("the query has more than " + std::to_string(kMaxQueryTerms) + " terms", q.offset);
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
    // Each segment's matches of one field, as terms, for TermMerge.
    struct FoundLists {
      const Snapshot& snap;
      uint32_t slot;
      const Found* found;  // per segment
      size_t ns;
      size_t count() const { return ns; }
      uint32_t size(size_t k) const { return static_cast<uint32_t>(found[k].terms.size()); }
      std::string_view term(size_t k, uint32_t i) const { return snap.segments[k].segment->term(slot, found[k].terms[i]); }
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
      std::vector<int64_t> index;
      std::vector<uint64_t> df;
      const FoundLists lists{snap_, slot, seg_found, ns};
      TermMerge<FoundLists> merge(lists);
      while (merge.Next()) {
        a.terms.emplace_back(merge.term);
        uint64_t n = 0;
        size_t x = 0;  // merge.at is in segment order
        for (size_t k = 0; k < ns; ++k) {
          const bool has = x < merge.at.size() && merge.at[x].list == k;
          const uint32_t i = has ? merge.at[x++].index : 0;
          index.push_back(has ? static_cast<int64_t>(seg_found[k].terms[i]) : -1);
          if (has) n += seg_found[k].df[i];
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

}  // namespace

Result<CompiledQuery> Compile(const Snapshot& snap, const QueryNode& query) {
  Compiler compiler(snap);
  auto root = compiler.Compile(query, 1.0);
  if (!root.ok()) return root.status();
  return CompiledQuery{std::move(root).value(), compiler.node_count()};
}

}  // namespace corvid::postings::search

namespace corvid::postings {

std::string NormalizeMultiTermText(const FieldDef& field, std::string_view text) {
  if (field.multi_term == MultiTermForm::kAsIs) return std::string(text);
  auto normalized = analyzers::NormalizeText(text, /*fold=*/field.multi_term == MultiTermForm::kFolded);
  return normalized.ok() ? *std::move(normalized) : std::string(text);
}

}  // namespace corvid::postings
