// Request metrics for GET /metrics: per route, counts by status class and a
// latency histogram. Lock-free (relaxed atomics): recording costs a few
// increments on the request path.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/router.h"

namespace corvid::server {

enum class Route : uint8_t {
  kHealth, kCollections, kChanges, kDocList, kDocGet, kDocPut, kDocDelete, kDocBulk,
  kIndexes, kIndexResults, kIndexSearch, kAdmin, kMetrics, kOther, kCount
};

std::string_view RouteName(Route route);
std::string_view RejectReasonName(RejectReason reason);

class Metrics {
 public:
  static constexpr std::array<double, 15> kBucketsSeconds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};

  void Record(Route route, int status, double seconds);
  void RecordRejected(RejectReason reason) { rejected_[size_t(reason)].fetch_add(1, std::memory_order_relaxed); }
  // Appends the Prometheus text exposition of the HTTP metrics to `out`.
  void Render(std::string& out) const;

 private:
  struct PerRoute {
    std::array<std::atomic<uint64_t>, 6> by_class{};  // index status/100 (0: other)
    std::array<std::atomic<uint64_t>, kBucketsSeconds.size()> buckets{};  // non-cumulative
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> sum_micros{0};
  };
  std::array<PerRoute, size_t(Route::kCount)> routes_{};
  std::array<std::atomic<uint64_t>, size_t(RejectReason::kCount)> rejected_{};
};

}  // namespace corvid::server
