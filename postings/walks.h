// Field-sorted searchAfter walks read the index as their first page read
// it (API.md "Deep paging": with a field sort a walk is exact under
// concurrent writes, no document twice and none that matched throughout
// skipped). A write between two pages can move a document's sort value
// past the walk's key, either way: read from the index as it is now, the
// walk would return it twice or skip it. So each page of a field sort
// pins the snapshot it read under its last hit's position (the request's
// q, filter, op and sort keys, then the key: WalkPosition), and a page
// whose searchAfter names a pinned position reads that snapshot again.
// Every document keeps the place it had when the walk began; documents
// added since are not in it (they did not match throughout); documents
// deleted since are left out of its pages (GoneSince); `total` and facet
// counts are the walk's moment's.
//
// The key is the walk's only identity (API.md fixes its shape): two walks
// of the same query whose pages end on the same hit share a pin, the one
// pinned last. Pins are kept in two pools, oldest first: first pages (a
// dashboard's sorted queries, which nobody may continue) and the pages a
// walk has left behind (kept for a retry) in a small one; pages of walks
// that go on in the other, so that the former cannot push the latter
// out. A pin lasts kWalkKeepAlive after the page that made it. A walk
// whose pin is gone (it paused longer, was pushed out, the index was
// reset, the server restarted, or the page went to another cluster node)
// reads the index as it is now (docs/http-choices.md). A pinned snapshot
// keeps its segments mapped, also those a merge has replaced since:
// their files are unlinked and their space comes back when the pin goes;
// Held reports it (the index's diskBytes and memoryBytes count it).
#pragma once

#include <roaring/roaring.h>
#include <xxhash.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "postings/search_index.h"
#include "postings/segment.h"

namespace corvid::postings {

struct Snapshot;

inline constexpr std::chrono::seconds kWalkKeepAlive{300};
inline constexpr size_t kMaxWalks = 1024;      // pins of walks going on
inline constexpr size_t kMaxFirstPages = 256;  // pins of first pages, and of pages a walk has left

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
// (deleted since; a rewritten document is live). Holds pointers into
// both. Remembers what it found live, so that a hit checked again (a
// field sort settles its best hits each time it trims) costs a bitmap
// probe. Not thread-safe.
class GoneSince {
 public:
  GoneSince(const Snapshot& pinned, const Snapshot& now);
  // Document `doc` of the pinned snapshot's segment `seg`, id `id`.
  bool operator()(uint32_t seg, uint32_t doc, std::string_view id);

 private:
  const Snapshot& now_;
  // Per pinned segment: its deleted documents now, if `now` still has it.
  std::vector<const roaring_bitmap_t*> now_deleted_;
  std::vector<Bitmap> known_live_;  // per pinned segment, found live by id (null: none yet)
};

// One index's pinned walks. Thread-safe.
class WalkPins {
 public:
  // Read before the snapshot a search reads; Pin refuses a pin made with
  // an older one (the index was cleared in between).
  uint64_t generation() const;
  // The snapshot pinned under `position`, or nullptr (none, or expired).
  std::shared_ptr<const Snapshot> Find(std::string_view position) const;
  // Pins `snap` under `position`. `walking`: the page had a searchAfter
  // (its pin goes in the walks' pool); `from`: the position it read a
  // pin at, if it did (that pin moves to the small pool, for a retry).
  void Pin(std::string_view position, std::shared_ptr<const Snapshot> snap, uint64_t generation, bool walking,
           std::string_view from);
  // Drops every pin (the index was cleared: no walk goes on over it).
  void Clear();
  size_t size() const;
  // What the pinned snapshots hold beyond `current`: segment files a merge
  // replaced (bytes on disk), and those segments' and older deleted-docs
  // bitmaps' memory.
  void Held(const Snapshot& current, uint64_t& disk, uint64_t& memory) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Key {
    uint64_t low, high;  // XXH3-128 of the position
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.low); }
  };
  enum Pool { kFirst = 0, kWalk = 1 };
  struct Pinned {
    Key key;
    std::shared_ptr<const Snapshot> snap;
    Clock::time_point made;
    Pool pool;
  };
  static Key KeyOf(std::string_view position) {
    const XXH128_hash_t h = XXH3_128bits(position.data(), position.size());
    return Key{h.low64, h.high64};
  }
  // Moves pin `it` to the back of `pool`'s list. Requires mu_.
  void MoveTo(std::list<Pinned>::iterator it, Pool pool);
  // Drops the pins past their time, and the oldest beyond each pool's cap,
  // into `dropped` (released after the lock: a last reference unmaps).
  // Requires mu_.
  void Expire(Clock::time_point now, std::vector<std::shared_ptr<const Snapshot>>& dropped);
  mutable std::mutex mu_;
  // Guarded by mu_: each pool's pins, oldest first; each pin's place by key.
  uint64_t generation_ = 0;
  std::list<Pinned> lists_[2];
  std::unordered_map<Key, std::list<Pinned>::iterator, KeyHash> pins_;
};

}  // namespace corvid::postings
