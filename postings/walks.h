// Field-sorted searchAfter walks read the index as their first page read
// it (API.md "Deep paging": with a field sort a walk is exact under
// concurrent writes, no document twice and none that matched throughout
// skipped). A write between two pages can move a document's sort value
// past the walk's key, either way: read from the index as it is now, the
// walk would return it twice or skip it. So each page of a field sort
// pins the snapshot it read under its last hit's position (the
// request's q, filter, sort and op, then the key), and a page whose
// searchAfter names a pinned position reads that snapshot again: every
// document keeps the place it had when the walk began, documents added
// since are not in it (they did not match throughout), and documents
// deleted since are dropped from its pages (RunSearch checks each hit it
// returns against the snapshot of now). `total` is the pinned snapshot's.
//
// A pin lasts kWalkKeepAlive after the page that made it, and an index
// keeps at most kMaxWalks (the least recently made go first): a walk that
// pauses longer, or a key a client writes by hand, a restart or another
// node, read the index as it is now, as before (docs/http-choices.md).
// A pinned snapshot keeps its segments mapped, also those a merge has
// replaced since (their files are unlinked, their space comes back when
// the pin goes).
#pragma once

#include <roaring/roaring.h>

#include <chrono>
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "postings/search_index.h"

namespace corvid::postings {

struct Snapshot;

inline constexpr std::chrono::seconds kWalkKeepAlive{300};
inline constexpr size_t kMaxWalks = 1024;

// What RunSearch is told and tells about a walk.
struct SearchWalk {
  // Set when the search reads a pinned snapshot older than the index now:
  // hits whose document is not live in `now` are left out.
  const Snapshot* now = nullptr;
  // Out: the position of the answer's last hit, when a walk may go on from
  // it (a field sort); empty otherwise.
  std::string next;
};

// The position `req`'s searchAfter names in its walk, as RunSearch writes
// SearchWalk::next; empty when `req` has no searchAfter, is not sorted by
// a field, or its key does not read (RunSearch then says why).
std::string WalkFrom(const Snapshot& snap, const SearchRequest& req);

// Whether `snap` holds a live document with this id.
bool LiveIn(const Snapshot& snap, std::string_view id);

// Which hits of a pinned snapshot are of documents gone from `now`
// (deleted since; a rewritten document is live). Holds pointers into both.
class GoneSince {
 public:
  GoneSince(const Snapshot& pinned, const Snapshot& now);
  // Document `doc` of the pinned snapshot's segment `seg`, id `id`.
  bool operator()(uint32_t seg, uint32_t doc, std::string_view id) const;

 private:
  const Snapshot& now_;
  // Per pinned segment: its deleted documents now, if `now` still has it.
  std::vector<const roaring_bitmap_t*> now_deleted_;
};

// One index's pinned walks. Thread-safe.
class WalkPins {
 public:
  // The snapshot pinned under `position`, or nullptr (none, or expired).
  std::shared_ptr<const Snapshot> Find(const std::string& position) const;
  void Pin(std::string position, std::shared_ptr<const Snapshot> snap);
  // Drops every pin (the index was cleared: no walk goes on over it).
  void Clear();
  size_t size() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Pinned {
    std::string position;
    std::shared_ptr<const Snapshot> snap;
    Clock::time_point made;
  };
  // Drops the pins past their time, and the oldest beyond `keep`, into
  // `dropped` (released after the lock: a last reference unmaps). Requires mu_.
  void Expire(Clock::time_point now, size_t keep, std::vector<std::shared_ptr<const Snapshot>>& dropped);
  mutable std::mutex mu_;
  // Guarded by mu_: the pins, oldest first, and each one's place by position.
  std::list<Pinned> order_;
  std::unordered_map<std::string_view, std::list<Pinned>::iterator> pins_;
};

}  // namespace corvid::postings
