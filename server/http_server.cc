// Boost.Beast HTTP/1.1 server: one Session per connection on its own strand,
// keep-alive, limits checked before memory is spent, idle/header/body
// deadlines, a bounded number of connections, and a graceful shutdown that
// finishes requests in flight. With a certificate it speaks HTTPS only
// (Asio's OpenSSL stream; TLS 1.2 and 1.3): a Session is the same code over
// either stream, compiled once (connection_stream.h). Everything about the
// API itself is in router.cc.
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
#include "server/http_server.h"

#include <malloc.h>
#include <sys/resource.h>

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <limits>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/faults.h"
#include "server/body_stream.h"
#include "server/connection_stream.h"

namespace corvid::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kReadBufferBytes = 64 * 1024;  // one read of a header or body
constexpr size_t kIdleReadBytes = 4 * 1024;     // what a connection that never sent a byte holds
constexpr size_t kMaxChunkExtensionBytes = 4 * 1024;
constexpr std::chrono::seconds kWriteTimeout{60};
constexpr std::chrono::seconds kDrainAfterErrorTimeout{5};
constexpr std::chrono::milliseconds kMaxAcceptBackoff{1000};
// How often the server looks for a quiet moment to give freed memory back.
constexpr std::chrono::seconds kTrimInterval{2};

class AsioTimers : public Timers {
 public:
  explicit AsioTimers(asio::io_context& ioc) : ioc_(ioc) {}
  // `fn` runs guarded: a request it was to answer gets its 500 from the
  // router's Answer when `fn` unwinds (router.cc).
  void RunAfter(std::chrono::milliseconds delay, std::function<void()> fn) override {
    auto guarded = [fn = std::move(fn)] {
      try {
        fn();
      } catch (...) {
        RecordInternalError(FaultSite::kHandler, CurrentExceptionText());
      }
    };
    if (delay.count() <= 0) {
      asio::post(ioc_, std::move(guarded));
      return;
    }
    auto timer = std::make_shared<asio::steady_timer>(ioc_, delay);
    timer->async_wait([timer, guarded = std::move(guarded)](beast::error_code) { guarded(); });
  }

 private:
  asio::io_context& ioc_;
};

// Why RequestParser stopped a request before its handler.
enum class Refusal { kNone, kHeaderTooLarge, kTrailerTooLarge, kTargetTooLong, kBadVersion, kBadChunkExtension };

// Parses one request straight into the router's Request, keeping only the
// fields Corvid reads (so no header container, and nothing that throws on
// a long field). The header's bytes are bounded by basic_parser's
// header_limit; a trailer's, and field counts, here.
class RequestParser final : public http::basic_parser<true> {
 public:
  struct Limits {
    size_t max_header_bytes;
    size_t max_header_fields;
    size_t max_target_bytes;
  };

  explicit RequestParser(const Limits& limits) : limits_(limits) {
    header_limit(static_cast<uint32_t>(std::min<size_t>(limits.max_header_bytes, UINT32_MAX)));
  }

  Request& request() { return request_; }
  Refusal refusal() const { return refusal_; }
  bool header_done() const { return header_done_; }
  bool expects_continue() const { return expect_continue_; }

 private:
  void Refuse(Refusal why, beast::error_code& ec) {
    refusal_ = why;
    ec = http::error::header_limit;  // any error stops the parser; refusal_ says which
  }

  void on_request_impl(http::verb, beast::string_view method, beast::string_view target, int version,
                       beast::error_code& ec) override {
    if (target.size() > limits_.max_target_bytes) return Refuse(Refusal::kTargetTooLong, ec);
    if (version != 10 && version != 11) return Refuse(Refusal::kBadVersion, ec);
    request_.method.assign(method.data(), method.size());
    request_.target.assign(target.data(), target.size());
  }

  void on_response_impl(int, beast::string_view, int, beast::error_code& ec) override {
    ec = http::error::bad_version;  // a request parser never sees a status line
  }

  void on_field_impl(http::field f, beast::string_view name, beast::string_view value, beast::error_code& ec) override {
    ++fields_;
    field_bytes_ += name.size() + value.size() + 4;  // "name: value\r\n"
    if (header_done_) {                              // a trailer field: counted, bounded, ignored
      if (fields_ > limits_.max_header_fields || field_bytes_ > limits_.max_header_bytes)
        Refuse(Refusal::kTrailerTooLarge, ec);
      return;
    }
    if (fields_ > limits_.max_header_fields) return Refuse(Refusal::kHeaderTooLarge, ec);
    switch (f) {
      case http::field::content_type:
        return Combine(request_.content_type, value);
      case http::field::if_match:
        return Combine(request_.if_match, value);
      case http::field::if_none_match:
        return Combine(request_.if_none_match, value);
      case http::field::authorization:
        request_.has_authorization = true;
        return Combine(request_.authorization, value);
      case http::field::expect:
        expect_continue_ = beast::iequals(value, "100-continue");
        return;
      default:
        return;
    }
  }

  // A field sent twice reads as one list (RFC 9110 §5.3), which the router
  // then refuses where only one value makes sense.
  static void Combine(std::string& into, beast::string_view value) {
    if (!into.empty()) into += ", ";
    into.append(value.data(), value.size());
  }

  void on_header_impl(beast::error_code&) override {
    header_done_ = true;
    fields_ = 0;
    field_bytes_ = 0;
  }

  void on_body_init_impl(const boost::optional<uint64_t>& content_length, beast::error_code&) override {
    // basic_parser has checked Content-Length against the body limit, so
    // this is at most the route's limit; one allocation, as Beast's
    // string_body makes (growing by doubling cost bulk loads a fifth of
    // their speed). Pages the client never sends are never touched.
    if (content_length) request_.body.reserve(*content_length);
  }

  size_t on_body_impl(beast::string_view body, beast::error_code&) override {
    request_.body.append(body.data(), body.size());
    return body.size();
  }

  void on_chunk_header_impl(uint64_t, beast::string_view extensions, beast::error_code& ec) override {
    if (extensions.size() > kMaxChunkExtensionBytes) Refuse(Refusal::kBadChunkExtension, ec);
  }

  size_t on_chunk_body_impl(uint64_t, beast::string_view body, beast::error_code&) override {
    request_.body.append(body.data(), body.size());
    return body.size();
  }

  void on_finish_impl(beast::error_code&) override {}

  Limits limits_;
  Request request_;
  Refusal refusal_ = Refusal::kNone;
  size_t fields_ = 0;
  size_t field_bytes_ = 0;
  bool header_done_ = false;
  bool expect_continue_ = false;
};

// What the server knows of a connection, whatever its stream: the idle
// list holds these, and reclaims one by closing it on its own strand.
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  // Closes the connection if it is still waiting for a request. Runs on
  // the session's strand.
  virtual void Reclaim() = 0;
  virtual asio::any_io_executor executor() = 0;

  bool listed_ = false;  // in the server's idle list; guarded by its idle_mu
  std::list<SessionBase*>::iterator idle_pos_;
};

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
  if (ec) return Status::InvalidArgument("--tls-cert " + cert_file + ": cannot load a PEM certificate chain: " + ec.message());
  ctx->use_private_key_file(key_file, asio::ssl::context::pem, ec);
  if (ec)  // OpenSSL also checks here that the key is the certificate's
    return Status::InvalidArgument("--tls-key " + key_file + ": cannot load a PEM private key matching the certificate in " +
                                   cert_file + ": " + ec.message());
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

}  // namespace

class HttpServer::Impl {
 public:
  HttpServerOptions options;
  // The connection registry comes before ioc: sessions still pending when
  // the server is destroyed die inside ioc's destructor, and touch it then.
  std::atomic<size_t> connections{0};
  std::atomic<bool> accept_paused{false};  // at the limit with nothing idle: a closing session resumes
  std::atomic<bool> destroyed{false};      // ~Impl began: a closing session resumes nothing
  std::mutex idle_mu;
  std::list<SessionBase*> idle;  // guarded by idle_mu; oldest first
  std::unique_ptr<asio::ssl::context> tls;  // set: HTTPS only
  asio::io_context ioc;
  // The acceptor, its back-off timer and the accept state live on one strand.
  asio::strand<asio::io_context::executor_type> accept_strand{ioc.get_executor()};
  tcp::acceptor acceptor{accept_strand};
  asio::steady_timer accept_timer{accept_strand};
  asio::steady_timer trim_timer{accept_strand};  // TrimWhenQuiet
  std::chrono::milliseconds accept_backoff{0};
  asio::signal_set signals{ioc, SIGINT, SIGTERM};
  asio::steady_timer drain_timer{ioc};
  AsioTimers timers{ioc};
  std::unique_ptr<Router> router;
  std::atomic<int64_t> in_flight{0};  // requests handed to the router, not yet answered
  std::atomic<uint64_t> requests{0};   // handed to the router, ever (TrimWhenQuiet)
  uint64_t requests_at_trim = 0;       // on accept_strand
  std::atomic<bool> draining{false};
  std::chrono::steady_clock::time_point drain_deadline;

  explicit Impl(HttpServerOptions o) : options(std::move(o)), ioc(std::max(1, options.threads)) {}
  ~Impl() { destroyed.store(true); }

  void Accept();
  void OnAccept(beast::error_code ec, tcp::socket socket);
  bool ReclaimIdle();
  void SessionClosed();
  void BeginShutdown();
  void CheckDrained();
  void RunIo();
  void TrimWhenQuiet();
};

namespace {

// One connection, over TCP or TLS (connection_stream.h).
class Session final : public SessionBase {
 public:
  Session(HttpServer::Impl& server, ConnectionStream&& stream)
      : stream_(std::move(stream)), server_(server), buffer_(BufferLimit(server.options)) {
    server_.connections.fetch_add(1);
  }

  ~Session() {
    if (streaming_) {
      streaming_->OnCancel(nullptr);
      streaming_->Cancel();
    }
    {
      std::lock_guard lock(server_.idle_mu);
      if (listed_) server_.idle.erase(idle_pos_);
    }
    server_.SessionClosed();
  }

  void Start() {
    asio::dispatch(stream_.get_executor(), [self = Self()] {
      self->Guard([&] {
        if (self->stream_.tls()) self->Handshake();
        else self->WaitForRequest();
      });
    });
  }

  // The acceptor needs room: close this connection if it is still waiting
  // for a request (or, over TLS, for its handshake).
  void Reclaim() override {
    if (!idle_) return;
    idle_ = false;  // closing: a pending handshake's failure is not counted again
    server_.router->CountRejected(RejectReason::kIdleReclaimed);
    Close();
  }

  asio::any_io_executor executor() override { return stream_.get_executor(); }

 private:
  std::shared_ptr<Session> Self() { return std::static_pointer_cast<Session>(shared_from_this()); }

  // TLS: the handshake, within the header's deadline; until it is done the
  // connection has sent nothing of a request and may be reclaimed. A client
  // speaking plain HTTP to the HTTPS port gets a plain 400 that says so.
  void Handshake() {
    SetIdle(true);
    stream_.tcp().expires_after(std::min(server_.options.header_timeout, server_.options.idle_timeout));
    beast::async_detect_ssl(stream_.tcp(), buffer_, [self = Self()](beast::error_code ec, bool tls) {
      self->Guard([&] {
        if (!self->idle_) return self->Close();  // reclaimed
        if (ec) return self->Close();
        if (!tls) return self->RefusePlainHttp();
        self->stream_.async_handshake(self->buffer_.data(), [self](beast::error_code ec, size_t used) {
          self->Guard([&] {
            if (!self->idle_) return self->Close();
            self->SetIdle(false);
            if (ec) {
              self->server_.router->CountRejected(RejectReason::kTlsHandshake);
              return self->Close();
            }
            self->buffer_.consume(used);
            self->WaitForRequest();
          });
        });
      });
    });
  }

  // Plain HTTP on the HTTPS port: one 400, unencrypted, then close.
  void RefusePlainHttp() {
    SetIdle(false);
    server_.router->CountRejected(RejectReason::kTlsHandshake);
    // Written by hand: Beast's serializer over the bare TCP stream would be
    // a third instantiation of its write for this one answer (4-8 s more
    // of g++ -O3 for this file, two runs each).
    Response err = ErrorResponse(400, "https_required", "this server speaks HTTPS only");
    auto text = std::make_shared<std::string>("HTTP/1.1 400 Bad Request\r\nContent-Type: " + err.content_type +
                                              "\r\nContent-Length: " + std::to_string(err.body.size()) +
                                              "\r\nConnection: close\r\n\r\n" + err.body);
    stream_.tcp().expires_after(kWriteTimeout);
    asio::async_write(stream_.tcp(), asio::buffer(*text), [self = Self(), text](beast::error_code, size_t) { self->Close(); });
  }

  // Unparsed bytes held at once: a whole header, or one chunk-size line or
  // trailer, plus one read.
  static size_t BufferLimit(const HttpServerOptions& o) { return o.max_header_bytes + kReadBufferBytes; }

  // Runs one step of the connection; see the rule at the top of the file.
  template <class F>
  void Guard(F&& step) noexcept {
    try {
      step();
    } catch (...) {
      OnFault();
    }
  }

  void OnFault() noexcept {
    RecordInternalError(awaiting_answer_ ? FaultSite::kHandler : FaultSite::kHttp, CurrentExceptionText());
    try {
      if (awaiting_answer_ && answered_) return;  // the router's 500 (or its answer) is being written
      if (awaiting_answer_) {
        answered_ = true;
        keep_alive_ = false;
        return Write(ErrorResponse(500, "internal", "internal error (logged by the server)"), true);
      }
    } catch (...) {
    }
    Close();
  }

  // Waits, idle, for the first byte of the next request; the connection may
  // be reclaimed meanwhile. Pipelined bytes already buffered skip the wait.
  void WaitForRequest() {
    if (server_.draining) return Close();
    if (buffer_.size() > 0) return ReadHeader();
    if (buffer_.capacity() > 2 * kReadBufferBytes) buffer_.shrink_to_fit();
    SetIdle(true);
    stream_.tcp().expires_after(server_.options.idle_timeout);
    stream_.async_read_some(buffer_.prepare(kIdleReadBytes),
                            [self = Self()](beast::error_code ec, size_t n) {
                              self->Guard([&] {
                                self->SetIdle(false);
                                if (ec) return self->Close();
                                self->buffer_.commit(n);
                                self->ReadHeader();
                              });
                            });
  }

  void SetIdle(bool idle) {
    idle_ = idle;
    std::lock_guard lock(server_.idle_mu);
    if (idle && !listed_) {
      idle_pos_ = server_.idle.insert(server_.idle.end(), this);
      listed_ = true;
    } else if (!idle && listed_) {
      server_.idle.erase(idle_pos_);
      listed_ = false;
    }
  }

  void ReadHeader() {
    if (server_.draining) return Close();
    // Beast reads at most the buffer's free capacity per call: without
    // room, a bulk body takes one read (and one wake-up) per 4 KiB.
    buffer_.reserve(kReadBufferBytes);
    parser_.emplace(RequestParser::Limits{server_.options.max_header_bytes, server_.options.max_header_fields,
                                          server_.options.max_target_bytes});
    // No body limit while the header is read: which limit applies, and
    // whether the client may send a body at all, are known only from the
    // whole header (OnHeader), and no body byte is read before. (Beast
    // 1.74 checks Content-Length against the limit at the header's end,
    // so a limit here would refuse before the key is seen, naming no
    // route's limit; boost::none would refuse every Content-Length.)
    parser_->body_limit(std::numeric_limits<uint64_t>::max());
    reading_header_ = true;
    stream_.tcp().expires_after(std::min(server_.options.header_timeout, server_.options.idle_timeout));
    http::async_read_header(stream_, buffer_, *parser_, [self = Self()](beast::error_code ec, size_t) {
      self->Guard([&] { self->OnHeader(ec); });
    });
  }

  void OnHeader(beast::error_code ec) {
    reading_header_ = false;
    if (ec) return OnReadError(ec);
    Request& req = parser_->request();
    body_limit_ = server_.router->BodyLimit(req.method, req.target, &body_limit_name_);
    if (!parser_->is_done()) {
      // A body follows. First whether this client may send it, from the
      // header alone (a refused body is never read, and an unauthenticated
      // client learns nothing of the limits: 401/403 before any 413); then
      // its size, from Content-Length, before anything is allocated.
      if (auto refusal =
              server_.router->Admit(req.method, req.target, req.has_authorization ? &req.authorization : nullptr))
        return WriteAndDrain(std::move(*refusal));
      if (parser_->content_length() && *parser_->content_length() > body_limit_)
        return TooLarge(parser_->content_length());
    }
    parser_->body_limit(body_limit_);
    if (parser_->expects_continue() && !parser_->is_done()) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      return http::async_write(stream_, *cont, [self = Self(), cont](beast::error_code ec, size_t) {
        self->Guard([&] {
          if (ec) return self->Close();
          self->ReadBody();
        });
      });
    }
    ReadBody();
  }

  void ReadBody() {
    if (parser_->is_done()) return Dispatch();
    stream_.tcp().expires_after(server_.options.idle_timeout);
    http::async_read(stream_, buffer_, *parser_, [self = Self()](beast::error_code ec, size_t) {
      self->Guard([&] {
        if (ec) return self->OnReadError(ec);
        self->Dispatch();
      });
    });
  }

  // Hands the parsed request to the router. Its reply may come now (most
  // do) or later from another thread (a write, after the merger commits; a
  // query that waited for its index): either way it is written on this
  // strand, once, and only if it answers the current request.
  void Dispatch() {
    stream_.tcp().expires_never();
    keep_alive_ = parser_->keep_alive();
    Request request = std::move(parser_->request());
    parser_.reset();
    if (server_.draining) return Write(ErrorResponse(503, "shutting_down", "the server is shutting down"), false);
    const uint64_t seq = ++request_seq_;
    awaiting_answer_ = true;
    answered_ = false;
    ++server_.in_flight;
    server_.requests.fetch_add(1, std::memory_order_relaxed);
    server_.router->Handle(std::move(request), [self = Self(), seq](Response resp) {
      asio::dispatch(self->stream_.get_executor(), [self, seq, resp = std::move(resp)]() mutable {
        self->Guard([&] {
          if (seq != self->request_seq_ || self->answered_) return;  // answered already (a fault's 500)
          self->answered_ = true;
          self->Write(std::move(resp), true);
        });
      });
    });
  }

  void OnReadError(beast::error_code ec) {
    const bool timed_out = ec == beast::error::timeout;
    if (parser_) {
      switch (parser_->refusal()) {
        case Refusal::kNone:
          break;
        case Refusal::kHeaderTooLarge:
          return Reject(RejectReason::kHeaderTooLarge, 431, "headers_too_large",
                        "more than " + std::to_string(server_.options.max_header_fields) + " header fields");
        case Refusal::kTrailerTooLarge:
          return Reject(RejectReason::kHeaderTooLarge, 431, "headers_too_large",
                        "the chunked body's trailer exceeds " + std::to_string(server_.options.max_header_bytes) +
                            " bytes or " + std::to_string(server_.options.max_header_fields) + " fields");
        case Refusal::kTargetTooLong:
          return Reject(RejectReason::kTargetTooLong, 414, "uri_too_long",
                        "the request target exceeds " + std::to_string(server_.options.max_target_bytes) + " bytes");
        case Refusal::kBadVersion:
          return Reject(RejectReason::kMalformed, 400, "bad_request", "only HTTP/1.0 and HTTP/1.1 are spoken here");
        case Refusal::kBadChunkExtension:
          return Reject(RejectReason::kMalformed, 400, "bad_request",
                        "a chunk extension exceeds " + std::to_string(kMaxChunkExtensionBytes) + " bytes");
      }
    }
    if (ec == http::error::body_limit) return TooLarge(parser_ ? parser_->content_length() : boost::none);
    if (timed_out && reading_header_) {
      server_.router->CountRejected(RejectReason::kHeaderTimeout);
      return Close();
    }
    if (ec == http::error::end_of_stream || timed_out || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted || ec == asio::error::broken_pipe)
      return Close();
    if (ec == http::error::header_limit)
      return Reject(
          RejectReason::kHeaderTooLarge, 431, "headers_too_large",
          "the request line and header exceed " + std::to_string(server_.options.max_header_bytes) + " bytes");
    if (ec == http::error::buffer_overflow)  // a chunk-size line or trailer larger than the read buffer
      return Reject(
          RejectReason::kHeaderTooLarge, 431, "headers_too_large",
          "a chunk-size line or the trailer exceeds " + std::to_string(BufferLimit(server_.options)) + " bytes");
    // Anything else is a malformed request: answer it, then close.
    Reject(RejectReason::kMalformed, 400, "bad_request", "malformed HTTP request: " + ec.message());
  }

  void Reject(RejectReason reason, int status, std::string_view code, const std::string& message) {
    server_.router->CountRejected(reason);
    WriteAndDrain(ErrorResponse(status, code, message));
  }

  void TooLarge(boost::optional<uint64_t> content_length) {  // the parser's: none for a chunked body
    std::string msg = "request body exceeds the limit of " + std::to_string(body_limit_) + " bytes";
    if (content_length) msg += " (Content-Length " + std::to_string(*content_length) + ")";
    if (!body_limit_name_.empty()) msg += " for " + std::string(body_limit_name_);
    Reject(RejectReason::kBodyTooLarge, 413, "body_too_large", msg);
  }

  // Answers and closes, reading (and discarding) what the client still
  // sends so that it sees the answer rather than a connection reset.
  void WriteAndDrain(Response resp) {
    parser_.reset();
    keep_alive_ = false;
    resp.close = true;
    draining_input_ = true;
    Write(std::move(resp), false);
  }

  // Writes `resp`; `counted`: it answers a request the router took (the
  // drain waits for those). If it throws, nothing is being written and the
  // request no longer counts.
  void Write(Response resp, bool counted) {
    try {
      StartWrite(std::move(resp), counted);
    } catch (...) {
      if (counted) {
        awaiting_answer_ = false;
        --server_.in_flight;
      }
      throw;
    }
  }

  void StartWrite(Response resp, bool counted) {
    if (resp.stream) return resp.omit_body ? HeadOfStream(std::move(resp), counted) : StartStream(std::move(resp), counted);
    if (resp.body.size() > server_.options.router.max_response_bytes) {
      // Handlers stop building an answer at the limit; this catches any other.
      resp = ErrorResponse(400, "response_too_large",
                           "the answer would exceed " + std::to_string(server_.options.router.max_response_bytes) +
                               " bytes (--max-response-bytes)");
    }
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(resp.status), 11);
    if (!resp.content_type.empty()) res->set(http::field::content_type, resp.content_type);
    if (resp.etag) res->set(http::field::etag, "\"" + std::to_string(*resp.etag) + "\"");
    if (!resp.allow.empty()) res->set(http::field::allow, resp.allow);
    if (!resp.www_authenticate.empty()) res->set(http::field::www_authenticate, resp.www_authenticate);
    for (const auto& [name, value] : resp.headers) res->set(name, value);
    res->body() = std::move(resp.body);
    res->keep_alive(keep_alive_ && !resp.close && !server_.draining);
    res->prepare_payload();
    // HEAD: GET's Content-Length stays in the header; the serializer writes
    // the (now empty) body, so no body bytes follow.
    if (resp.omit_body) res->body().clear();
    stream_.tcp().expires_after(kWriteTimeout);
    http::async_write(stream_, *res, [self = Self(), res, counted](beast::error_code ec, size_t) {
      self->Written(ec, res->keep_alive(), counted);
    });
  }

  // A HEAD of a streamed answer: the header GET sends (chunked transfer
  // coding, so no Content-Length), and no body (RFC 9110 §9.3.2).
  void HeadOfStream(Response resp, bool counted) {
    resp.stream->Cancel();
    auto res = StreamHeader(resp);
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
    stream_.tcp().expires_after(kWriteTimeout);
    http::async_write_header(stream_, *sr, [self = Self(), res, sr, counted](beast::error_code ec, size_t) {
      self->Written(ec, res->keep_alive(), counted);
    });
  }

  // A whole answer is written: read the next request, or close.
  void Written(beast::error_code ec, bool keep_alive, bool counted) {
    if (counted) --server_.in_flight;
    Guard([&] {
      if (counted) awaiting_answer_ = false;
      if (ec) return Close();
      if (draining_input_) return DrainInput();
      if (!keep_alive) return Close();
      WaitForRequest();
    });
  }

  // A streamed body (body_stream.h): the header with chunked transfer
  // coding, then one chunk per piece, each asked for once the one before
  // is written, so the producer runs at the client's pace with at most a
  // few pieces in memory. A producer's error closes the connection before
  // the last chunk: the client sees the body cut short, never a whole one.
  // The header of a streamed answer (chunked transfer coding), GET's and HEAD's.
  std::shared_ptr<http::response<http::empty_body>> StreamHeader(const Response& resp) const {
    auto res = std::make_shared<http::response<http::empty_body>>(static_cast<http::status>(resp.status), 11);
    if (!resp.content_type.empty()) res->set(http::field::content_type, resp.content_type);
    for (const auto& [name, value] : resp.headers) res->set(name, value);
    res->keep_alive(keep_alive_ && !resp.close && !server_.draining);
    res->chunked(true);
    return res;
  }

  void StartStream(Response resp, bool counted) {
    auto res = StreamHeader(resp);
    streaming_ = std::move(resp.stream);
    streaming_counted_ = counted;
    // A shutdown cancels the stream: end the response even if it is stuck
    // writing to a client that stopped reading (the drain waits for it).
    streaming_->OnCancel([weak = std::weak_ptr<Session>(Self())] {
      if (auto self = weak.lock()) asio::post(self->stream_.get_executor(), [self] { self->Close(); });
    });
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
    stream_.tcp().expires_after(kWriteTimeout);
    http::async_write_header(stream_, *sr, [self = Self(), res, sr](beast::error_code ec, size_t) {
      self->Guard([&] {
        if (ec) return self->EndStream(false);
        self->stream_keep_alive_ = res->keep_alive();
        self->NextPiece();
      });
    });
  }

  void NextPiece() {
    std::weak_ptr<Session> weak = Self();
    streaming_->Next([weak](Result<std::string> piece) {
      auto self = weak.lock();
      if (!self) return;
      asio::dispatch(self->stream_.get_executor(), [self, piece = std::move(piece)]() mutable {
        self->Guard([&] { self->WritePiece(std::move(piece)); });
      });
    });
  }

  void WritePiece(Result<std::string> piece) {
    if (!streaming_) return;
    if (!piece.ok()) return EndStream(false);
    stream_.tcp().expires_after(kWriteTimeout);
    if (piece->empty()) {
      return asio::async_write(stream_, http::make_chunk_last(), [self = Self()](beast::error_code ec, size_t) {
        self->Guard([&] { self->EndStream(!ec); });
      });
    }
    auto data = std::make_shared<std::string>(std::move(*piece));
    asio::async_write(stream_, http::make_chunk(asio::buffer(*data)),
                      [self = Self(), data](beast::error_code ec, size_t) {
                        self->Guard([&] {
                          if (ec) return self->EndStream(false);
                          self->NextPiece();
                        });
                      });
  }

  void EndStream(bool whole) {
    if (auto stream = std::move(streaming_)) {
      stream->OnCancel(nullptr);  // ended here: nothing to close
      stream->Cancel();
    }
    if (streaming_counted_) {
      --server_.in_flight;
      awaiting_answer_ = false;
      streaming_counted_ = false;
    }
    if (!whole || !stream_keep_alive_) return Close();
    WaitForRequest();
  }

  void DrainInput() {
    beast::error_code ignored;
    stream_.tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.tcp().expires_after(kDrainAfterErrorTimeout);
    discard_.resize(16 * 1024);
    ReadDiscard();
  }

  void ReadDiscard() {
    stream_.async_read_some(asio::buffer(discard_), [self = Self()](beast::error_code ec, size_t) {
      self->Guard([&] {
        if (ec) return self->Close();
        self->ReadDiscard();
      });
    });
  }

  void Close() noexcept {
    beast::error_code ignored;
    stream_.tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.tcp().socket().close(ignored);
  }

  ConnectionStream stream_;
  HttpServer::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  bool keep_alive_ = true;
  size_t body_limit_ = 0;              // the current request's (OnHeader), for its 413
  std::string_view body_limit_name_;  // and what it is (Router::BodyLimit's static text)
  bool draining_input_ = false;
  bool reading_header_ = false;
  bool idle_ = false;             // waiting for a request's first byte (reclaimable)
  uint64_t request_seq_ = 0;      // the request being answered
  bool awaiting_answer_ = false;  // handed to the router, its answer not yet written
  bool answered_ = false;         // the current request's answer has been sent to Write
  std::vector<char> discard_;
  std::shared_ptr<BodyStream> streaming_;  // the body being streamed, if any
  bool streaming_counted_ = false;
  bool stream_keep_alive_ = false;
};

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
  auto stream = tls ? ConnectionStream::Tls(std::move(socket), *tls) : ConnectionStream::Plain(std::move(socket));
  std::make_shared<Session>(*this, std::move(stream))->Start();
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
