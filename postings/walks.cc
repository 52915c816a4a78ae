// Pinned walks (walks.h).
#include "postings/walks.h"

#include <algorithm>
#include <unordered_set>

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
  known_live_.resize(pinned.segments.size());  // made when a lookup by id first finds one live
}

bool GoneSince::operator()(uint32_t seg, uint32_t doc, std::string_view id) {
  if (seg >= now_deleted_.size()) return !LiveIn(now_, id);  // cannot happen: a hit of the pinned snapshot
  // Not deleted from its segment, which the index still has: untouched since.
  if (now_deleted_[seg] != nullptr && !roaring_bitmap_contains(now_deleted_[seg], doc)) return false;
  Bitmap& known = known_live_[seg];
  if (known && roaring_bitmap_contains(known.get(), doc)) return false;
  // Deleted or rewritten since, or its segment merged away: found by id.
  if (!LiveIn(now_, id)) return true;
  if (!known) known.reset(roaring_bitmap_create());
  roaring_bitmap_add(known.get(), doc);
  return false;
}

uint64_t WalkPins::generation() const {
  std::lock_guard<std::mutex> l(mu_);
  return generation_;
}

std::shared_ptr<const Snapshot> WalkPins::Find(std::string_view position) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pins_.find(KeyOf(position));
  if (it == pins_.end() || Clock::now() - it->second->made > kWalkKeepAlive) return nullptr;
  return it->second->snap;
}

void WalkPins::MoveTo(std::list<Pinned>::iterator it, Pool pool) {
  lists_[pool].splice(lists_[pool].end(), lists_[it->pool], it);
  it->pool = pool;
}

void WalkPins::Expire(Clock::time_point now, std::vector<std::shared_ptr<const Snapshot>>& dropped) {
  for (Pool pool : {kFirst, kWalk}) {
    std::list<Pinned>& list = lists_[pool];
    const size_t cap = pool == kWalk ? kMaxWalks : kMaxFirstPages;
    while (!list.empty() && (list.size() > cap || now - list.front().made > kWalkKeepAlive)) {
      pins_.erase(list.front().key);
      dropped.push_back(std::move(list.front().snap));
      list.pop_front();
    }
  }
}

void WalkPins::Pin(std::string_view position, std::shared_ptr<const Snapshot> snap, uint64_t generation, bool walking,
                   std::string_view from) {
  const Clock::time_point now = Clock::now();
  const Key key = KeyOf(position);
  std::vector<std::shared_ptr<const Snapshot>> dropped;  // released after the lock
  std::lock_guard<std::mutex> l(mu_);
  if (generation != generation_) return;  // read before a Clear: the walk does not go on over it
  if (!from.empty())
    if (auto it = pins_.find(KeyOf(from)); it != pins_.end() && !(it->second->key == key)) MoveTo(it->second, kFirst);
  const Pool pool = walking ? kWalk : kFirst;
  if (auto it = pins_.find(key); it != pins_.end()) {  // pinned again: now the newest
    dropped.push_back(std::move(it->second->snap));
    it->second->snap = std::move(snap);
    it->second->made = now;
    MoveTo(it->second, pool);
  } else {
    lists_[pool].push_back(Pinned{key, std::move(snap), now, pool});
    pins_.emplace(key, std::prev(lists_[pool].end()));
  }
  Expire(now, dropped);
}

void WalkPins::Clear() {
  std::vector<std::shared_ptr<const Snapshot>> dropped;
  std::lock_guard<std::mutex> l(mu_);
  ++generation_;
  for (std::list<Pinned>& list : lists_)
    for (Pinned& p : list) dropped.push_back(std::move(p.snap));
  lists_[kFirst].clear();
  lists_[kWalk].clear();
  pins_.clear();
}

size_t WalkPins::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return pins_.size();
}

void WalkPins::Held(const Snapshot& current, uint64_t& disk, uint64_t& memory) const {
  disk = memory = 0;
  std::lock_guard<std::mutex> l(mu_);
  if (pins_.empty()) return;  // the common case, after every batch: nothing to count
  std::unordered_set<const void*> counted;  // segments and bitmaps, each once
  for (const SegmentState& s : current.segments) {
    counted.insert(s.segment.get());
    counted.insert(s.deleted.get());
  }
  std::unordered_set<const Snapshot*> seen;
  for (const std::list<Pinned>& list : lists_)
    for (const Pinned& p : list) {
      if (!seen.insert(p.snap.get()).second) continue;
      for (const SegmentState& s : p.snap->segments) {
        if (counted.insert(s.segment.get()).second) {
          disk += s.segment->file_bytes();
          memory += s.segment->memory_bytes();
        }
        if (counted.insert(s.deleted.get()).second) memory += roaring_bitmap_size_in_bytes(s.deleted.get());
      }
    }
}

}  // namespace corvid::postings
