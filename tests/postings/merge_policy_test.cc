// The tiered merge policy: which segments merge next.
#include <catch2/catch.hpp>

#include "postings/merge_policy.h"

namespace corvid::postings {
namespace {

std::vector<SegmentSize> Live(std::initializer_list<uint64_t> live) {
  std::vector<SegmentSize> out;
  for (uint64_t l : live) out.push_back(SegmentSize{l, 0});
  return out;
}

TEST_CASE("a level merges once it holds kMergeFactor segments, the lowest level first", "[merger]") {
  CHECK(MergeLevel(1) == 0);
  CHECK(MergeLevel(9999) == 0);
  CHECK(MergeLevel(10000) == 1);
  CHECK(MergeLevel(100000) == 2);
  CHECK(PickMerge(Live({8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192})).empty());
  CHECK(PickMerge(Live({8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192})) ==
        std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  // Level 1 (ten of ~80k) and level 0 (ten of 5k) both full: level 0 first.
  auto two = Live({80000, 80000, 80000, 80000, 80000, 80000, 80000, 80000, 80000, 80000});
  for (int i = 0; i < 10; ++i) two.push_back(SegmentSize{5000, 0});
  CHECK(PickMerge(two) == std::vector<size_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  // Twelve at a level: the ten smallest, in index order.
  auto twelve = Live({9000, 1000, 9000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 1500, 2500});
  CHECK(PickMerge(twelve) == std::vector<size_t>{1, 3, 4, 5, 6, 7, 8, 9, 10, 11});
}

TEST_CASE("a segment mostly deleted is rewritten alone, before any level", "[merger]") {
  auto s = Live({8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192});
  s.push_back(SegmentSize{1000, 301});  // 30.1% deleted
  CHECK(PickMerge(s) == std::vector<size_t>{10});
  s.back().deleted = 300;  // exactly 30%: not yet
  CHECK(PickMerge(s).size() == 10);
}

}  // namespace
}  // namespace corvid::postings
