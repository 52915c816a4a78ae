// Boost.Beast HTTP/1.1 server: one Session per connection on its own strand,
// keep-alive, per-route body limits, idle/slow-client timeouts, and a
// graceful shutdown that finishes requests in flight. Everything about the
// API itself is in router.cc.
#include "server/http_server.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

namespace corvid::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kHeaderLimit = 64 * 1024;
constexpr size_t kReadBufferBytes = 64 * 1024;
constexpr std::chrono::seconds kWriteTimeout{60};
constexpr std::chrono::seconds kDrainAfterErrorTimeout{5};

class AsioTimers : public Timers {
 public:
  explicit AsioTimers(asio::io_context& ioc) : ioc_(ioc) {}
  void RunAfter(std::chrono::milliseconds delay, std::function<void()> fn) override {
    if (delay.count() <= 0) {
      asio::post(ioc_, std::move(fn));
      return;
    }
    auto timer = std::make_shared<asio::steady_timer>(ioc_, delay);
    timer->async_wait([timer, fn = std::move(fn)](beast::error_code) { fn(); });
  }

 private:
  asio::io_context& ioc_;
};

}  // namespace

class HttpServer::Impl {
 public:
  HttpServerOptions options;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::signal_set signals{ioc, SIGINT, SIGTERM};
  asio::steady_timer drain_timer{ioc};
  AsioTimers timers{ioc};
  std::unique_ptr<Router> router;
  std::atomic<int64_t> in_flight{0};  // requests handed to the router, not yet answered
  std::atomic<bool> draining{false};
  std::chrono::steady_clock::time_point drain_deadline;

  explicit Impl(HttpServerOptions o) : options(std::move(o)), ioc(std::max(1, o.threads)) {}

  void Accept();
  void BeginShutdown();
  void CheckDrained();
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, HttpServer::Impl& server) : stream_(std::move(socket)), server_(server) {
    // Beast reads at most the buffer's free capacity per call (>= 512
    // bytes): without room, a 10 MB bulk body takes 20,000 reads, each
    // re-arming the timer. 64 KiB reads keep large bodies cheap.
    buffer_.reserve(kReadBufferBytes);
  }

  void Start() {
    asio::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::ReadHeader, shared_from_this()));
  }

 private:
  void ReadHeader() {
    if (server_.draining) return Close();
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(server_.options.router.max_bulk_bytes);
    stream_.expires_after(server_.options.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::OnHeader, shared_from_this()));
  }

  void OnHeader(beast::error_code ec, size_t) {
    if (ec) return OnReadError(ec);
    const auto& req = parser_->get();
    body_limit_ = server_.router->BodyLimit(std::string_view(req.method_string().data(), req.method_string().size()),
                                            std::string_view(req.target().data(), req.target().size()));
    if (parser_->content_length() && *parser_->content_length() > body_limit_)
      return TooLarge(parser_->content_length());
    parser_->body_limit(body_limit_);
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      return http::async_write(stream_, *cont, [self = shared_from_this(), cont](beast::error_code ec, size_t) {
        if (ec) return self->Close();
        self->ReadBody();
      });
    }
    ReadBody();
  }

  void ReadBody() {
    stream_.expires_after(server_.options.idle_timeout);
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::OnBody, shared_from_this()));
  }

  void OnBody(beast::error_code ec, size_t) {
    if (ec) return OnReadError(ec);
    stream_.expires_never();
    http::request<http::string_body> msg = parser_->release();
    parser_.reset();
    keep_alive_ = msg.keep_alive();
    if (server_.draining) {
      return Write(ErrorResponse(503, "shutting_down", "the server is shutting down"), false);
    }
    Request r;
    r.method = std::string(msg.method_string());
    r.target = std::string(msg.target());
    r.content_type = std::string(msg[http::field::content_type]);
    r.if_match = std::string(msg[http::field::if_match]);
    r.if_none_match = std::string(msg[http::field::if_none_match]);
    auto auth = msg.find(http::field::authorization);
    r.has_authorization = auth != msg.end();
    if (r.has_authorization) r.authorization = std::string(auth->value());
    r.body = std::move(msg.body());
    ++server_.in_flight;
    // A reply made while this handler runs (most: Handle answers before
    // it returns) is written at once, on this thread; one from elsewhere
    // (a query that waited for its index, on a timer) goes through the
    // strand. Posting every reply cost a wake-up of the other I/O thread
    // and a hand-off per request.
    server_.router->Handle(std::move(r), [self = shared_from_this()](Response resp) {
      asio::dispatch(self->stream_.get_executor(),
                     [self, resp = std::move(resp)]() mutable { self->Write(std::move(resp), true); });
    });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == http::error::body_limit) return TooLarge(parser_->content_length());
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted || ec == asio::error::broken_pipe)
      return Close();
    if (ec == http::error::header_limit)
      return WriteAndDrain(ErrorResponse(431, "headers_too_large", "request headers exceed 64 KiB"));
    // Anything else is a malformed request: answer it, then close.
    WriteAndDrain(ErrorResponse(400, "bad_request", "malformed HTTP request: " + ec.message()));
  }

  void TooLarge(boost::optional<uint64_t> content_length) {  // the parser's: none for a chunked body
    std::string msg = "request body exceeds the limit of " + std::to_string(body_limit_) + " bytes";
    if (content_length) msg += " (Content-Length " + std::to_string(*content_length) + ")";
    WriteAndDrain(ErrorResponse(413, "body_too_large", msg));
  }

  // Answers and closes, reading (and discarding) what the client still
  // sends so that it sees the answer rather than a connection reset.
  void WriteAndDrain(Response resp) {
    keep_alive_ = false;
    resp.close = true;
    draining_input_ = true;
    Write(std::move(resp), false);
  }

  void Write(Response resp, bool counted) {
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(resp.status), 11);
    if (!resp.content_type.empty()) res->set(http::field::content_type, resp.content_type);
    if (resp.etag) res->set(http::field::etag, "\"" + std::to_string(*resp.etag) + "\"");
    if (!resp.allow.empty()) res->set(http::field::allow, resp.allow);
    if (!resp.www_authenticate.empty()) res->set(http::field::www_authenticate, resp.www_authenticate);
    res->body() = std::move(resp.body);
    res->keep_alive(keep_alive_ && !resp.close && !server_.draining);
    res->prepare_payload();
    // HEAD: GET's Content-Length stays in the header; the serializer writes
    // the (now empty) body, so no body bytes follow.
    if (resp.omit_body) res->body().clear();
    stream_.expires_after(kWriteTimeout);
    http::async_write(stream_, *res, [self = shared_from_this(), res, counted](beast::error_code ec, size_t) {
      if (counted) --self->server_.in_flight;
      if (ec) return self->Close();
      if (self->draining_input_) return self->DrainInput();
      if (!res->keep_alive()) return self->Close();
      self->ReadHeader();
    });
  }

  void DrainInput() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kDrainAfterErrorTimeout);
    discard_.resize(64 * 1024);
    stream_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      self->stream_.async_read_some(asio::buffer(self->discard_),
                                    [self](beast::error_code ec2, size_t n) { self->OnDiscard(ec2, n); });
    });
  }

  void OnDiscard(beast::error_code ec, size_t) {
    if (ec) return Close();
    stream_.async_read_some(asio::buffer(discard_),
                            [self = shared_from_this()](beast::error_code ec2, size_t n) { self->OnDiscard(ec2, n); });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  size_t body_limit_ = 0;  // the current request's (OnHeader), for its 413
  bool draining_input_ = false;
  std::vector<char> discard_;
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      // Out of descriptors or a transient error: keep accepting.
    } else {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(std::move(socket), *this)->Start();
    }
    Accept();
  });
}

void HttpServer::Impl::BeginShutdown() {
  if (draining.exchange(true)) return;
  beast::error_code ignored;
  acceptor.close(ignored);
  signals.cancel(ignored);
  router->CompleteWaiters();
  drain_deadline = std::chrono::steady_clock::now() + options.drain_timeout;
  CheckDrained();
}

void HttpServer::Impl::CheckDrained() {
  if (in_flight.load() <= 0 || std::chrono::steady_clock::now() >= drain_deadline) {
    ioc.stop();
    return;
  }
  drain_timer.expires_after(std::chrono::milliseconds(10));
  drain_timer.async_wait([this](beast::error_code) { CheckDrained(); });
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

Result<std::unique_ptr<HttpServer>> HttpServer::Create(storage::DocumentStore& store, indexing::IndexEngine* engine,
                                                       HttpServerOptions options) {
  if (options.threads <= 0) options.threads = int(std::max(1u, std::thread::hardware_concurrency()));
  auto impl = std::make_unique<Impl>(options);
  impl->router = std::make_unique<Router>(store, engine, impl->timers, options.router);
  beast::error_code ec;
  auto address = asio::ip::make_address(options.host, ec);
  if (ec) return Status::InvalidArgument("bad listen address '" + options.host + "': " + ec.message());
  tcp::endpoint endpoint(address, options.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::IOError("cannot listen on " + options.host + ":" + std::to_string(options.port) + ": " + ec.message());
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
  impl->Accept();
  std::vector<std::thread> pool;
  for (int i = 1; i < impl->options.threads; ++i) pool.emplace_back([impl] { impl->ioc.run(); });
  impl->ioc.run();
  for (auto& t : pool) t.join();
}

void HttpServer::Stop() {
  Impl* impl = impl_.get();
  asio::post(impl->ioc, [impl] { impl->BeginShutdown(); });
}

}  // namespace corvid::server
