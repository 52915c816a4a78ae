// The HTTP/1.1 transport: listens, reads requests with keep-alive on an
// Asio thread pool, hands each to the Router and writes its Response. Beast
// and Asio stay inside http_server.cc; this header is cheap to include.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"
#include "server/router.h"

namespace corvid::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: any free port
  int threads = 0;       // 0: one per core
  // A connection that sends nothing for this long is closed; so is one
  // whose request body does not arrive whole within it.
  std::chrono::milliseconds idle_timeout{30000};
  // From a request's first byte, its request line and header must arrive
  // whole within this, or within idle_timeout if that is shorter (a client
  // trickling its header is cut off).
  std::chrono::milliseconds header_timeout{10000};
  // Request line plus header fields, and separately the trailer of a
  // chunked body (ignored): over either, 431. Also bounds the bytes
  // buffered for one chunk-size line.
  size_t max_header_bytes = 64 * 1024;
  size_t max_header_fields = 100;  // header fields, and trailer fields: 431
  size_t max_target_bytes = 16 * 1024;  // 414
  // Open connections; at the limit the oldest idle one is closed to make
  // room, or accepting waits. 0: derived from the descriptor limit.
  size_t max_connections = 0;
  // PEM files: both set, the server speaks HTTPS only (TLS 1.2 and newer);
  // Create fails if they cannot be loaded or do not match.
  std::string tls_cert_file;
  std::string tls_key_file;
  // How long a graceful shutdown waits for requests in flight.
  std::chrono::milliseconds drain_timeout{10000};
  RouterOptions router;
};

class HttpServer {
 public:
  // Binds the listening socket; the store and engine (which may be null)
  // must outlive the server.
  static Result<std::unique_ptr<HttpServer>> Create(storage::DocumentStore& store, indexing::IndexEngine* engine,
                                                    HttpServerOptions options);
  ~HttpServer();

  // "host:port" actually bound (useful with port 0).
  std::string LocalEndpoint() const;

  // Serves until SIGINT/SIGTERM (or Stop()), then drains requests in flight
  // and returns. Blocks the calling thread, which joins the pool.
  void Run();
  // Begins a graceful shutdown; callable from any thread.
  void Stop();

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace corvid::server
