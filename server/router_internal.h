// Internals shared by the router's handler files (router.cc: routing and
// documents; index_handlers.cc: indexes, queries, admin; metrics.cc).
// Internal to server/.
#pragma once

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <atomic>
#include <charconv>
#include <mutex>
#include <set>
#include <thread>

#include "common/utf8.h"
#include "indexing/index_engine.h"
#include "server/json_input.h"
#include "server/body_stream.h"
#include "server/metrics.h"
#include "server/router.h"
#include "storage/document_store.h"

namespace corvid::server {

namespace detail {

using storage::DocumentStore;
using storage::WriteKind;
using storage::WriteOp;
using storage::WriteRequest;
using storage::WriteResult;
using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

constexpr uint64_t kDefaultChangesLimit = 1000;
constexpr uint64_t kMaxChangesLimit = 10000;
constexpr uint64_t kMaxWaitMs = 60000;
constexpr uint64_t kDefaultListLimit = 100;  // GET /docs/{collection}
constexpr uint64_t kMaxListLimit = 1000;
// The last path segment of the bulk endpoint, /docs/{collection}/_bulk:
// reserved, so never a document id.
constexpr std::string_view kBulkId = "_bulk";

inline void WriteString(JsonWriter& w, std::string_view s) { w.String(s.data(), rapidjson::SizeType(s.size())); }

inline Response JsonResponse(int status, const rapidjson::StringBuffer& buffer) {
  Response r;
  r.status = status;
  r.body.assign(buffer.GetString(), buffer.GetSize());
  return r;
}

// Percent-decodes `in`; `plus_is_space` for query strings. False if a
// %-escape is malformed.
inline bool PercentDecode(std::string_view in, bool plus_is_space, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      int hi = HexValue(in[i + 1]), lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out.push_back(char(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return true;
}

struct Target {
  std::vector<std::string> segments;  // decoded path segments
  std::vector<std::pair<std::string, std::string>> query;

  // The parameter's last value when it is given more than once, as the
  // query endpoints, which apply parameters in order, read it too.
  const std::string* Param(std::string_view name) const {
    for (auto it = query.rbegin(); it != query.rend(); ++it)
      if (it->first == name) return &it->second;
    return nullptr;
  }
};

// True if `s` equals `lower` (lowercase ASCII) ignoring ASCII case.
inline bool EqualsIgnoringCase(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != lower[i]) return false;
  return true;
}

// A request target: origin form (/path?query), or absolute form
// (http://host:port/path?query, which RFC 9112 §3.2.2 has a server accept:
// its path and query are taken, the authority is the Host).
inline std::optional<Target> ParseTarget(std::string_view target) {
  Target t;
  std::string origin;  // an absolute form's path and query, when it has no path
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() < scheme.size() || !EqualsIgnoringCase(target.substr(0, scheme.size()), scheme)) continue;
    const std::string_view rest = target.substr(scheme.size());
    const size_t end = std::min(rest.find_first_of("/?"), rest.size());
    // No authority, or one with userinfo (user:password@), which RFC 9110
    // §4.2.4 advises refusing.
    if (end == 0 || rest.substr(0, end).find('@') != std::string_view::npos) return std::nullopt;
    target = rest.substr(end);
    if (target.empty() || target.front() == '?') target = origin.append("/").append(target);
    break;
  }
  size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  if (path.empty() || path[0] != '/') return std::nullopt;
  path.remove_prefix(1);
  while (true) {
    size_t slash = path.find('/');
    std::string seg;
    if (!PercentDecode(path.substr(0, slash), false, seg)) return std::nullopt;
    t.segments.push_back(std::move(seg));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  if (t.segments.size() == 1 && t.segments[0].empty()) t.segments.clear();  // "/"
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    size_t eq = pair.find('=');
    std::string k, v;
    if (!PercentDecode(pair.substr(0, eq), true, k)) return std::nullopt;
    if (eq != std::string_view::npos && !PercentDecode(pair.substr(eq + 1), true, v)) return std::nullopt;
    if (!k.empty()) t.query.emplace_back(std::move(k), std::move(v));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return t;
}

// True if `t` (decoded) is /docs/{collection}/_bulk, the bulk endpoint:
// the one test both Dispatch and Router::BodyLimit route by.
inline bool IsBulkPath(const Target& t) {
  return t.segments.size() == 3 && t.segments[0] == "docs" && t.segments[2] == kBulkId;
}

// Parses a non-negative decimal integer parameter; false if malformed.
inline bool ParseUint(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Reads the count parameter `name` of `t` into `out` (left unchanged when
// absent), capped at `max`; the 400 that refuses a malformed one otherwise.
inline std::optional<Response> ReadCountParam(const Target& t, std::string_view name, uint64_t max, uint64_t& out) {
  const std::string* v = t.Param(name);
  if (!v) return std::nullopt;
  if (!ParseUint(*v, out))
    return ErrorResponse(400, "invalid_argument",
                         std::string(name) + " must be a non-negative integer, got '" +
                             std::string(Utf8Prefix(*v, 64)) + "'");
  out = std::min(out, max);
  return std::nullopt;
}

// An etag from a header value: "N", W/"N" or N. Which comparison a weak
// one passes is the header's to decide (If-None-Match: weak, If-Match:
// strong, RFC 9110 §13.1).
struct EtagHeader {
  uint64_t etag;
  bool weak;  // W/"N"
};
// nullopt if malformed.
inline std::optional<EtagHeader> ParseEtagHeader(std::string_view v) {
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  const bool weak = v.substr(0, 2) == "W/";
  if (weak) v.remove_prefix(2);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  uint64_t etag;
  if (!ParseUint(v, etag)) return std::nullopt;
  return EtagHeader{etag, weak};
}

inline bool IsJsonContentType(std::string_view ct, bool allow_ndjson) {
  if (ct.empty()) return true;  // a missing Content-Type is accepted
  std::string_view base = ct.substr(0, ct.find(';'));
  while (!base.empty() && base.back() == ' ') base.remove_suffix(1);
  if (EqualsIgnoringCase(base, "application/json")) return true;
  return allow_ndjson && (EqualsIgnoringCase(base, "application/x-ndjson") || EqualsIgnoringCase(base, "application/ndjson"));
}

// Constant-time comparison: the time taken does not depend on where the
// strings differ (only on the length of `expected`).
inline bool ConstantTimeEquals(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

inline Response FromStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return Response{};
    case StatusCode::kNotFound: return ErrorResponse(404, "not_found", s.message());
    case StatusCode::kInvalidArgument: return ErrorResponse(400, "invalid_argument", s.message());
    case StatusCode::kPreconditionFailed: return ErrorResponse(412, "precondition_failed", s.message());
    case StatusCode::kBusy: return ErrorResponse(409, "conflict", s.message());
    case StatusCode::kTooLarge: return ErrorResponse(413, "body_too_large", s.message());
    case StatusCode::kShuttingDown: return ErrorResponse(503, "shutting_down", s.message());
    case StatusCode::kUnavailable: return ErrorResponse(503, "unavailable", s.message());
    case StatusCode::kCommitUnknown: return ErrorResponse(503, "commit_unknown", s.message());
    case StatusCode::kNoSpace:
      return ErrorResponse(507, "insufficient_storage", "the write could not be made durable: " + s.message());
    default: return ErrorResponse(500, "internal", s.message());
  }
}

// A query's answer outgrew --max-response-bytes (API.md, General rules).
inline Response ResponseTooLarge(const Status& s) { return ErrorResponse(400, "response_too_large", s.message()); }

// `allow` lists the methods of the path; HEAD is added after GET, since
// Router::Handle answers HEAD wherever GET works. `what` names the path in
// the message when there is more to say than "here".
inline Response MethodNotAllowed(std::string_view allow, std::string_view what = "here") {
  std::string methods(allow);
  if (methods.starts_with("GET")) methods.insert(3, ", HEAD");
  Response r =
      ErrorResponse(405, "method_not_allowed", "method not allowed " + std::string(what) + "; allowed: " + methods);
  r.allow = std::move(methods);
  return r;
}

inline Response ProblemResponse(const JsonProblem& p, std::optional<size_t> line = std::nullopt) {
  std::string message = p.message;
  if (line) message = "line " + std::to_string(*line) + ": " + message;
  return ErrorResponse(400, p.code, message, p.offset, line);
}


}  // namespace detail

// A request parked until something happens (a commit, an index catching
// up) or its deadline passes; then `finish` runs once, on an I/O thread.
struct Waiter {
  std::atomic<bool> done{false};
  std::mutex mu;
  std::function<void()> unsubscribe;  // guarded by mu
  std::function<void()> finish;
};

struct Router::State : std::enable_shared_from_this<Router::State> {
  storage::DocumentStore& store;
  indexing::IndexEngine* engine;  // may be null (tests of the document API)
  Timers& timers;
  RouterOptions options;
  Metrics metrics;

  std::mutex waiters_mu;
  std::set<std::shared_ptr<Waiter>> waiters;  // guarded by waiters_mu

  State(storage::DocumentStore& s, indexing::IndexEngine* e, Timers& t, RouterOptions o)
      : store(s), engine(e), timers(t), options(std::move(o)) {}

  // Runs `then` once `ready()` holds (checked whenever `subscribe`'s wake-up
  // fires) or after `wait`, whichever comes first. `subscribe` registers a
  // wake-up and returns its handle; `unsubscribe` removes it. `ready` runs
  // on the notifying thread (the merger's), so it must be cheap; a
  // `confirm`, when given, is the costlier check (a read) that must also
  // hold: it runs on an I/O thread after `ready()` held, and when it does
  // not, the request goes on waiting for the next wake-up. Nothing runs
  // between wake-ups: no polling.
  void WaitThen(std::chrono::milliseconds wait, std::function<bool()> ready,
                const std::function<uint64_t(std::function<void()>)>& subscribe,
                std::function<void(uint64_t)> unsubscribe, std::function<void()> then,
                std::function<bool()> confirm = nullptr);
  void Finish(const std::shared_ptr<Waiter>& w);

  Response Health() const;
  Response Collections() const;
  Response ListDocs(const detail::Target& t, const std::string& coll) const;
  void Changes(const detail::Target& t, Reply& reply);
  Response GetDoc(const Request& req, const std::string& coll, const std::string& id) const;
  void PutDoc(Request& req, const std::string& coll, const std::string& id, Reply& reply);
  void DeleteDoc(const Request& req, const std::string& coll, const std::string& id, Reply& reply);
  void Bulk(Request& req, const std::string& coll, Reply& reply);
  // A document write: to the store, or through the cluster's log.
  void SubmitWrite(storage::WriteRequest request, storage::DocumentStore::WriteCallback done);

  // index_handlers.cc
  // The index and admin endpoints (index_handlers.cc); the engine is there
  // (the route table's guard).
  void ListIndexes(Reply& reply) const;
  void GetIndex(const std::string& name, Reply& reply) const;
  void PutIndex(Request& req, const std::string& name, Reply& reply);
  void DeleteIndex(const std::string& name, Reply& reply);
  Response AdminIndexes() const;
  Response IndexControl(const std::string& name, std::string_view action);
  Response ClusterView() const;
  Response Analyze(const Request& req) const;
  void Results(const detail::Target& t, const std::string& name, Reply& reply);
  void Search(const Request& req, const detail::Target& t, const std::string& name, Reply& reply);
  // Runs `then` once index `name` has processed through min_etag, or after wait_ms.
  void WaitForIndex(const std::string& name, uint64_t min_etag, uint64_t wait_ms, std::function<void()> then);
  Response MetricsText() const;

  // backup.cc: GET /admin/backup, streamed by a thread of its own.
  void Backup(Reply& reply);
  // Threads that produce streamed answers, and their channels (to cancel
  // them on shutdown). Finished ones are joined when the next one starts.
  struct Job {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
    std::weak_ptr<BodyStream> stream;
  };
  std::mutex jobs_mu;
  std::vector<Job> jobs;  // guarded by jobs_mu
  bool jobs_stopping = false;  // guarded by jobs_mu
  void CancelJobs();
  void JoinJobs();
};

}  // namespace corvid::server
