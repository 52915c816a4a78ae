// ListenerSet: callbacks registered by handle and called after an event
// (the store's commits, an index's progress). Notify copies the callbacks
// under the lock and calls them without it, so a callback may add or
// remove listeners, and a slow one never blocks registration.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

namespace corvid {

template <typename... Args>
class ListenerSet {
 public:
  using Listener = std::function<void(Args...)>;

  // Returns a handle for Remove.
  uint64_t Add(Listener listener) {
    std::lock_guard lock(mu_);
    uint64_t handle = next_++;
    listeners_.emplace(handle, std::move(listener));
    return handle;
  }

  void Remove(uint64_t handle) {
    std::lock_guard lock(mu_);
    listeners_.erase(handle);
  }

  // Calls every listener registered when Notify began (one that is
  // removed meanwhile may still be called once).
  void Notify(Args... args) const {
    std::vector<Listener> copy;
    {
      std::lock_guard lock(mu_);
      copy.reserve(listeners_.size());
      for (const auto& [handle, listener] : listeners_) copy.push_back(listener);
    }
    for (const auto& listener : copy) listener(args...);
  }

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, Listener> listeners_;  // guarded by mu_
  uint64_t next_ = 1;                       // guarded by mu_
};

}  // namespace corvid
