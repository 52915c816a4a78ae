// The two kinds of ConnectionStream (connection_stream.h): each instantiates
// its stream's read, write (and, for TLS, handshake) operation once, around
// the one erased handler type.
#include "server/connection_stream.h"

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#include <cassert>

namespace corvid::server {

namespace asio = boost::asio;
namespace beast = boost::beast;

class ConnectionStream::Impl {
 public:
  virtual ~Impl() = default;
  virtual void ReadSome(asio::mutable_buffer buffer, IoCompletion done) = 0;
  virtual void WriteSome(const WriteBuffers& buffers, IoCompletion done) = 0;
  virtual void Handshake(asio::const_buffer buffered, IoCompletion done) = 0;
};

namespace {

class PlainImpl final : public ConnectionStream::Impl {
 public:
  explicit PlainImpl(asio::ip::tcp::socket&& socket) : stream(std::move(socket)) {}
  void ReadSome(asio::mutable_buffer buffer, IoCompletion done) override {
    stream.async_read_some(buffer, std::move(done));
  }
  void WriteSome(const ConnectionStream::WriteBuffers& buffers, IoCompletion done) override {
    stream.async_write_some(buffers, std::move(done));
  }
  void Handshake(asio::const_buffer, IoCompletion) override { assert(false && "no handshake over plain TCP"); }

  beast::tcp_stream stream;
};

class TlsImpl final : public ConnectionStream::Impl {
 public:
  TlsImpl(asio::ip::tcp::socket&& socket, asio::ssl::context& context) : stream(std::move(socket), context) {}
  void ReadSome(asio::mutable_buffer buffer, IoCompletion done) override {
    stream.async_read_some(buffer, std::move(done));
  }
  // beast::ssl_stream gathers small buffers into one record (its
  // flat_stream): a header and a short body go out as one.
  void WriteSome(const ConnectionStream::WriteBuffers& buffers, IoCompletion done) override {
    stream.async_write_some(buffers, std::move(done));
  }
  void Handshake(asio::const_buffer buffered, IoCompletion done) override {
    stream.async_handshake(asio::ssl::stream_base::server, buffered, std::move(done));
  }

  beast::ssl_stream<beast::tcp_stream> stream;
};

}  // namespace

ConnectionStream ConnectionStream::Plain(asio::ip::tcp::socket&& socket) {
  auto impl = std::make_unique<PlainImpl>(std::move(socket));
  beast::tcp_stream& tcp = impl->stream;
  return ConnectionStream(std::move(impl), tcp, false);
}

ConnectionStream ConnectionStream::Tls(asio::ip::tcp::socket&& socket, asio::ssl::context& context) {
  auto impl = std::make_unique<TlsImpl>(std::move(socket), context);
  beast::tcp_stream& tcp = beast::get_lowest_layer(impl->stream);
  return ConnectionStream(std::move(impl), tcp, true);
}

ConnectionStream::ConnectionStream(std::unique_ptr<Impl> impl, beast::tcp_stream& tcp, bool tls)
    : impl_(std::move(impl)), tcp_(&tcp), tls_(tls) {}

ConnectionStream::ConnectionStream(ConnectionStream&&) noexcept = default;
ConnectionStream::~ConnectionStream() = default;

void ConnectionStream::Handshake(asio::const_buffer buffered, IoCompletion done) {
  impl_->Handshake(buffered, std::move(done));
}

void ConnectionStream::ReadSome(asio::mutable_buffer buffer, IoCompletion done) {
  impl_->ReadSome(buffer, std::move(done));
}

void ConnectionStream::WriteSome(const WriteBuffers& buffers, IoCompletion done) {
  impl_->WriteSome(buffers, std::move(done));
}

}  // namespace corvid::server
