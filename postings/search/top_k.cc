// Deciding which of a top-k's equal scores stay (top_k.h).
#include "postings/search/top_k.h"

namespace corvid::postings::search {

namespace {

bool IdLess(const TopEntry& a, const TopEntry& b) { return a.id() < b.id(); }

// Walking a segment's id order until `keep` of its `n` candidates are met
// reads about keep * docs / n entries of 4 bytes, a page per 1,024, in
// order; reading the candidates' ids costs up to two random pages each.
// The walk also pays a binary search per entry, so it is taken while it
// reads at most 8 entries per candidate.
bool WalkIsCheaper(size_t keep, uint32_t docs, size_t n) {
  return static_cast<uint64_t>(keep) * docs <= static_cast<uint64_t>(n) * n * 8;
}

}  // namespace

void KeepSmallestIds(std::vector<TopEntry>& ties, size_t keep) {
  if (ties.size() <= keep) return;
  if (keep == 0) {
    ties.clear();
    return;
  }
  std::sort(ties.begin(), ties.end(), [](const TopEntry& a, const TopEntry& b) {
    return a.segment != b.segment ? std::less<>()(a.segment, b.segment) : a.doc < b.doc;
  });
  // Each segment's `keep` smallest first (a segment with no more than that
  // keeps them all), then the smallest of those.
  std::vector<TopEntry> kept;
  for (auto group = ties.begin(); group != ties.end();) {
    auto end = group;
    while (end != ties.end() && end->segment == group->segment) ++end;
    const size_t n = static_cast<size_t>(end - group);
    const Segment* seg = group->segment;
    if (n <= keep) {
      kept.insert(kept.end(), group, end);
    } else if (seg != nullptr && WalkIsCheaper(keep, seg->doc_count(), n)) {
      size_t met = 0;
      for (uint32_t r = 0; r < seg->doc_count() && met < keep; ++r) {
        const uint32_t d = seg->doc_in_id_order(r);
        auto it = std::lower_bound(group, end, d, [](const TopEntry& e, uint32_t doc) { return e.doc < doc; });
        if (it == end || it->doc != d) continue;
        kept.push_back(*it);
        ++met;
      }
    } else {
      std::nth_element(group, group + static_cast<std::ptrdiff_t>(keep - 1), end, IdLess);
      kept.insert(kept.end(), group, group + static_cast<std::ptrdiff_t>(keep));
    }
    group = end;
  }
  if (kept.size() > keep) {
    std::nth_element(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(keep - 1), kept.end(), IdLess);
    kept.resize(keep);
  }
  ties = std::move(kept);
}

}  // namespace corvid::postings::search
