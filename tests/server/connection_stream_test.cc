// ConnectionStream (server/connection_stream.h) over a real loopback TCP
// connection: what Beast's HTTP code relies on from a stream. Writes of
// more buffers than one call takes still deliver every byte in order
// (Asio's write loops over the partial writes); a read goes to the first
// non-empty buffer; every completion runs once, on the stream's executor.
// TLS is the same erasure over Beast's ssl_stream, exercised end to end by
// e2e_tls.
#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/connection_stream.h"

using namespace corvid::server;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// A connected pair on loopback: `server` wrapped, `client` a bare socket.
struct Pair {
  asio::io_context ioc;
  tcp::socket client{ioc};
  std::optional<ConnectionStream> server;

  Pair() {
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    client.connect(acceptor.local_endpoint());
    server.emplace(ConnectionStream::Plain(acceptor.accept()));
  }
};

}  // namespace

TEST_CASE("a write of more buffers than one call takes delivers every byte in order", "[server]") {
  Pair p;
  CHECK_FALSE(p.server->tls());
  // 40 pieces (more than kMaxWriteBuffers), some empty, one of 1 MiB (more
  // than a socket takes at once).
  std::vector<std::string> pieces;
  std::string expected;
  for (int i = 0; i < 40; ++i) {
    pieces.push_back(i % 7 == 3 ? std::string() : std::string(size_t(1 + i * 13), char('a' + i % 26)));
    if (i == 20) pieces.back() = std::string(size_t{1} << 20, 'M');
    expected += pieces.back();
  }
  std::vector<asio::const_buffer> buffers;
  for (const auto& s : pieces) buffers.push_back(asio::buffer(s));
  static_assert(ConnectionStream::kMaxWriteBuffers < 40);

  int completions = 0;
  size_t written = 0;
  asio::async_write(*p.server, buffers, [&](boost::beast::error_code ec, size_t n) {
    CHECK_FALSE(ec);
    written = n;
    ++completions;
  });
  std::string received(expected.size(), '\0');
  size_t got = 0;
  asio::async_read(p.client, asio::buffer(received), [&](boost::beast::error_code ec, size_t n) {
    CHECK_FALSE(ec);
    got = n;
  });
  p.ioc.run();
  CHECK(completions == 1);
  CHECK(written == expected.size());
  CHECK(got == expected.size());
  CHECK(received == expected);
}

TEST_CASE("a read goes to the first non-empty buffer and completes once", "[server]") {
  Pair p;
  const std::string hello = "hello, stream";
  asio::write(p.client, asio::buffer(hello));
  std::string empty, target(64, '\0'), unused(64, '\0');
  const std::vector<asio::mutable_buffer> buffers = {asio::buffer(empty), asio::buffer(target), asio::buffer(unused)};
  int completions = 0;
  size_t n = 0;
  // The completion holds a shared_ptr: it is released once the handler has
  // run (the erased handler is freed before the upcall, and not leaked).
  auto token = std::make_shared<int>(7);
  p.server->async_read_some(buffers, [&, token](boost::beast::error_code ec, size_t bytes) {
    CHECK_FALSE(ec);
    CHECK(*token == 7);
    n = bytes;
    ++completions;
  });
  CHECK(token.use_count() == 2);
  p.ioc.run();
  CHECK(completions == 1);
  CHECK(token.use_count() == 1);
  REQUIRE(n > 0);
  REQUIRE(n <= hello.size());
  CHECK(target.substr(0, n) == hello.substr(0, n));
  CHECK(unused == std::string(64, '\0'));
}

TEST_CASE("a pending read completes with an error when the connection closes", "[server]") {
  Pair p;
  std::string target(16, '\0');
  boost::beast::error_code got;
  int completions = 0;
  p.server->async_read_some(asio::buffer(target), [&](boost::beast::error_code ec, size_t) {
    got = ec;
    ++completions;
  });
  p.client.close();
  p.ioc.run();
  CHECK(completions == 1);
  CHECK(got == asio::error::eof);
}
