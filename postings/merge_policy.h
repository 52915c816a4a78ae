// The merge policy: which segments of an index to merge next. Tiered, as
// Lucene's: a level holds segments within a factor of kMergeFactor in live
// size; kMergeFactor segments of the lowest full level are merged into one
// of the next, so a document is rewritten about log10(N / kFloorDocs)
// times. A segment more than kMaxDeletedFraction deleted is rewritten
// alone first, to give back what deletes hold. The merger
// (segment_merger.h) does the work; search_index.cc commits it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace corvid::postings {

inline constexpr uint64_t kMergeFactor = 10;
inline constexpr uint64_t kFloorDocs = 1000;
inline constexpr double kMaxDeletedFraction = 0.3;

struct SegmentSize {
  uint64_t docs = 0;     // documents in the file
  uint64_t deleted = 0;  // of which deleted
  uint64_t live() const { return docs - deleted; }
};

// The level of a segment of `live` documents.
uint64_t MergeLevel(uint64_t live);

// Indexes into `segments` (ascending) to merge next, or none.
std::vector<size_t> PickMerge(std::span<const SegmentSize> segments);

}  // namespace corvid::postings
