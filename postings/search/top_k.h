// The top-k every scoring strategy offers its documents to.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "postings/segment.h"

namespace corvid::postings::search {

// Top-k by (score desc, id asc); the heap's front is the worst kept entry.
// With a searchAfter key (`after`), only entries strictly after the key are
// kept, so every threshold (the heap's, a floor, a shared one) is that of
// entries that can be answered, and the pruning that compares bounds with
// it stays exact: a later page only lowers what can enter.
//
// An entry's id is read only when it is needed: to order two equal scores,
// and for the hits kept. Reading it for every document offered cost two
// random page reads per candidate where the ids were not resident (under
// a memory cap while a build streams through the page cache: up to 631
// page faults for a one-word search, measured).
struct TopEntry {
  double score;
  uint32_t seg, doc;
  const Segment* segment;  // where the id is read; null: `key` is the id
  std::string_view key = {};  // a searchAfter key's id
  std::string_view id() const { return segment != nullptr ? segment->id(doc) : key; }
};
inline bool Better(const TopEntry& a, const TopEntry& b) {
  return a.score != b.score ? a.score > b.score : a.id() < b.id();
}

class TopK {
 public:
  // `after` (borrowed; null: none) must outlive the top-k.
  explicit TopK(size_t k, const TopEntry* after = nullptr) : k_(k), after_(after) {}
  size_t k() const { return k_; }
  const TopEntry* after() const { return after_; }
  // Returns true if the threshold may have changed.
  bool Offer(const TopEntry& e) {
    if (k_ == 0) return false;
    if (after_ != nullptr && !Better(*after_, e)) return false;  // at or before the key: an earlier page's
    if (heap_.size() < k_) {
      heap_.push_back(e);
      std::push_heap(heap_.begin(), heap_.end(), Better);
      if (heap_.size() < k_) return false;
      Publish(heap_.front().score);
      return true;
    }
    if (!Better(e, heap_.front())) return false;
    std::pop_heap(heap_.begin(), heap_.end(), Better);
    heap_.back() = e;
    std::push_heap(heap_.begin(), heap_.end(), Better);
    Publish(heap_.front().score);
    return true;
  }
  // A document scoring below this cannot enter (none can when k is 0).
  double threshold() const {
    if (k_ == 0) return HUGE_VAL;
    const double own = std::max(floor_, heap_.size() < k_ ? -HUGE_VAL : heap_.front().score);
    return shared_ == nullptr ? own : std::max(own, shared_->load(std::memory_order_relaxed));
  }
  // For a caller that knows k documents scoring at least f are yet to be
  // offered: none scoring below f can enter.
  void RaiseFloor(double f) {
    floor_ = std::max(floor_, f);
    Publish(f);
  }
  // For top-ks of the same k over disjoint documents, merged after (a
  // search's segments in parallel): each raises `floor` to its threshold
  // and reads theirs, since a document below any of them cannot enter the
  // merged top-k either.
  void Share(std::atomic<double>* floor) { shared_ = floor; }
  std::vector<TopEntry> Sorted() && {
    std::sort(heap_.begin(), heap_.end(), Better);
    return std::move(heap_);
  }

 private:
  void Publish(double t) {
    if (shared_ == nullptr) return;
    double seen = shared_->load(std::memory_order_relaxed);
    while (t > seen && !shared_->compare_exchange_weak(seen, t, std::memory_order_relaxed)) {
    }
  }
  size_t k_;
  const TopEntry* after_;
  double floor_ = -HUGE_VAL;
  std::atomic<double>* shared_ = nullptr;
  std::vector<TopEntry> heap_;
};

}  // namespace corvid::postings::search
