// A connection's bytes, plain TCP or TLS over TCP, behind one type with the
// shape of Beast's AsyncReadStream and AsyncWriteStream. The session's HTTP
// code (Beast's header and body reads, its serializer's writes) is then
// compiled once, not once per stream type: every HTTP operation over an
// ssl::stream nests OpenSSL's read/write state machine around its handler,
// which made http_server.cc the longest compile of every build (3 min in
// Release, 5 under ASan). The price: one virtual call and one small
// allocation per read or write.
//
// Private to the server's Beast code (http_server.cc): it includes Asio.
#pragma once

#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <cstddef>
#include <memory>
#include <utility>

namespace boost::asio::ssl {
class context;
}

namespace corvid::server {

// A move-only completion handler of (error_code, bytes), type-erased.
class IoCompletion {
 public:
  template <class Handler>
  explicit IoCompletion(Handler&& handler)
      : fn_(new Holder<std::decay_t<Handler>>(std::forward<Handler>(handler))) {}

  // Frees the handler's memory before calling it (Asio's rule: the upcall
  // may start the next operation, which can reuse it).
  void operator()(boost::beast::error_code ec, size_t bytes) { fn_.release()->CallAndDelete(ec, bytes); }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual void CallAndDelete(boost::beast::error_code ec, size_t bytes) = 0;
  };
  template <class Handler>
  struct Holder final : Base {
    explicit Holder(Handler&& h) : handler(std::move(h)) {}
    explicit Holder(const Handler& h) : handler(h) {}
    void CallAndDelete(boost::beast::error_code ec, size_t bytes) override {
      Handler local(std::move(handler));
      delete this;
      std::move(local)(ec, bytes);
    }
    Handler handler;
  };
  std::unique_ptr<Base> fn_;
};

class ConnectionStream {
 public:
  using executor_type = boost::beast::tcp_stream::executor_type;

  // The socket's executor (the connection's strand) runs every completion.
  static ConnectionStream Plain(boost::asio::ip::tcp::socket&& socket);
  static ConnectionStream Tls(boost::asio::ip::tcp::socket&& socket, boost::asio::ssl::context& context);

  ConnectionStream(ConnectionStream&&) noexcept;
  ~ConnectionStream();

  executor_type get_executor() { return tcp().get_executor(); }
  // The TCP layer (timeouts, shutdown, close), under TLS too.
  boost::beast::tcp_stream& tcp() { return *tcp_; }
  bool tls() const { return tls_; }

  // TLS only: the server's side of the handshake, given the bytes already
  // read from the socket (beast::async_detect_ssl's); completes with the
  // count of them it used.
  template <class Handler>
  void async_handshake(boost::asio::const_buffer buffered, Handler&& handler) {
    Handshake(buffered, IoCompletion(std::forward<Handler>(handler)));
  }

  // Reads into the first non-empty buffer (a read may always read less).
  template <class MutableBuffers, class Handler>
  void async_read_some(const MutableBuffers& buffers, Handler&& handler) {
    boost::asio::mutable_buffer first;
    for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers);
         ++it) {
      first = *it;
      if (first.size() > 0) break;
    }
    ReadSome(first, IoCompletion(std::forward<Handler>(handler)));
  }

  // Writes from up to kMaxWriteBuffers buffers at once (a write may always
  // write less; Beast's and Asio's writes loop).
  static constexpr size_t kMaxWriteBuffers = 16;
  struct WriteBuffers {
    std::array<boost::asio::const_buffer, kMaxWriteBuffers> items;
    size_t count = 0;
    const boost::asio::const_buffer* begin() const { return items.data(); }
    const boost::asio::const_buffer* end() const { return items.data() + count; }
  };
  template <class ConstBuffers, class Handler>
  void async_write_some(const ConstBuffers& buffers, Handler&& handler) {
    WriteBuffers out;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers) && out.count < kMaxWriteBuffers; ++it) {
      boost::asio::const_buffer b = *it;
      if (b.size() > 0) out.items[out.count++] = b;
    }
    WriteSome(out, IoCompletion(std::forward<Handler>(handler)));
  }

  // The stream's own operations, one implementation per kind.
  class Impl;

 private:
  ConnectionStream(std::unique_ptr<Impl> impl, boost::beast::tcp_stream& tcp, bool tls);
  void Handshake(boost::asio::const_buffer buffered, IoCompletion done);
  void ReadSome(boost::asio::mutable_buffer buffer, IoCompletion done);
  void WriteSome(const WriteBuffers& buffers, IoCompletion done);

  std::unique_ptr<Impl> impl_;
  boost::beast::tcp_stream* tcp_;
  bool tls_;
};

}  // namespace corvid::server
