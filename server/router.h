// The HTTP API as plain functions of a request: routing, authentication,
// and the handlers for every endpoint in API.md. Transport-free (no Beast
// or Asio here) so that http_server.cc is the only file that knows sockets.
//
// Thread safety: Handle() is called concurrently from the I/O threads; a
// Reply may be invoked from any thread (e.g. the store's merger thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace corvid::storage {
class DocumentStore;
}
namespace corvid::indexing {
class IndexEngine;
}
namespace corvid::cluster {
class ClusterNode;
}

namespace corvid::server {

class BodyStream;

struct Request {
  std::string method;  // "GET", "PUT", ...
  std::string target;  // path and query, still percent-encoded
  std::string body;
  std::string content_type;
  std::string if_match;
  std::string if_none_match;
  std::string authorization;
  bool has_authorization = false;
};

struct Response {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::optional<uint64_t> etag;  // sent as ETag: "N"
  std::string allow;             // Allow header for 405
  std::string www_authenticate;  // WWW-Authenticate header for 401
  bool close = false;            // close the connection after this response
  // The answer to a HEAD: the transport sends the headers GET would,
  // Content-Length of `body` included, and no body (RFC 9110 §9.3.2).
  bool omit_body = false;
  // A body produced piece by piece (body_stream.h), sent with chunked
  // transfer coding instead of `body`.
  std::shared_ptr<BodyStream> stream;
  std::vector<std::pair<std::string, std::string>> headers;  // further header fields
};

using Reply = std::function<void(Response)>;

// Delayed work, provided by the transport (an Asio timer).
class Timers {
 public:
  virtual ~Timers() = default;
  virtual void RunAfter(std::chrono::milliseconds delay, std::function<void()> fn) = 0;
};

struct RouterOptions {
  std::string api_key;  // empty: no authentication
  // Keys that may only read (API.md, Server: --read-key); only with api_key.
  std::vector<std::string> read_keys;
  size_t max_doc_bytes = size_t{16} << 20;
  size_t max_bulk_bytes = size_t{256} << 20;
  // A search, listing or feed whose answer would exceed this is refused
  // (400 response_too_large) as it is built, not after (API.md).
  size_t max_response_bytes = size_t{64} << 20;
  // offset + limit of a search, and the offset of /results (API.md).
  size_t max_result_window = 10000;
  // The body of every request but document writes and bulks (index
  // definitions, search bodies, analyze): such bodies are small.
  size_t max_control_body_bytes = size_t{1} << 20;
  // Cluster mode (--nats): writes and index definitions go through the
  // cluster's log instead of straight to the store. Null: a single server.
  cluster::ClusterNode* cluster = nullptr;
  // A request answered after this many ms is logged (http.slow_request),
  // unless it waited on purpose (waitMs); 0: none. --slow-ms.
  uint64_t slow_ms = 1000;
  // One line per request (http.request); --access-log.
  bool access_log = false;
};

// Why the transport refused a request before it reached a handler, or
// dropped a connection (counted in /metrics as
// corvid_requests_rejected_total{reason}).
enum class RejectReason : uint8_t {
  kHeaderTooLarge,   // 431: header or trailer bytes or field count
  kTargetTooLong,    // 414
  kBodyTooLarge,     // 413
  kMalformed,        // 400: not HTTP/1.x as RFC 9112 spells it
  kUnauthenticated,  // 401/403 decided from the header, body never read
  kHeaderTimeout,    // the header did not arrive whole within its deadline
  kIdleReclaimed,    // an idle connection closed to make room for a new one
  kAcceptFailed,     // accept() failed (descriptors exhausted): backed off
  kTlsHandshake,     // HTTPS: the TLS handshake failed or timed out (plain HTTP, say)
  kCount
};

// Builds the error body {"error": {"code", "message"[, "offset"|"line"]}}.
Response ErrorResponse(int status, std::string_view code, std::string_view message,
                       std::optional<size_t> offset = std::nullopt, std::optional<size_t> line = std::nullopt);
// The same with one more number inside `error` (e.g. "oldestEtag").
Response ErrorResponse(int status, std::string_view code, std::string_view message, std::string_view detail,
                       uint64_t value);

class Router {
 public:
  // `engine` may be null: then the index endpoints answer 404.
  Router(storage::DocumentStore& store, indexing::IndexEngine* engine, Timers& timers, RouterOptions options);
  ~Router();

  // Handles one request; `reply` is called exactly once. HEAD is handled
  // as GET, with `omit_body` set on the response.
  void Handle(Request request, Reply reply);

  // The body size limit for a request to `target` (still percent-encoded)
  // with `method`: a POST that Handle routes to the bulk endpoint
  // (/docs/{collection}/_bulk, decoded) gets the bulk limit, other requests
  // under /docs/ the document limit, everything else the smaller of that
  // and the control-body limit. `what`, when given, is set to the limit's
  // name for a 413's message ("a bulk body (--max-bulk-bytes)"; static
  // text). Cost: one parse of the target (POST only).
  size_t BodyLimit(std::string_view method, std::string_view target, std::string_view* what = nullptr) const;

  // Decides from the request line and the Authorization header alone
  // (nullptr: none), before any body is read, whether the request may go
  // on: nothing, or the refusal (401/403) to send before closing. Costs
  // nothing without an API key; Handle checks the same again.
  std::optional<Response> Admit(std::string_view method, std::string_view target,
                                const std::string* authorization) const;

  // Counts a request or connection the transport refused.
  void CountRejected(RejectReason reason);

  // Answers parked requests (long polls, index waits) now (on shutdown),
  // and cancels streamed answers (backups).
  void CompleteWaiters();
  // Waits for the threads of streamed answers to end (after the I/O
  // threads stopped, before the store and the indexes close).
  void JoinBackgroundWork();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace corvid::server
