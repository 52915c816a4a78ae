// RankCursor (postings/roaring_layout.h) against roaring_bitmap_rank and
// roaring_bitmap_contains, on bitmaps with array, bitset and run containers
// across several 65536-document chunks, heap-allocated and frozen views.
#include "postings/roaring_layout.h"

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "postings/segment.h"

namespace corvid::postings {
namespace {

// Checks Find for an increasing sequence of probes, members or not; returns
// the first probe whose answer is wrong, or UINT32_MAX (one REQUIRE per
// sequence: Catch2 assertions per probe would dominate the test's time).
uint32_t FirstWrong(const roaring_bitmap_t* bm, const std::vector<uint32_t>& probes) {
  RankCursor cursor(bm);
  for (uint32_t d : probes) {
    uint32_t rank = 12345;
    const bool found = cursor.Find(d, &rank);
    if (found != roaring_bitmap_contains(bm, d)) return d;
    if (found ? rank != roaring_bitmap_rank(bm, d) - 1 : rank != 12345u) return d;  // rank(): members <= d
  }
  return UINT32_MAX;
}

TEST_CASE("RankCursor ranks equal roaring_bitmap_rank for every container kind", "[postings]") {
  std::mt19937 rng(7);
  for (int round = 0; round < 120; ++round) {
    Bitmap bm = NewBitmap();
    const int chunks = 1 + round % 4;
    for (int c = 0; c < chunks; ++c) {
      if ((round + c) % 5 == 4) continue;  // a missing chunk
      const uint32_t base = static_cast<uint32_t>(c) * 65536;
      switch ((round + c) % 4) {
        case 0:  // sparse: array container
          for (int i = 0; i < 200; ++i) roaring_bitmap_add(bm.get(), base + rng() % 65536);
          break;
        case 1:  // dense: bitset container
          for (int i = 0; i < 30000; ++i) roaring_bitmap_add(bm.get(), base + rng() % 65536);
          break;
        case 2:  // runs
          for (int i = 0; i < 20; ++i) {
            const uint32_t start = rng() % 65000;
            roaring_bitmap_add_range(bm.get(), base + start, base + start + 1 + rng() % 500);
          }
          break;
        default:  // full chunk
          roaring_bitmap_add_range(bm.get(), base, base + 65536);
      }
    }
    if (round % 2 == 0) roaring_bitmap_run_optimize(bm.get());
    // Probes: a random increasing mix of members and non-members, repeats included.
    std::vector<uint32_t> probes;
    const uint32_t end = static_cast<uint32_t>(chunks) * 65536 + 10;
    const uint32_t step = 1 + rng() % (round % 3 == 0 ? 3 : 3000);
    for (uint32_t d = rng() % step; d < end; d += 1 + rng() % step) {
      probes.push_back(d);
      if (rng() % 10 == 0) probes.push_back(d);
    }
    INFO("round " << round);
    REQUIRE(FirstWrong(bm.get(), probes) == UINT32_MAX);
    std::vector<uint32_t> members(roaring_bitmap_get_cardinality(bm.get()));
    roaring_bitmap_to_uint32_array(bm.get(), members.data());
    std::erase_if(members, [&](uint32_t) { return rng() % 8 != 0; });  // a sample: rank() is linear
    REQUIRE(FirstWrong(bm.get(), members) == UINT32_MAX);
    // A frozen view, as segments serve postings.
    std::string buf(roaring_bitmap_frozen_size_in_bytes(bm.get()) + 32, '\0');
    char* aligned = buf.data() + (32 - reinterpret_cast<uintptr_t>(buf.data()) % 32) % 32;
    roaring_bitmap_frozen_serialize(bm.get(), aligned);
    ConstBitmap view(roaring_bitmap_frozen_view(aligned, roaring_bitmap_frozen_size_in_bytes(bm.get())));
    REQUIRE(view != nullptr);
    REQUIRE(FirstWrong(view.get(), probes) == UINT32_MAX);
    REQUIRE(FirstWrong(view.get(), members) == UINT32_MAX);
  }
  Bitmap empty = NewBitmap();
  REQUIRE(FirstWrong(empty.get(), {0, 1, 70000}) == UINT32_MAX);
}

}  // namespace
}  // namespace corvid::postings
