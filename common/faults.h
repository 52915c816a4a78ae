// Internal errors caught at a thread's boundary. Every thread Corvid runs
// (the HTTP I/O threads, index workers, the store's merger, segment merges,
// query helpers) catches what escapes its work instead of letting
// std::terminate end the process; it records the fault here, where
// /metrics reads it as corvid_internal_errors_total{where}, and logs one
// line with the reason. Header-only so that storage/ can use it.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "common/log.h"

namespace corvid {

enum class FaultSite : uint8_t {
  kHttp,          // reading, parsing or writing a request on an I/O thread
  kHandler,       // a request handler (routing, validation, a query)
  kIndexWorker,   // an index's worker applying a batch
  kStoreMerger,   // the store's write merger
  kSegmentMerge,  // a search index's background merge
  kQueryHelper,   // a helper thread running a piece of a query
  kCluster,       // a cluster node's applier, sweeper or membership thread
  kCount
};

inline std::string_view FaultSiteName(FaultSite where) {
  switch (where) {
    case FaultSite::kHttp:
      return "http";
    case FaultSite::kHandler:
      return "handler";
    case FaultSite::kIndexWorker:
      return "index_worker";
    case FaultSite::kStoreMerger:
      return "store_merger";
    case FaultSite::kSegmentMerge:
      return "segment_merge";
    case FaultSite::kQueryHelper:
      return "query_helper";
    case FaultSite::kCluster:
      return "cluster";
    case FaultSite::kCount:
      break;
  }
  return "other";
}

namespace detail {
inline std::array<std::atomic<uint64_t>, size_t(FaultSite::kCount)> internal_errors{};
}  // namespace detail

// The text of the exception being handled (call inside a catch block).
inline std::string CurrentExceptionText() noexcept {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Counts a caught fault and logs it on stderr. Never throws.
inline void RecordInternalError(FaultSite where, std::string_view what) noexcept {
  detail::internal_errors[size_t(where)].fetch_add(1, std::memory_order_relaxed);
  try {
    logging::Error("internal.error", "internal error (caught; the server goes on)",
                   {{"site", FaultSiteName(where)}, {"what", what.substr(0, 1000)}});
  } catch (...) {
  }
}

inline uint64_t InternalErrorCount(FaultSite where) {
  return detail::internal_errors[size_t(where)].load(std::memory_order_relaxed);
}

}  // namespace corvid
