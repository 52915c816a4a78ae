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

// Top-k by (score desc, id asc). With a searchAfter key (`after`), only
// entries strictly after the key are kept, so every threshold (the
// top-k's, a floor, a shared one) is that of entries that can be answered,
// and the pruning that compares bounds with it stays exact: a later page
// only lowers what can enter.
//
// An entry's id is read only when it is needed. Reading it for every
// document offered cost two random page reads per candidate where the ids
// were not resident (under a memory cap while a build streams through the
// page cache: up to 631 page faults for a one-word search, measured). And
// equal scores are common (a keyword field: tf 1 and a few lengths, so
// thousands of documents tie at the top score): comparing each newcomer
// with the worst kept entry by id read an id per tie (a search for one tag
// took 1,500-1,840 faults). So the kept entries are held as those scoring
// above the threshold T (fewer than k, by score alone) and the candidates
// scoring exactly T, in no order; which of those stay is decided by id
// only when they outgrow a bound or the answer is taken, a segment's many
// candidates by walking its id order (segment_format.h) until enough of
// them are met, which reads a few pages instead of one id each.
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

// Keeps in `ties` (entries of one score, none a key) the `keep` with the
// smallest ids, in no order (top_k.cc).
void KeepSmallestIds(std::vector<TopEntry>& ties, size_t keep);

class TopK {
 public:
  // Candidates at the threshold held beyond k before the surplus is cut.
  static constexpr size_t kMaxTies = 4096;
  // `after` (borrowed; null: none) must outlive the top-k.
  explicit TopK(size_t k, const TopEntry* after = nullptr) : k_(k), after_(after) {}
  size_t k() const { return k_; }
  const TopEntry* after() const { return after_; }
  // Returns true if the threshold may have changed.
  bool Offer(const TopEntry& e) {
    if (k_ == 0) return false;
    if (after_ != nullptr && !Better(*after_, e)) return false;  // at or before the key: an earlier page's
    if (full()) {
      if (e.score < tie_score_) return false;
      if (e.score == tie_score_) {
        ties_.push_back(e);
        if (ties_.size() >= kMaxTies + k_) KeepSmallestIds(ties_, k_ - above_.size());
        return false;
      }
    }
    PushAbove(e);
    if (above_.size() < k_) return false;
    ties_.clear();  // all of them (if any) below the k above them now
    SettleThreshold();
    return true;
  }
  // A document scoring below this cannot enter (none can when k is 0).
  double threshold() const {
    if (k_ == 0) return HUGE_VAL;
    const double own = std::max(floor_, full() ? tie_score_ : -HUGE_VAL);
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
    KeepSmallestIds(ties_, k_ - above_.size());  // above_ holds fewer than k (none when k is 0)
    std::vector<TopEntry> out = std::move(above_);
    out.insert(out.end(), ties_.begin(), ties_.end());
    std::sort(out.begin(), out.end(), Better);
    return out;
  }

 private:
  static bool Lower(const TopEntry& a, const TopEntry& b) { return a.score > b.score; }  // heap: lowest in front
  bool full() const { return above_.size() + ties_.size() >= k_; }
  void PushAbove(const TopEntry& e) {
    above_.push_back(e);
    std::push_heap(above_.begin(), above_.end(), Lower);
  }
  // k entries are above: the lowest score among them is the threshold, and
  // every entry with it becomes a candidate.
  void SettleThreshold() {
    tie_score_ = above_.front().score;
    while (!above_.empty() && above_.front().score == tie_score_) {
      std::pop_heap(above_.begin(), above_.end(), Lower);
      ties_.push_back(above_.back());
      above_.pop_back();
    }
    Publish(tie_score_);
  }
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
  // Invariants once full(): every entry of above_ scores more than
  // tie_score_ and there are fewer than k of them; every entry of ties_
  // scores tie_score_; the top-k is above_ and the k - above_.size() of
  // ties_ with the smallest ids.
  std::vector<TopEntry> above_;  // a heap by score, the lowest in front
  std::vector<TopEntry> ties_;
  double tie_score_ = -HUGE_VAL;
};

}  // namespace corvid::postings::search
