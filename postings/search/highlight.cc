// Highlights (highlight.h).
#include "postings/search/highlight.h"

#include <algorithm>

#include "postings/search/phrase.h"

namespace corvid::postings::search {
namespace {

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

}  // namespace

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

void HighlightFragments(const HighlightQuery& q, const analyzers::Analyzer& analyzer, std::string_view text,
                        std::vector<std::string>& out) {
  HighlightSink sink(q);
  if (!analyzer.Analyze(text, sink).ok()) return;
  Fragments(text, sink.Spans(), out);
}

}  // namespace corvid::postings::search
