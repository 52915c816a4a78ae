// bare_beast: the peer that Corvid's HTTP figures are compared with.
// A minimal Boost.Beast HTTP/1.1 keep-alive server on an Asio thread pool,
// built the way Beast's own async server example is (one strand per
// connection, beast::tcp_stream with an idle timeout), answering every
// request with 200 and the same 200-byte JSON body. It does no routing, no
// parsing of the body and no I/O besides the socket, so it is the ceiling
// that the same Beast stack reaches on this machine.
//
//   bare_beast [--listen HOST:PORT] [--threads N]
//
// Defaults: 127.0.0.1:8090, N = the core count. Port 0 picks a free port.
// Once listening it prints `bare_beast listening on HOST:PORT` on stdout.
// SIGINT/SIGTERM stop it (exit 0).

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::size_t kBodyBytes = 200;
constexpr auto kIdleTimeout = std::chrono::seconds(30);

// The fixed answer: a JSON object padded to exactly kBodyBytes bytes.
std::string MakeBody() {
  const std::string head = R"({"id":"bare-beast","message":"hello from the bare Beast peer","pad":")";
  const std::string tail = R"("})";
  std::string body = head;
  body.append(kBodyBytes - head.size() - tail.size(), 'x');
  body += tail;
  return body;
}

// One keep-alive connection. Its handlers run on the connection's strand,
// so members need no lock. The response is built once per connection and
// only its keep-alive flag changes per request.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, const std::string& body)
      : stream_(std::move(socket)) {
    res_.result(http::status::ok);
    res_.set(http::field::server, "bare_beast");
    res_.set(http::field::content_type, "application/json");
    res_.body() = body;
    res_.prepare_payload();
  }

  void Run() {
    // Start on the connection's strand, as Beast's example does.
    asio::dispatch(stream_.get_executor(),
                   beast::bind_front_handler(&Session::DoRead, shared_from_this()));
  }

 private:
  void DoRead() {
    req_ = {};
    stream_.expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, req_,
                     beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  void OnRead(beast::error_code ec, std::size_t) {
    if (ec) return DoClose();  // end_of_stream, timeout, reset: all end the session
    res_.version(req_.version());
    res_.keep_alive(req_.keep_alive());
    http::async_write(stream_, res_,
                      beast::bind_front_handler(&Session::OnWrite, shared_from_this()));
  }

  void OnWrite(beast::error_code ec, std::size_t) {
    if (ec) return DoClose();
    if (!res_.keep_alive()) return DoClose();
    DoRead();
  }

  void DoClose() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> req_;
  http::response<http::string_body> res_;
};

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(asio::io_context& ioc, tcp::acceptor& acceptor, const std::string& body)
      : ioc_(ioc), acceptor_(acceptor), body_(body) {}

  void DoAccept() {
    acceptor_.async_accept(asio::make_strand(ioc_),
                           beast::bind_front_handler(&Listener::OnAccept, shared_from_this()));
  }

 private:
  void OnAccept(beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true), ec);
      std::make_shared<Session>(std::move(socket), body_)->Run();
    }
    DoAccept();
  }

  asio::io_context& ioc_;
  tcp::acceptor& acceptor_;
  const std::string& body_;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr, "bare_beast: %s\nusage: bare_beast [--listen HOST:PORT] [--threads N]\n", why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:8090";
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads < 1) threads = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if ((arg == "--listen" || arg == "--threads") && i + 1 >= argc) Usage("missing value");
    if (arg == "--listen") {
      listen = argv[++i];
    } else if (arg == "--threads") {
      std::string_view v = argv[++i];
      auto [p, err] = std::from_chars(v.data(), v.data() + v.size(), threads);
      if (err != std::errc() || p != v.data() + v.size() || threads < 1) Usage("bad --threads");
    } else {
      Usage("unknown argument");
    }
  }
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) Usage("--listen wants HOST:PORT");
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned short port = 0;
  {
    std::string_view v(listen.data() + colon + 1, listen.size() - colon - 1);
    auto [p, err] = std::from_chars(v.data(), v.data() + v.size(), port);
    if (err != std::errc() || p != v.data() + v.size()) Usage("bad port");
  }

  const std::string body = MakeBody();
  asio::io_context ioc{threads};
  tcp::acceptor acceptor(ioc);
  try {
    const tcp::endpoint endpoint(asio::ip::make_address(host), port);
    acceptor.open(endpoint.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(endpoint);
    acceptor.listen(asio::socket_base::max_listen_connections);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bare_beast: cannot listen on %s: %s\n", listen.c_str(), e.what());
    return 1;
  }
  const tcp::endpoint bound = acceptor.local_endpoint();
  const std::string shown = bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                                    : bound.address().to_string();
  std::cout << "bare_beast listening on " << shown << ':' << bound.port() << std::endl;

  std::make_shared<Listener>(ioc, acceptor, body)->DoAccept();

  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](beast::error_code, int) { ioc.stop(); });

  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int i = 1; i < threads; ++i) pool.emplace_back([&ioc] { ioc.run(); });
  ioc.run();
  for (auto& t : pool) t.join();
  return 0;
}
