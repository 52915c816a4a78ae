// Prometheus text rendering of the per-route request metrics.
#include "server/metrics.h"

#include <cstdio>

#include "common/faults.h"

namespace corvid::server {

std::string_view RouteName(Route route) {
  switch (route) {
    case Route::kHealth: return "health";
    case Route::kCollections: return "collections";
    case Route::kChanges: return "changes";
    case Route::kDocList: return "doc_list";
    case Route::kDocGet: return "doc_get";
    case Route::kDocPut: return "doc_put";
    case Route::kDocDelete: return "doc_delete";
    case Route::kDocBulk: return "doc_bulk";
    case Route::kIndexes: return "indexes";
    case Route::kIndexResults: return "index_results";
    case Route::kIndexSearch: return "index_search";
    case Route::kAdmin: return "admin";
    case Route::kMetrics: return "metrics";
    case Route::kOther:
    case Route::kCount: break;
  }
  return "other";
}

std::string_view RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kHeaderTooLarge: return "header_too_large";
    case RejectReason::kTargetTooLong: return "target_too_long";
    case RejectReason::kBodyTooLarge: return "body_too_large";
    case RejectReason::kMalformed: return "malformed";
    case RejectReason::kUnauthenticated: return "unauthenticated";
    case RejectReason::kHeaderTimeout: return "header_timeout";
    case RejectReason::kIdleReclaimed: return "idle_reclaimed";
    case RejectReason::kAcceptFailed: return "accept_failed";
    case RejectReason::kTlsHandshake: return "tls_handshake";
    case RejectReason::kCount: break;
  }
  return "other";
}

void Metrics::Record(Route route, int status, double seconds) {
  PerRoute& r = routes_[size_t(route)];
  int cls = status / 100;
  r.by_class[cls >= 1 && cls <= 5 ? cls : 0].fetch_add(1, std::memory_order_relaxed);
  size_t b = 0;
  while (b < kBucketsSeconds.size() && seconds > kBucketsSeconds[b]) ++b;
  if (b < kBucketsSeconds.size()) r.buckets[b].fetch_add(1, std::memory_order_relaxed);
  r.count.fetch_add(1, std::memory_order_relaxed);
  r.sum_micros.fetch_add(uint64_t(seconds * 1e6), std::memory_order_relaxed);
}

void Metrics::Render(std::string& out) const {
  char line[256];
  out += "# HELP corvid_http_requests_total HTTP requests answered, by route and status class.\n";
  out += "# TYPE corvid_http_requests_total counter\n";
  for (size_t i = 0; i < routes_.size(); ++i) {
    for (size_t c = 0; c < 6; ++c) {
      uint64_t n = routes_[i].by_class[c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      std::snprintf(line, sizeof line, "corvid_http_requests_total{route=\"%s\",code=\"%s\"} %llu\n",
                    RouteName(Route(i)).data(), c == 0 ? "other" : (std::to_string(c) + "xx").c_str(),
                    static_cast<unsigned long long>(n));
      out += line;
    }
  }
  out += "# HELP corvid_http_request_duration_seconds HTTP request latency, by route.\n";
  out += "# TYPE corvid_http_request_duration_seconds histogram\n";
  for (size_t i = 0; i < routes_.size(); ++i) {
    const PerRoute& r = routes_[i];
    uint64_t count = r.count.load(std::memory_order_relaxed);
    if (count == 0) continue;
    std::string_view name = RouteName(Route(i));
    uint64_t cumulative = 0;
    for (size_t b = 0; b < kBucketsSeconds.size(); ++b) {
      cumulative += r.buckets[b].load(std::memory_order_relaxed);
      std::snprintf(line, sizeof line, "corvid_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n",
                    name.data(), kBucketsSeconds[b], static_cast<unsigned long long>(cumulative));
      out += line;
    }
    std::snprintf(line, sizeof line,
                  "corvid_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n"
                  "corvid_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n"
                  "corvid_http_request_duration_seconds_count{route=\"%s\"} %llu\n",
                  name.data(), static_cast<unsigned long long>(count), name.data(),
                  double(r.sum_micros.load(std::memory_order_relaxed)) / 1e6, name.data(),
                  static_cast<unsigned long long>(count));
    out += line;
  }
  out += "# HELP corvid_requests_rejected_total Requests and connections the transport refused before a handler.\n";
  out += "# TYPE corvid_requests_rejected_total counter\n";
  for (size_t i = 0; i < rejected_.size(); ++i) {
    std::snprintf(line, sizeof line, "corvid_requests_rejected_total{reason=\"%s\"} %llu\n",
                  RejectReasonName(RejectReason(i)).data(),
                  static_cast<unsigned long long>(rejected_[i].load(std::memory_order_relaxed)));
    out += line;
  }
  out += "# HELP corvid_internal_errors_total Exceptions caught at a thread's boundary (each is logged).\n";
  out += "# TYPE corvid_internal_errors_total counter\n";
  for (size_t i = 0; i < size_t(FaultSite::kCount); ++i) {
    std::snprintf(line, sizeof line, "corvid_internal_errors_total{where=\"%s\"} %llu\n",
                  FaultSiteName(FaultSite(i)).data(), static_cast<unsigned long long>(InternalErrorCount(FaultSite(i))));
    out += line;
  }
}

}  // namespace corvid::server
