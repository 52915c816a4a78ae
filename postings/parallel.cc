#include "postings/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <utility>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CORVID_PAUSE() _mm_pause()
#else
#define CORVID_PAUSE() ((void)0)
#endif

namespace corvid::postings {
namespace {

// After its last piece a helper polls for this long before it sleeps: a
// query that follows soon after finds it awake (a futex wake costs tens of
// microseconds, a whole piece of a fast query).
constexpr auto kSpin = std::chrono::microseconds(200);

// Set on a thread while it runs pieces (the helpers always): a piece that
// calls ParallelFor runs its own pieces itself, rather than wait for
// helpers that may be busy with its caller's pieces, or try the lock its
// own thread holds.
thread_local bool running_pieces = false;

class Helpers {
 public:
  Helpers() {
    const unsigned cores = std::thread::hardware_concurrency();
    const unsigned n = cores > 1 ? std::min(cores - 1, 7u) : 0;
    for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~Helpers() {
    {
      std::lock_guard lock(mu_);
      stop_.store(true);
      Publish(0);  // wakes the sleepers, which then see stop_
    }
    for (auto& t : threads_) t.join();
  }

  // A piece that throws does not stop the others (they may be running on
  // helpers and use the caller's frame): every piece is waited for, and
  // then the first exception is rethrown on the caller's thread, where the
  // request's boundary answers it (common/faults.h).
  void Run(size_t n, void (*fn)(void*, size_t), void* ctx) {
    auto serially = [&] {
      for (size_t i = 0; i < n; ++i) fn(ctx, i);
    };
    if (threads_.empty() || n < 2 || n > 0xffff || running_pieces) return serially();
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return serially();
    running_pieces = true;
    struct Reset {
      ~Reset() { running_pieces = false; }
    } reset;
    fn_ = fn;
    ctx_ = ctx;
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t epoch = Publish(n);
    uint32_t mine = 0;
    for (size_t i; Claim(epoch, &i); ++mine) RunPiece(i);
    // Pieces a helper claimed are running: wait for them.
    for (uint32_t spins = 0; done_.load(std::memory_order_acquire) + mine < n; ++spins) {
      if (spins < 4096)
        CORVID_PAUSE();
      else
        std::this_thread::yield();
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  // word_: epoch (32 bits) | pieces (16) | next unclaimed piece (16). A
  // claim is one CAS on the whole word, so a helper that still holds an
  // old epoch can never claim a piece of a newer query.
  static uint64_t Epoch(uint64_t w) { return w >> 32; }

  // Starts a new epoch of n pieces (mu_ held) and wakes sleeping helpers.
  uint64_t Publish(size_t n) {
    const uint64_t epoch = Epoch(word_.load(std::memory_order_relaxed)) + 1;
    word_.store(epoch << 32 | uint64_t{n} << 16, std::memory_order_seq_cst);
    std::lock_guard lock(sleep_mu_);
    if (sleepers_ > 0) sleep_cv_.notify_all();
    return epoch;
  }

  void RunPiece(size_t i) noexcept {
    try {
      fn_(ctx_, i);
    } catch (...) {
      std::lock_guard lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
  }

  bool Claim(uint64_t epoch, size_t* i) {
    uint64_t w = word_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t next = w & 0xffff, n = (w >> 16) & 0xffff;
      if (Epoch(w) != epoch || next >= n) return false;
      if (word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        *i = next;
        return true;
      }
    }
  }

  void Loop() {
    running_pieces = true;
    uint64_t seen = Epoch(word_.load(std::memory_order_acquire));
    for (;;) {
      uint64_t w = word_.load(std::memory_order_acquire);
      if (Epoch(w) == seen) {
        const auto until = std::chrono::steady_clock::now() + kSpin;
        for (uint32_t spins = 1; Epoch(w) == seen; ++spins) {
          CORVID_PAUSE();
          w = word_.load(std::memory_order_acquire);
          if (spins % 64 == 0 && std::chrono::steady_clock::now() > until) break;
        }
        if (Epoch(w) == seen) {
          // Asleep until a new epoch, or the end: a helper that first ran
          // after the destructor's epoch took that one as already seen and
          // slept through it, and the process never exited (one shutdown
          // in about 35 right after a first query, under load).
          std::unique_lock lock(sleep_mu_);
          ++sleepers_;
          sleep_cv_.wait(lock, [&] { return stop_.load() || Epoch(word_.load(std::memory_order_acquire)) != seen; });
          --sleepers_;
          if (stop_.load()) return;
          continue;
        }
      }
      if (stop_.load()) return;
      seen = Epoch(w);
      // fn_ and ctx_ are read only after a claim: the query that owns the
      // claimed piece is waiting for it, so they are its own.
      for (size_t i; Claim(seen, &i);) {
        RunPiece(i);
        done_.fetch_add(1, std::memory_order_release);
      }
    }
  }

  std::mutex mu_;  // held by the one caller whose pieces the helpers serve
  std::atomic<uint64_t> word_{0};
  std::atomic<uint32_t> done_{0};      // pieces the helpers finished this epoch
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;  // helpers asleep wait here for a new epoch
  int sleepers_ = 0;                  // guarded by sleep_mu_
  std::atomic<bool> stop_{false};
  void (*fn_)(void*, size_t) = nullptr;
  void* ctx_ = nullptr;
  std::mutex error_mu_;
  std::exception_ptr error_;  // the first piece's exception this epoch; guarded by error_mu_
  std::vector<std::thread> threads_;
};

}  // namespace

void ParallelFor(size_t n, void (*fn)(void* ctx, size_t i), void* ctx) {
  static Helpers helpers;
  helpers.Run(n, fn, ctx);
}

}  // namespace corvid::postings
