// The process's memory budget (`corvid serve --memory-budget`): what Corvid
// may hold beyond the page cache. Set once at start-up; components size
// their buffers from it (index batches, builders kept between batches) and
// index workers take their batches' memory from IndexingMemory, so that
// indexing slows down rather than exceed it. docs/memory.md has the split.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

namespace corvid {

// The memory limit of the cgroup this process runs in (v2 memory.max, or
// v1 memory.limit_in_bytes), or 0 when there is none.
inline uint64_t CgroupMemoryLimit() {
  auto read = [](const char* path) -> uint64_t {
    std::ifstream f(path);
    std::string s;
    if (!(f >> s) || s == "max") return 0;
    try {
      return std::stoull(s);
    } catch (...) {
      return 0;
    }
  };
  // The process's own cgroup: /proc/self/cgroup names it per hierarchy.
  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  uint64_t limit = 0;
  while (std::getline(cg, line)) {
    // "hierarchy-id:controllers:path"; v2 has "0::path".
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    // The cgroup and its ancestors: the smallest limit holds.
    for (std::string p = path;;) {
      uint64_t l = 0;
      if (controllers.find("memory") != std::string::npos)
        l = read(("/sys/fs/cgroup/memory" + p + "/memory.limit_in_bytes").c_str());
      else if (controllers.empty())
        l = read(("/sys/fs/cgroup" + p + "/memory.max").c_str());
      if (l > 0 && (limit == 0 || l < limit)) limit = l;
      if (p.empty() || p == "/") break;
      const size_t slash = p.rfind('/');
      p = slash == 0 || slash == std::string::npos ? "/" : p.substr(0, slash);
    }
  }
  const uint64_t ram = uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE));
  return limit >= ram ? 0 : limit;  // v1 reports "unlimited" as a huge number
}

// Half the cgroup's limit when there is one, else a quarter of RAM (API.md).
inline uint64_t DefaultMemoryBudget() {
  const uint64_t limit = CgroupMemoryLimit();
  if (limit > 0) return limit / 2;
  return uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE)) / 4;
}

// The process's anonymous resident memory (RssAnon), or 0 if unknown.
inline uint64_t ProcessAnonBytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  uint64_t kb = 0;
  while (f >> key) {
    if (key == "RssAnon:") {
      f >> kb;
      return kb * 1024;
    }
    f.ignore(4096, '\n');
  }
  return 0;
}

namespace memory_budget_detail {
inline std::atomic<uint64_t> budget{0};
}

// The budget in bytes (0 before SetMemoryBudget: unbounded).
inline uint64_t MemoryBudget() { return memory_budget_detail::budget.load(std::memory_order_relaxed); }
inline void SetMemoryBudget(uint64_t bytes) { memory_budget_detail::budget.store(bytes, std::memory_order_relaxed); }

// A share of the budget: budget / divisor, within [floor, cap]; `cap` when
// no budget is set.
inline uint64_t BudgetShare(uint64_t divisor, uint64_t floor, uint64_t cap) {
  const uint64_t b = MemoryBudget();
  if (b == 0) return cap;
  return std::clamp<uint64_t>(b / divisor, floor, cap);
}

// The index workers' share of the budget (half of it): each batch takes
// what it may use before reading the store and gives it back when applied.
// A batch that would overdraw the pool waits for others to finish, unless
// nothing is taken (one batch always runs). Thread-safe.
class IndexingMemory {
 public:
  static IndexingMemory& Instance() {
    static IndexingMemory m;
    return m;
  }
  class Grant {
   public:
    Grant() = default;
    Grant(Grant&& o) noexcept : bytes_(o.bytes_) { o.bytes_ = 0; }
    Grant& operator=(Grant&& o) noexcept {
      std::swap(bytes_, o.bytes_);
      return *this;
    }
    ~Grant() {
      if (bytes_ > 0) Instance().Release(bytes_);
    }
    uint64_t bytes() const { return bytes_; }

   private:
    friend class IndexingMemory;
    explicit Grant(uint64_t b) : bytes_(b) {}
    uint64_t bytes_ = 0;
  };
  // Takes `bytes` (clamped to the pool) when it fits; gives up and returns
  // an empty grant once `give_up()` is true (checked every 100 ms).
  template <typename GiveUp>
  Grant Take(uint64_t bytes, GiveUp&& give_up) {
    const uint64_t pool = Pool();
    if (pool == 0) return Grant(0);
    bytes = std::min(bytes, pool);
    std::unique_lock l(mu_);
    while (taken_ > 0 && taken_ + bytes > pool) {
      if (give_up()) return Grant(0);
      cv_.wait_for(l, std::chrono::milliseconds(100));
    }
    taken_ += bytes;
    return Grant(bytes);
  }
  uint64_t taken() const {
    std::lock_guard l(mu_);
    return taken_;
  }
  static uint64_t Pool() { return MemoryBudget() / 2; }

 private:
  void Release(uint64_t bytes) {
    {
      std::lock_guard l(mu_);
      taken_ -= std::min(taken_, bytes);
    }
    cv_.notify_all();
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t taken_ = 0;
};

}  // namespace corvid
