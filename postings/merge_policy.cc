// The tiered merge policy (merge_policy.h).
#include "postings/merge_policy.h"

#include <algorithm>
#include <map>

namespace corvid::postings {

uint64_t MergeLevel(uint64_t live) {
  uint64_t level = 0;
  for (uint64_t s = std::max(live, kFloorDocs) / kFloorDocs; s >= kMergeFactor; s /= kMergeFactor) ++level;
  return level;
}

std::vector<size_t> PickMerge(std::span<const SegmentSize> segments) {
  for (size_t i = 0; i < segments.size(); ++i) {
    const SegmentSize& s = segments[i];
    if (s.deleted > 0 && static_cast<double>(s.deleted) / static_cast<double>(s.docs) > kMaxDeletedFraction) return {i};
  }
  std::map<uint64_t, std::vector<size_t>> levels;  // ascending: the lowest full level first
  for (size_t i = 0; i < segments.size(); ++i) levels[MergeLevel(segments[i].live())].push_back(i);
  for (auto& [level, v] : levels) {
    if (v.size() < kMergeFactor) continue;
    // The smallest kMergeFactor of the level.
    std::stable_sort(v.begin(), v.end(), [&](size_t a, size_t b) { return segments[a].live() < segments[b].live(); });
    std::vector<size_t> pick(v.begin(), v.begin() + kMergeFactor);
    std::sort(pick.begin(), pick.end());
    return pick;
  }
  return {};
}

}  // namespace corvid::postings
