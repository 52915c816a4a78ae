// Boost.Beast HTTP/1.1 server: one Session per connection on its own strand,
// keep-alive, limits checked before memory is spent, idle/header/body
// deadlines, a bounded number of connections, and a graceful shutdown that
// finishes requests in flight. With a certificate it speaks HTTPS only
// (Asio's OpenSSL stream; TLS 1.2 and 1.3): a Session is the same code over
// either stream. Everything about the API itself is in router.cc.
//
// THE RULE AT THIS BOUNDARY: nothing a client sends may end the process.
// - Every size a client chooses is checked before it is allocated: the
//   request line and header (RequestParser: target 414, bytes and field
//   count 431, trailers ignored but bounded the same), every unparsed byte
//   buffered (the read buffer's max_size bounds a chunk-size line and a
//   trailer), bodies (413, from Content-Length before reading and as
//   chunks arrive), and an unauthenticated body is never read at all.
// - Beast's own header container is never used: it throws
//   std::length_error on a field over 64 KiB, which is how one trailer
//   used to abort the server.
// - Every completion handler runs inside Guard(): an exception thrown while
//   reading, parsing, routing, handling or writing is caught, counted in
//   corvid_internal_errors_total, logged, and answered with 500 `internal`
//   if the request can still be answered, else the connection is closed.
//   The I/O threads' run loop catches whatever escapes anyway (RunIo).
//
// A connection's code is in http_session.h (Session<Stream>), compiled once
// per stream in http_session_plain.cc and http_session_tls.cc.

#include "server/http_server.h"

#include <malloc.h>
#include <sys/resource.h>

#include <cerrno>
#include <thread>

#include "server/http_session.h"

namespace corvid::server {

namespace {

using session_detail::SessionBase;

constexpr std::chrono::milliseconds kMaxAcceptBackoff{1000};
// How often the server looks for a quiet moment to give freed memory back.
constexpr std::chrono::seconds kTrimInterval{2};

// The server's TLS context from a PEM certificate chain and key: TLS 1.2
// and newer, no compression, and buffers released while a connection is
// idle (an idle TLS connection then holds a few KiB rather than ~70).
Result<std::unique_ptr<asio::ssl::context>> MakeTlsContext(const std::string& cert_file, const std::string& key_file) {
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  beast::error_code ec;
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1 |
                       asio::ssl::context::no_compression | asio::ssl::context::single_dh_use,
                   ec);
  if (ec) return Status::InvalidArgument("TLS: " + ec.message());
  ::SSL_CTX_set_mode(ctx->native_handle(), SSL_MODE_RELEASE_BUFFERS);
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec)
    return Status::InvalidArgument("--tls-cert " + cert_file +
                                   ": cannot load a PEM certificate chain: " + ec.message());
  ctx->use_private_key_file(key_file, asio::ssl::context::pem, ec);
  if (ec)  // OpenSSL also checks here that the key is the certificate's
    return Status::InvalidArgument("--tls-key " + key_file +
                                   ": cannot load a PEM private key matching the certificate in " + cert_file + ": " +
                                   ec.message());
  return ctx;
}

// The default connection limit: what the descriptor limit leaves after a
// reserve for the store, index files and the listening socket.
size_t DefaultMaxConnections() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 10000;
  const size_t nofile = rl.rlim_cur;
  const size_t reserve = std::min<size_t>(std::max<size_t>(nofile / 4, 32), 512);
  return std::max<size_t>(nofile > reserve ? nofile - reserve : 0, 8);
}

bool IsOutOfResources(const beast::error_code& ec) {
  return ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space || ec == asio::error::no_memory ||
         (ec.category() == boost::system::system_category() && ec.value() == ENFILE);
}

}  // namespace

// On accept_strand. At the connection limit the oldest idle connection
// makes room; with none idle, accepting pauses until a session ends (new
// clients wait in the listen backlog rather than cost a descriptor).
void HttpServer::Impl::Accept() {
  if (draining || !acceptor.is_open()) return;
  if (connections.load() >= options.max_connections && !ReclaimIdle()) {
    accept_paused.store(true);
    // A session that ended between the check and the flag resumes nothing:
    // look again.
    if (connections.load() >= options.max_connections || !accept_paused.exchange(false)) return;
  }
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    try {
      OnAccept(ec, std::move(socket));
    } catch (...) {
      RecordInternalError(FaultSite::kHttp, CurrentExceptionText());
      Accept();
    }
  });
}

void HttpServer::Impl::OnAccept(beast::error_code ec, tcp::socket socket) {
  if (ec) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (IsOutOfResources(ec)) {
      // Out of descriptors: retrying at once would spin a core while they
      // stay exhausted. Free an idle one and back off, doubling to 1 s.
      router->CountRejected(RejectReason::kAcceptFailed);
      ReclaimIdle();
      accept_backoff = std::min(std::max(accept_backoff * 2, std::chrono::milliseconds(10)), kMaxAcceptBackoff);
      accept_timer.expires_after(accept_backoff);
      accept_timer.async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec) Accept();
      });
      return;
    }
    return Accept();  // a connection aborted before it was accepted: transient
  }
  accept_backoff = std::chrono::milliseconds(0);
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  if (tls)
    session_detail::StartTlsSession(*this, std::move(socket), *tls);
  else
    session_detail::StartPlainSession(*this, std::move(socket));
  Accept();
}

bool HttpServer::Impl::ReclaimIdle() {
  std::shared_ptr<SessionBase> victim;  // released after idle_mu (its destructor takes it)
  {
    std::lock_guard lock(idle_mu);
    while (!idle.empty() && !victim) {
      SessionBase* s = idle.front();
      idle.pop_front();
      s->listed_ = false;
      victim = s->weak_from_this().lock();  // empty if it is being destroyed
    }
  }
  if (!victim) return false;
  asio::post(victim->executor(), [victim] { victim->Reclaim(); });
  return true;
}

void HttpServer::Impl::SessionClosed() {
  connections.fetch_sub(1);
  if (!destroyed.load() && accept_paused.exchange(false)) asio::post(accept_strand, [this] { Accept(); });
}

void HttpServer::Impl::BeginShutdown() {
  if (draining.exchange(true)) return;
  logging::Info("server.draining", "shutting down: no new connections; draining requests in flight",
                {{"in_flight", int64_t(in_flight.load())}});
  asio::post(accept_strand, [this] {
    beast::error_code ignored;
    acceptor.close(ignored);
    accept_timer.cancel();
    trim_timer.cancel();
  });
  beast::error_code ignored;
  signals.cancel(ignored);
  router->CompleteWaiters();
  drain_deadline = std::chrono::steady_clock::now() + options.drain_timeout;
  CheckDrained();
}

void HttpServer::Impl::CheckDrained() {
  if (in_flight.load() <= 0 || std::chrono::steady_clock::now() >= drain_deadline) {
    if (in_flight.load() > 0)
      logging::Warn("server.drain_timeout", "requests still in flight at the drain deadline are cut off",
                    {{"in_flight", int64_t(in_flight.load())}});
    ioc.stop();
    return;
  }
  drain_timer.expires_after(std::chrono::milliseconds(10));
  drain_timer.async_wait([this](beast::error_code) { CheckDrained(); });
}

// glibc keeps what was freed in its arenas: after a burst of requests
// (large bodies, many threads) that was tens of MiB that never went back.
// When requests were served since the last look and none is in flight
// now, malloc_trim returns the free pages; under steady load it waits, so
// hot pages are reused rather than faulted in afresh.
void HttpServer::Impl::TrimWhenQuiet() {
  trim_timer.expires_after(kTrimInterval);
  trim_timer.async_wait([this](beast::error_code ec) {
    if (ec) return;
    const uint64_t served = requests.load(std::memory_order_relaxed);
    if (served != requests_at_trim && in_flight.load() == 0) {
      requests_at_trim = served;
      ::malloc_trim(0);
    }
    TrimWhenQuiet();
  });
}

// An I/O thread. Handlers guard themselves; this is the last line: an
// exception that still escapes one (thrown inside Beast, say) ends only
// that handler and its connection, and the thread goes back to work.
void HttpServer::Impl::RunIo() {
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (...) {
      RecordInternalError(FaultSite::kHttp, CurrentExceptionText());
    }
  }
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

Result<std::unique_ptr<HttpServer>> HttpServer::Create(storage::DocumentStore& store, indexing::IndexEngine* engine,
                                                       HttpServerOptions options) {
  if (options.threads <= 0) options.threads = int(std::max(1u, std::thread::hardware_concurrency()));
  if (options.max_connections == 0) options.max_connections = DefaultMaxConnections();
  auto impl = std::make_unique<Impl>(options);
  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    if (options.tls_cert_file.empty() || options.tls_key_file.empty())
      return Status::InvalidArgument("--tls-cert and --tls-key go together");
    auto ctx = MakeTlsContext(options.tls_cert_file, options.tls_key_file);
    if (!ctx.ok()) return ctx.status();
    impl->tls = std::move(*ctx);
  }
  impl->router = std::make_unique<Router>(store, engine, impl->timers, options.router);
  beast::error_code ec;
  auto address = asio::ip::make_address(options.host, ec);
  if (ec) return Status::InvalidArgument("bad listen address '" + options.host + "': " + ec.message());
  tcp::endpoint endpoint(address, options.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return Status::IOError("cannot listen on " + options.host + ":" + std::to_string(options.port) + ": " +
                           ec.message());
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

std::string HttpServer::LocalEndpoint() const {
  beast::error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  if (ec) return "";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

void HttpServer::Run() {
  Impl* impl = impl_.get();
  impl->signals.async_wait([impl](beast::error_code ec, int) {
    if (!ec) impl->BeginShutdown();
  });
  asio::post(impl->accept_strand, [impl] {
    impl->Accept();
    impl->TrimWhenQuiet();
  });
  std::vector<std::thread> pool;
  for (int i = 1; i < impl->options.threads; ++i) pool.emplace_back([impl] { impl->RunIo(); });
  impl->RunIo();
  for (auto& t : pool) t.join();
  impl->router->JoinBackgroundWork();  // before the store and the indexes close
}

void HttpServer::Stop() {
  Impl* impl = impl_.get();
  asio::post(impl->ioc, [impl] { impl->BeginShutdown(); });
}

}  // namespace corvid::server
