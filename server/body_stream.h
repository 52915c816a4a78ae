// A response body too large to hold, produced piece by piece (a backup).
// Transport-free: the router hands one in Response::stream, the transport
// (http_server.cc) asks for the next piece once the previous one is
// written, so a slow client slows the producer instead of filling memory.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

#include "common/status.h"

namespace corvid::server {

class BodyStream {
 public:
  virtual ~BodyStream() = default;
  // Calls `deliver` once, from any thread: the next piece, an empty piece
  // at the end, or an error (the transport then closes the connection
  // without ending the body, so the client sees it cut short).
  using Deliver = std::function<void(Result<std::string>)>;
  virtual void Next(Deliver deliver) = 0;
  // The client is gone (or the server stops): produce nothing more.
  virtual void Cancel() = 0;
  // Called by Cancel (once, on the canceller's thread): the transport ends
  // a response stuck writing to a client that stopped reading. Null: none.
  virtual void OnCancel(std::function<void()> hook) = 0;
};

// A BodyStream fed by a producer thread, at most two pieces ahead.
class PieceChannel final : public BodyStream {
 public:
  // Producer: blocks while two pieces wait; ShuttingDown once cancelled.
  Status Push(std::string piece) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() < 2 || cancelled_; });
    if (cancelled_) return Status::ShuttingDown("the backup's client went away or the server is stopping");
    if (pending_) {
      Deliver d = std::move(pending_);
      pending_ = nullptr;
      lock.unlock();
      d(std::move(piece));
      return Status::Ok();
    }
    queue_.push_back(std::move(piece));
    return Status::Ok();
  }

  // Producer: the end (ok) or the error that cuts the body short.
  void Close(Status status) {
    std::unique_lock lock(mu_);
    closed_ = true;
    end_ = std::move(status);
    if (pending_ && queue_.empty()) {
      Deliver d = std::move(pending_);
      pending_ = nullptr;
      Status end = end_;
      lock.unlock();
      Finish(d, end);
    }
  }

  bool cancelled() const {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

  void Next(Deliver deliver) override {
    std::unique_lock lock(mu_);
    if (!queue_.empty()) {
      std::string piece = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      cv_.notify_all();
      deliver(std::move(piece));
      return;
    }
    if (closed_) {
      Status end = end_;
      lock.unlock();
      Finish(deliver, end);
      return;
    }
    pending_ = std::move(deliver);
  }

  // A Next still waiting is answered with an error, so the transport
  // ends the response now (a drain does not wait for it).
  void Cancel() override {
    Deliver d;
    std::function<void()> hook;
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
      d = std::move(pending_);
      pending_ = nullptr;
      hook = std::move(on_cancel_);
      on_cancel_ = nullptr;
    }
    cv_.notify_all();
    if (d) d(Status::ShuttingDown("cancelled"));
    if (hook) hook();
  }

  void OnCancel(std::function<void()> hook) override {
    std::lock_guard lock(mu_);
    on_cancel_ = std::move(hook);
  }

 private:
  static void Finish(const Deliver& d, const Status& end) {
    if (end.ok()) d(std::string());
    else d(end);
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  Deliver pending_;  // a Next waiting for a piece
  std::function<void()> on_cancel_;
  bool closed_ = false, cancelled_ = false;
  Status end_;
};

}  // namespace corvid::server
