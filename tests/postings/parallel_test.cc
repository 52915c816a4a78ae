#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "postings/parallel.h"

using corvid::postings::ParallelFor;

namespace {

// Runs ParallelFor(n) and returns how many times each piece ran.
std::vector<int> RunCounts(size_t n) {
  std::vector<std::atomic<int>> calls(n);
  auto piece = [&](size_t i) { calls[i].fetch_add(1); };
  ParallelFor(n, piece);
  std::vector<int> out;
  for (auto& c : calls) out.push_back(c.load());
  return out;
}

}  // namespace

TEST_CASE("ParallelFor runs every piece exactly once", "[postings][parallel]") {
  for (size_t n : {0, 1, 2, 3, 17, 300, 70000}) {
    INFO("n = " << n);
    CHECK(RunCounts(n) == std::vector<int>(n, 1));
  }
}

TEST_CASE("ParallelFor returns only after every piece has finished", "[postings][parallel]") {
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> finished{0};
    auto piece = [&](size_t i) {
      if (i % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(50));
      finished.fetch_add(1);
    };
    ParallelFor(4, piece);
    REQUIRE(finished.load() == 4);
  }
}

TEST_CASE("ParallelFor runs pieces on another thread when a core is free", "[postings][parallel]") {
  if (std::thread::hardware_concurrency() < 2) {
    WARN("one core: the caller runs every piece; nothing to check");
    return;
  }
  // Piece 0 waits for piece 1 to start: that can only happen if another
  // thread runs piece 1 while the caller runs piece 0 (or the reverse).
  std::atomic<bool> started[2] = {false, false};
  std::atomic<bool> overlapped{false};
  auto piece = [&](size_t i) {
    started[i].store(true);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!started[1 - i].load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    if (started[1 - i].load()) overlapped.store(true);
  };
  ParallelFor(2, piece);
  CHECK(overlapped.load());
}

TEST_CASE("ParallelFor from many threads at once: each caller's pieces, once each", "[postings][parallel]") {
  // Callers that find the helpers busy run their pieces themselves; none
  // may run another caller's piece or lose one of its own.
  constexpr int kCallers = 4, kRounds = 300;
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int r = 0; r < kRounds; ++r) {
        const size_t n = 1 + static_cast<size_t>((c + r) % 5);
        std::vector<std::atomic<int>> calls(n);
        auto piece = [&](size_t i) { calls[i].fetch_add(1); };
        ParallelFor(n, piece);
        for (auto& x : calls)
          if (x.load() != 1) wrong.fetch_add(1);
      }
    });
  }
  for (auto& t : callers) t.join();
  CHECK(wrong.load() == 0);
}

TEST_CASE("ParallelFor inside a piece runs all its pieces, on the piece's thread", "[postings][parallel]") {
  // A segment's piece may verify a phrase's candidates with ParallelFor:
  // the inner pieces must all run, and run where their caller is (the
  // helpers are busy with the outer call's pieces, or may be). This pins
  // the contract; it does not see the running_pieces guard itself, whose
  // only effect is that the caller thread no longer try_locks a mutex it
  // holds (which glibc refuses, as the guard does: checked by removing
  // the guard, with and without TSan).
  for (int round = 0; round < 50; ++round) {
    std::vector<std::atomic<int>> calls(4 * 8);
    std::atomic<int> elsewhere{0};
    auto outer = [&](size_t i) {
      const std::thread::id me = std::this_thread::get_id();
      auto inner = [&](size_t j) {
        if (std::this_thread::get_id() != me) elsewhere.fetch_add(1);
        calls[i * 8 + j].fetch_add(1);
      };
      ParallelFor(8, inner);
    };
    ParallelFor(4, outer);
    for (auto& c : calls) REQUIRE(c.load() == 1);
    REQUIRE(elsewhere.load() == 0);
  }
}

TEST_CASE("ParallelFor: a piece that throws stops no other piece; its exception reaches the caller after all",
          "[postings][parallel]") {
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> finished{0};
    const size_t thrower = size_t(round) % 6;
    auto piece = [&](size_t i) {
      if (i % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(50));
      finished.fetch_add(1);
      if (i == thrower) throw std::runtime_error("piece " + std::to_string(i));
    };
    std::string caught;
    try {
      ParallelFor(6, piece);
    } catch (const std::runtime_error& e) {
      caught = e.what();
    }
    // Every piece ran, and only then did the caller see the exception: the
    // pieces use the caller's frame, which unwinding would have freed.
    REQUIRE(finished.load() == 6);
    REQUIRE(caught == "piece " + std::to_string(thrower));
  }
  // The helpers still serve queries afterwards.
  CHECK(RunCounts(100) == std::vector<int>(100, 1));
}

TEST_CASE("a process exits right after its first ParallelFor", "[postings][parallel]") {
  // The helper thread may first run after exit has begun; it used to take
  // the destructor's wake-up for one already seen and sleep through it,
  // and the process never exited.
  for (int round = 0; round < 40; ++round) {
    INFO("round " << round);
    pid_t pid = 0;
    char* argv[] = {const_cast<char*>(CORVID_PARALLEL_EXIT_PROBE), nullptr};
    REQUIRE(::posix_spawn(&pid, CORVID_PARALLEL_EXIT_PROBE, nullptr, nullptr, argv, environ) == 0);
    int status = 0;
    pid_t done = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (done == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("the process did not exit within 20 s");
    }
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}
