// The searcher: RunSearch orchestrates one search over a snapshot. The
// pieces are in search/: the query compiled (compiler.h: fields resolved,
// words analyzed, prefix/wildcard/fuzzy words expanded over the term
// dictionaries, BM25 statistics over live documents), matched per segment
// with roaring bitmap algebra (match.h, phrase.h), ranked by the strategy
// the planner picks (strategy.h: one file per strategy, each exact against
// the exhaustive scorer), sorted (sort.h), counted into facets (facets.h)
// and rendered with stored fields and highlights (render.h, highlight.h).
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
#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>

#include "postings/parallel.h"
#include "postings/query_parser.h"
#include "postings/search/compiler.h"
#include "postings/search/facets.h"
#include "postings/search/match.h"
#include "postings/search/render.h"
#include "postings/search/sort.h"
#include "postings/search/strategy.h"
#include "postings/snapshot.h"
#include "postings/walks.h"

namespace corvid::postings {
namespace {

// `names` without repeats, in first-seen order: facets=tags,tags counts
// (and highlight=body,body renders) a field once.
std::vector<std::string> Distinct(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& n : names)
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

}  // namespace

Result<SearchResult> RunSearch(const Snapshot& snap, const SearchRequest& req, SearchWalk* walk) {
  using namespace search;
  const SearchDefinitionImpl& def = *snap.def;
  const std::vector<std::string> facets = Distinct(req.facets), highlight = Distinct(req.highlight);
  // Request validation.
  auto parsed_sort = ParseSort(def, req.sort);
  if (!parsed_sort.ok()) return parsed_sort.status();
  const std::vector<SortKey> sort = std::move(parsed_sort).value();
  for (const auto& f : facets) {
    const FieldDef* fd = def.Find(f);
    if (fd == nullptr) return Bad("facets: unknown field '" + f + "'");
    if (!fd->WholeValues())
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
  TopEntry after_top{0, 0, 0, nullptr};
  const TopEntry* after_entry = nullptr;
  if (req.search_after) {
    if (Status st = ReadSearchAfter(sort, req, after_hit); !st.ok()) return st;
    after = &after_hit;
    after_top = TopEntry{after_hit.score, 0, 0, nullptr, after_hit.id};
    after_entry = &after_top;
  }
  std::string_view qtext = req.q;
  while (!qtext.empty() && (qtext.front() == ' ')) qtext.remove_prefix(1);
  auto parsed = ParseQuery(qtext == "*" ? std::string_view() : std::string_view(req.q), req.op);
  if (!parsed.ok()) return parsed.status();
  auto compiled = Compile(snap, **parsed);
  if (!compiled.ok()) return compiled.status();
  const CNode& root = *compiled->root;
  const int nodes = compiled->nodes;
  std::unique_ptr<CNode> filter;
  int filter_nodes = 0;
  if (!req.filter.empty()) {
    auto pf = ParseQuery(req.filter, req.op);
    if (!pf.ok()) return pf.status().Prefixed("filter: ");
    auto f = Compile(snap, **pf);
    if (!f.ok()) return f.status().Prefixed("filter: ");
    filter = std::move(f->root);
    filter_nodes = f->nodes;
  }
  const bool need_scores = sort.empty() || std::any_of(sort.begin(), sort.end(), [](const SortKey& k) { return k.field == nullptr; });
  SearchResult result;
  result.snapshot_etag = snap.etag;
  std::vector<Hit> hits;
  FacetCounts facet_counts;
  const size_t want = req.limit > SIZE_MAX - req.offset ? SIZE_MAX : req.offset + req.limit;
  // Relevance order only: a bounded top-k, ranked by the planner's strategy.
  const bool by_score = sort.empty() || (sort.size() == 1 && sort[0].field == nullptr);
  TopK topk(want, after_entry);
  const Plan plan = PlanSearch(root, by_score);
  const std::vector<FlatTerm>& flat = plan.flat;
  // Many flat terms (an expansion) and no facets: term-at-a-time finds the
  // matches itself, without the union Eval would build.
  const bool accumulate = plan.strategy == Strategy::kAccumulate && facets.empty();
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
    SegEval ev(s, nodes);
    std::vector<const roaring_bitmap_t*> drop;
    if (s.deleted_count > 0) drop.push_back(s.deleted.get());
    for (const auto& [occ, c] : root.clauses)
      if (occ == Occur::kMustNot) drop.push_back(Eval(*c, k, ev));
    SegEval fev(s, filter ? filter_nodes : 0);
    const roaring_bitmap_t* keep = filter ? Eval(*filter, k, fev) : nullptr;
    return AccumulateSegment(flat, k, snap, piece_norms, keep, drop, top);
  };
  auto less = [&](const Hit& a, const Hit& b) { return HitLess(sort, a, b); };
  // A walk's pinned snapshot (walks.h): its hits of documents deleted since are left out.
  std::optional<GoneSince> gone;  // not thread-safe: a field sort reads its segments one after another
  if (walk != nullptr && walk->now != nullptr) gone.emplace(snap, *walk->now);
  // Puts the best min(n, hits) hits first and returns how many; on a
  // pinned snapshot, the best of those still live (the others are
  // dropped: only candidates for the page are checked, and a round repeats
  // only when one was gone). In order if `sorted` (the answer), else in any
  // order (a trim).
  auto settle = [&](size_t n, bool sorted) -> size_t {
    const auto at = [&](size_t i) { return hits.begin() + static_cast<std::ptrdiff_t>(i); };
    size_t done = 0;  // hits[0, done): among the best, live
    while (done < std::min(n, hits.size())) {
      const size_t k = std::min(n, hits.size());
      if (k < hits.size()) std::nth_element(at(done), at(k), hits.end(), less);
      if (!gone) {
        done = k;
        break;
      }
      auto kept = std::remove_if(at(done), at(k), [&](const Hit& h) { return (*gone)(h.seg, h.doc, h.id); });
      done = static_cast<size_t>(kept - hits.begin());
      hits.erase(kept, at(k));
    }
    if (sorted) std::sort(hits.begin(), at(done), less);
    return done;
  };
  // A field sort keeps at most about twice `want` hits: when the list
  // reaches that, the best `want` are kept (want > 0).
  const std::function<void(Hit&&)> keep_hit = [&](Hit&& h) {
    if (after != nullptr && !less(*after, h)) return;  // at or before the key: an earlier page's
    hits.push_back(std::move(h));
    if (hits.size() > want && hits.size() - want >= std::max(want, size_t{1024})) {
      const size_t kept = settle(want, false);
      hits.erase(hits.begin() + static_cast<std::ptrdiff_t>(kept), hits.end());
    }
  };
  // Segment k's final matches: the query's, restricted by the filter and
  // deletes (into `restricted_bm` when restricted).
  auto final_matches = [&](size_t k, SegEval& ev, Bitmap& restricted_bm) -> const roaring_bitmap_t* {
    const SegmentState& s = snap.segments[k];
    const roaring_bitmap_t* matches = Eval(root, k, ev);
    if (filter == nullptr && s.deleted_count == 0) return matches;
    restricted_bm.reset(roaring_bitmap_copy(matches));
    if (filter) {
      SegEval fev(s, filter_nodes);
      roaring_bitmap_and_inplace(restricted_bm.get(), Eval(*filter, k, fev));
    }
    roaring_bitmap_andnot_inplace(restricted_bm.get(), s.deleted.get());
    return restricted_bm.get();
  };
  // A field sort with _score among its keys: each page scores with its own
  // moment's statistics, and a write between pages moves every score (N,
  // n and the average length change), so the key's score is taken as its
  // document's score now when that document still matches with the key's
  // field values. The walk then goes on right after that document, exact
  // while writes leave the order of the tied documents' scores as it was
  // (they move alike), as API.md asks of a field sort. A key whose
  // document moved, or that is no hit's, is read as written.
  if (after != nullptr && need_scores && !by_score) {
    for (size_t k = 0; k < snap.segments.size(); ++k) {
      const SegmentState& s = snap.segments[k];
      const std::optional<uint32_t> d = s.segment->FindId(after_hit.id);
      if (!d) continue;
      SegEval ev(s, nodes);
      Bitmap restricted_bm;
      const roaring_bitmap_t* final_bm = final_matches(k, ev, restricted_bm);
      if (!roaring_bitmap_contains(final_bm, *d)) continue;  // deleted here, or no match
      // Scored and keyed as the only match (both read every match they are given).
      const Bitmap only(roaring_bitmap_of(1, *d));
      const std::vector<uint32_t> one{*d};
      std::vector<double> score{0.0};
      Score(root, only.get(), k, norms, ev, one, score);
      FieldSortHits(*s.segment, static_cast<uint32_t>(k), sort, only.get(), one, score, [&](Hit&& now) {
        const double was = now.score;
        now.score = after_hit.score;
        now.id = after_hit.id;
        if (!less(now, after_hit) && !less(after_hit, now)) after_hit.score = was;  // the same field values
      });
      break;
    }
  }
  // One segment's matches: counted (returned) and, ranked by score, offered
  // to `top`; or, sorted by fields, kept in `hits` (keep_hit).
  auto segment_matches = [&](size_t k, Norms& seg_norms, TopK& top) -> uint64_t {
    const SegmentState& s = snap.segments[k];
    const Segment& seg = *s.segment;
    // A flat disjunction where every document its terms reach counts needs
    // only their number: from the postings marked in a dense bitset rather
    // than from the roaring unions Eval would build, when the lists are long.
    std::optional<uint64_t> counted;
    if (plan.strategy == Strategy::kDisjunction && facets.empty() && !filter && !plan.flat_has_not &&
        s.deleted_count == 0)
      counted = CountFlatMatches(flat, k, seg);
    if (counted) {
      if (*counted > 0 && want > 0) DisjunctionSegment(flat, k, snap, seg_norms, nullptr, top);
      return *counted;
    }
    SegEval ev(s, nodes);
    const bool restricted = filter != nullptr || s.deleted_count > 0;
    Bitmap restricted_bm;
    const roaring_bitmap_t* final_bm = final_matches(k, ev, restricted_bm);
    const uint64_t m = roaring_bitmap_get_cardinality(final_bm);
    if (m == 0) return 0;
    CountFacets(def, seg, final_bm, facets, facet_counts);
    if (want == 0) return m;
    switch (plan.strategy) {
      case Strategy::kAccumulate:
        AccumulateSegment(flat, k, snap, seg_norms, final_bm, {}, top);  // final_bm: its matches, found for the facets
        return m;
      case Strategy::kDisjunction:
        // Without a filter, deletes or prohibited clauses, every document
        // the flat terms reach is a match: no membership test per document.
        DisjunctionSegment(flat, k, snap, seg_norms, restricted || plan.flat_has_not ? final_bm : nullptr, top);
        return m;
      case Strategy::kConjunction:
        ConjunctionSegment(plan.conj, k, snap, seg_norms, final_bm, top);
        return m;
      case Strategy::kLeafTopK:
      case Strategy::kExhaustive:
        break;
    }
    std::vector<uint32_t> docs(m);
    roaring_bitmap_to_uint32_array(final_bm, docs.data());
    if (plan.strategy == Strategy::kLeafTopK && ScoreLeafTopK(root, k, seg_norms, ev, final_bm, docs, want, top))
      return m;
    std::vector<double> scores(m, 0.0);
    if (need_scores) Score(root, final_bm, k, seg_norms, ev, docs, scores);
    if (by_score) {
      // Below the threshold a match cannot enter: not offered.
      for (size_t j = 0; j < m; ++j)
        if (scores[j] >= top.threshold())
          top.Offer(TopEntry{scores[j], static_cast<uint32_t>(k), docs[j], &seg});
      return m;
    }
    FieldSortHits(seg, static_cast<uint32_t>(k), sort, final_bm, docs, scores, keep_hit);
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
    for (const TopEntry& e : std::move(topk).Sorted()) hits.push_back(Hit{e.score, e.seg, e.doc, e.id(), {}, {}, {}});
  }
  const size_t top = settle(want, true);
  // Sorted by a field: a walk may go on from the page's last hit (also
  // after a short page: a client that reads on until an empty one must
  // not get the index as it is now at the end of its walk).
  if (walk != nullptr && SortsByField(sort) && top > req.offset)
    walk->next = WalkPosition(req, sort, hits[top - 1]);
  if (Status st = RenderHits(snap, req, hits, top, sort, highlight, root, result.hits_json); !st.ok()) return st;
  if (!facets.empty()) result.facets_json = RenderFacets(facets, facet_counts);
  return result;
}

}  // namespace corvid::postings
