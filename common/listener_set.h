// ListenerSet: callbacks registered by handle and called after an event
// (the store's commits, an index's progress). Notify copies the set under
// the lock and calls each callback without it, so a callback may add or
// remove listeners, and a slow one never blocks registration or the other
// listeners' removal.
//
// Once Remove(handle) returns, that callback is not running and never
// runs again: an owner may unregister a callback that captures `this` and
// then destroy itself. (Each callback has its own call mutex, held while
// it runs and taken by Remove; it is recursive, so a callback may remove
// itself.) So Remove blocks while that callback runs: never call it
// holding a lock the callback takes, nor from callbacks that remove each
// other's listeners on two threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace corvid {

template <typename... Args>
class ListenerSet {
 public:
  using Listener = std::function<void(Args...)>;

  // Returns a handle for Remove.
  uint64_t Add(Listener listener) {
    auto entry = std::make_shared<Entry>(std::move(listener));
    std::lock_guard lock(mu_);
    uint64_t handle = next_++;
    listeners_.emplace(handle, std::move(entry));
    return handle;
  }

  // Waits for a call of this listener in progress on another thread.
  void Remove(uint64_t handle) {
    std::shared_ptr<Entry> entry;
    {
      std::lock_guard lock(mu_);
      auto it = listeners_.find(handle);
      if (it == listeners_.end()) return;
      entry = std::move(it->second);
      listeners_.erase(it);
    }
    std::lock_guard call(entry->call_mu);
    entry->removed = true;
  }

  // Calls every listener registered when Notify began and not removed by
  // the time its turn comes.
  void Notify(Args... args) const {
    std::vector<std::shared_ptr<Entry>> copy;
    {
      std::lock_guard lock(mu_);
      copy.reserve(listeners_.size());
      for (const auto& [handle, entry] : listeners_) copy.push_back(entry);
    }
    for (const auto& entry : copy) {
      std::lock_guard call(entry->call_mu);
      if (!entry->removed) entry->fn(args...);
    }
  }

 private:
  struct Entry {
    explicit Entry(Listener f) : fn(std::move(f)) {}
    const Listener fn;
    std::recursive_mutex call_mu;
    bool removed = false;  // guarded by call_mu
  };

  mutable std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<Entry>> listeners_;  // guarded by mu_
  uint64_t next_ = 1;                                     // guarded by mu_
};

}  // namespace corvid
