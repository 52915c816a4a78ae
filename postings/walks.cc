// Pinned walks (walks.h).
#include "postings/walks.h"

#include <algorithm>
#include <vector>

#include "postings/search/sort.h"
#include "postings/snapshot.h"

namespace corvid::postings {

std::string WalkFrom(const Snapshot& snap, const SearchRequest& req) {
  if (!req.search_after) return {};
  auto sort = search::ParseSort(*snap.def, req.sort);
  if (!sort.ok() || !search::SortsByField(*sort)) return {};
  search::Hit at{0, 0, 0, {}, {}, {}, {}};
  if (!search::ReadSearchAfter(*sort, req, at).ok()) return {};
  return search::WalkPosition(req, *sort, at);
}

bool LiveIn(const Snapshot& snap, std::string_view id) {
  for (const SegmentState& s : snap.segments) {
    const std::optional<uint32_t> d = s.segment->FindId(id);
    if (d && !roaring_bitmap_contains(s.deleted.get(), *d)) return true;
  }
  return false;
}

GoneSince::GoneSince(const Snapshot& pinned, const Snapshot& now) : now_(now) {
  now_deleted_.reserve(pinned.segments.size());
  for (const SegmentState& p : pinned.segments) {
    auto same = std::find_if(now.segments.begin(), now.segments.end(), [&](const SegmentState& s) { return s.id == p.id; });
    now_deleted_.push_back(same == now.segments.end() ? nullptr : same->deleted.get());
  }
}

bool GoneSince::operator()(uint32_t seg, uint32_t doc, std::string_view id) const {
  // Not deleted from its segment, which the index still has: untouched since.
  if (seg < now_deleted_.size() && now_deleted_[seg] != nullptr && !roaring_bitmap_contains(now_deleted_[seg], doc))
    return false;
  return !LiveIn(now_, id);  // deleted or rewritten since, or its segment merged away: found by id
}

std::shared_ptr<const Snapshot> WalkPins::Find(const std::string& position) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pins_.find(position);
  if (it == pins_.end() || Clock::now() - it->second->made > kWalkKeepAlive) return nullptr;
  return it->second->snap;
}

void WalkPins::Expire(Clock::time_point now, size_t keep, std::vector<std::shared_ptr<const Snapshot>>& dropped) {
  while (!order_.empty() && (order_.size() > keep || now - order_.front().made > kWalkKeepAlive)) {
    pins_.erase(order_.front().position);
    dropped.push_back(std::move(order_.front().snap));
    order_.pop_front();
  }
}

void WalkPins::Pin(std::string position, std::shared_ptr<const Snapshot> snap) {
  const Clock::time_point now = Clock::now();
  std::vector<std::shared_ptr<const Snapshot>> dropped;  // released after the lock
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = pins_.find(position); it != pins_.end()) {  // pinned again: now the newest
    dropped.push_back(std::move(it->second->snap));
    order_.splice(order_.end(), order_, it->second);
    order_.back().snap = std::move(snap);
    order_.back().made = now;
  } else {
    order_.push_back(Pinned{std::move(position), std::move(snap), now});
    pins_.emplace(order_.back().position, std::prev(order_.end()));
  }
  Expire(now, kMaxWalks, dropped);
}

void WalkPins::Clear() {
  std::vector<std::shared_ptr<const Snapshot>> dropped;
  std::lock_guard<std::mutex> l(mu_);
  Expire(Clock::time_point::max(), 0, dropped);
}

size_t WalkPins::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return order_.size();
}

}  // namespace corvid::postings
