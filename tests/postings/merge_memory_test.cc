// A merge's memory does not grow with its segments (issue 26): merging
// segments whose files together are several times the allowance given
// here, the process's anonymous memory (RssAnon: the mapped inputs and the
// page cache of the output are file pages) rises by less than that
// allowance. The in-memory merge this replaced held about twice the merged
// segment.
#include <catch2/catch.hpp>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include "common/memory_budget.h"
#include "postings/segment.h"
#include "postings/segment_merger.h"
#include "tests/postings/test_util.h"

namespace corvid::postings {
namespace {

using testing::TempDir;

// A segment of `docs` documents of ~`tokens` tokens over a Zipf-like
// vocabulary of 200k words, two text fields and a number.
std::shared_ptr<const Segment> MakeSegment(const TempDir& dir, const std::string& name, uint32_t docs, uint32_t tokens,
                                           uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  auto word = [&] {
    const auto rank = static_cast<uint32_t>(std::pow(200000.0, u(rng)));  // log-uniform: a few words are very common
    return "w" + std::to_string(rank);
  };
  std::string image;
  {
    SegmentBuilder b(2, 1);
    for (uint32_t d = 0; d < docs; ++d) {
      const uint32_t doc = b.AddDoc(name + "/" + std::to_string(d));
      for (uint32_t f = 0; f < 2; ++f) {
        const uint32_t n = f == 0 ? 8 : tokens;
        for (uint32_t p = 0; p < n; ++p) b.AddToken(f, doc, word(), p);
        b.SetLength(f, doc, n);
      }
      b.AddNumber(0, doc, Number::Of(int64_t{d} * 7919 % 100003));
    }
    b.Encode(99, image);
  }
  REQUIRE(WriteFileAtomic(dir.path(), name, image).ok());
  auto seg = Segment::Open(dir.path() + "/" + name, 99, 2, 1);
  REQUIRE(seg.ok());
  return *seg;
}

TEST_CASE("a merge holds a bounded buffer, not the merged segment", "[merger][memory]") {
  TempDir dir;
  std::vector<std::shared_ptr<const Segment>> segs;
  uint64_t input_bytes = 0;
  if (std::getenv("CORVID_SKIP_RSS") != nullptr) return;  // sanitizer allocators keep what is freed
  for (uint32_t i = 0; i < 10; ++i) {
    segs.push_back(MakeSegment(dir, "in-" + std::to_string(i), 8000, 300, 100 + i));
    input_bytes += segs.back()->file_bytes();
  }
  std::vector<Bitmap> deleted;
  std::vector<MergeInput> inputs;
  for (size_t i = 0; i < segs.size(); ++i) {
    deleted.push_back(NewBitmap());
    if (i % 2 == 1)
      for (uint32_t d = 0; d < segs[i]->doc_count(); d += 5) roaring_bitmap_add(deleted.back().get(), d);
    inputs.push_back(MergeInput{segs[i].get(), deleted.back().get()});
  }
  ::malloc_trim(0);
  const uint64_t before = ProcessAnonBytes();
  REQUIRE(before > 0);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> peak{before};
  std::thread sampler([&] {
    while (!done.load()) {
      peak = std::max(peak.load(), ProcessAnonBytes());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::atomic<bool> cancel{false};
  auto merged = MergeSegments(inputs, dir.path(), "out", 99, 2, 1, cancel);
  done = true;
  sampler.join();
  REQUIRE(merged.ok());
  auto out = Segment::Open(dir.path() + "/out", 99, 2, 1);
  REQUIRE(out.ok());
  CHECK((*out)->doc_count() == *merged);
  const uint64_t grew = peak.load() - before;
  // The merger's buffers, a chunk of pair occurrences, and this test's
  // data: dense pair tables (a few dozen words in every document), whose
  // bitmaps the merger holds until it writes the section.
  const uint64_t allowance = uint64_t{24} << 20;
  INFO("inputs " << input_bytes / 1048576 << " MiB, merged " << (*out)->file_bytes() / 1048576
                 << " MiB, anonymous memory grew " << grew / 1048576.0 << " MiB");
  CHECK((*out)->file_bytes() > 3 * allowance);  // the merged segment is far larger than the allowance
  CHECK(grew < allowance);
}

}  // namespace
}  // namespace corvid::postings
