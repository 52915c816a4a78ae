// A process that runs one ParallelFor and exits at once: the helper
// thread may first run after the exit has begun (parallel_test.cc runs it).
#include <cstddef>

#include "postings/parallel.h"

int main() {
  auto piece = [](size_t) {};
  corvid::postings::ParallelFor(2, piece);
  return 0;
}
