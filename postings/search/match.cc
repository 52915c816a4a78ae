// Matching (match.h).
#include "postings/search/match.h"

#include <span>

#include "postings/parallel.h"
#include "postings/posting_cursor.h"
#include "postings/search/phrase.h"

namespace corvid::postings::search {
namespace {

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
        uint32_t r0 = 0, r1 = 0;  // set by Find: a candidate is in every list
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

}  // namespace

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

const roaring_bitmap_t* AltBitmap(const CNode& n, size_t ai, const roaring_bitmap_t* anc, const SegEval& ev,
                                  Bitmap* own) {
  if (n.alts.size() == 1) return anc;
  own->reset(roaring_bitmap_and(anc, ev.alt_bm[n.id][ai].get()));
  return own->get();
}

void AltMatches(const CNode& n, size_t ai, const roaring_bitmap_t* anc, const SegEval& ev, std::vector<uint32_t>& out) {
  Bitmap own;
  const roaring_bitmap_t* eb = AltBitmap(n, ai, anc, ev, &own);
  out.resize(roaring_bitmap_get_cardinality(eb));
  roaring_bitmap_to_uint32_array(eb, out.data());
}

ScoreTermTfs::ScoreTermTfs(const CNode& n, size_t ai, size_t i, size_t k, const SegEval& ev) {
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

}  // namespace corvid::postings::search
