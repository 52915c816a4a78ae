#include "server/http_client.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/ssl.h>
#include <cctype>
#include <cerrno>
#include <limits>
#include <optional>
#include <cstring>

namespace corvid::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

namespace ssl = asio::ssl;

// Boost 1.74's body_limit(boost::none) compares a Content-Length with an
// empty optional and refuses every such answer: no limit is the largest.
constexpr uint64_t kNoBodyLimit = std::numeric_limits<uint64_t>::max();

struct Url {
  std::string host, port, target;
  bool tls = false;
};

Result<Url> ParseUrl(const std::string& url) {
  Url u;
  u.tls = url.rfind("https://", 0) == 0;
  if (!u.tls && url.rfind("http://", 0) != 0)
    return Status::InvalidArgument("--url must start with http:// or https:// (got '" + url + "')");
  std::string rest = url.substr(u.tls ? 8 : 7);
  const std::string default_port = u.tls ? "443" : "80";
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  u.target = slash == std::string::npos ? "/" : rest.substr(slash);
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return Status::InvalidArgument("bad host in '" + url + "'");
    u.host = authority.substr(1, close - 1);
    u.port = close + 1 < authority.size() && authority[close + 1] == ':' ? authority.substr(close + 2) : default_port;
  } else {
    const size_t colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    u.port = colon == std::string::npos ? default_port : authority.substr(colon + 1);
  }
  if (u.host.empty() || u.port.empty()) return Status::InvalidArgument("bad host in '" + url + "'");
  return u;
}

// A connection, plain or TLS; `With(f)` calls f with the stream to use.
class Stream {
 public:
  // Connects (and does the TLS handshake, verifying the server's
  // certificate); throws what Asio throws.
  Stream(asio::io_context& ioc, const Url& u, const TlsTrust& trust) {
    tcp::resolver resolver(ioc);
    if (!u.tls) {
      plain_.emplace(ioc);
      plain_->connect(resolver.resolve(u.host, u.port));
      plain_->socket().set_option(tcp::no_delay(true));
      return;
    }
    ctx_ = std::make_unique<ssl::context>(ssl::context::tls_client);
    ctx_->set_default_verify_paths();
    if (!trust.ca_file.empty()) ctx_->load_verify_file(trust.ca_file);
    ctx_->set_verify_mode(trust.insecure ? ssl::verify_none : ssl::verify_peer);
    tls_.emplace(ioc, *ctx_);
    if (!trust.insecure) tls_->set_verify_callback(ssl::host_name_verification(u.host));
    // SNI, for a name (not an address).
    beast::error_code ec;
    asio::ip::make_address(u.host, ec);
    if (ec) SSL_set_tlsext_host_name(tls_->native_handle(), u.host.c_str());
    beast::get_lowest_layer(*tls_).connect(resolver.resolve(u.host, u.port));
    beast::get_lowest_layer(*tls_).socket().set_option(tcp::no_delay(true));
    tls_->handshake(ssl::stream_base::client);
  }

  template <class F>
  decltype(auto) With(F&& f) {
    if (tls_) return f(*tls_);
    return f(*plain_);
  }

  void Close() {
    beast::error_code ignored;
    if (tls_) tls_->shutdown(ignored);
    beast::tcp_stream& lowest = tls_ ? beast::get_lowest_layer(*tls_) : *plain_;
    lowest.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

 private:
  std::optional<beast::tcp_stream> plain_;
  std::unique_ptr<ssl::context> ctx_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls_;
};

}  // namespace

Result<DownloadResult> DownloadToFile(const std::string& url, const std::string& bearer_token,
                                      const std::string& path, const std::function<void(uint64_t)>& progress,
                                      const TlsTrust& trust) {
  auto u = ParseUrl(url);
  if (!u.ok()) return u.status();
  DownloadResult out;
  int fd = -1;
  auto fail = [&](const std::string& what) -> Status {
    if (fd >= 0) {
      ::close(fd);
      ::unlink(path.c_str());
    }
    return Status::IOError(what);
  };
  try {
    asio::io_context ioc;
    Stream stream(ioc, *u, trust);
    http::request<http::empty_body> req(http::verb::get, u->target, 11);
    req.set(http::field::host, u->host);
    req.set(http::field::user_agent, "corvid");
    if (!bearer_token.empty()) req.set(http::field::authorization, "Bearer " + bearer_token);
    stream.With([&](auto& s) { http::write(s, req); });

    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(kNoBodyLimit);
    stream.With([&](auto& s) { http::read_header(s, buffer, parser); });
    out.status = int(parser.get().result_int());
    for (const auto& f : parser.get()) {
      std::string name(f.name_string());
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      out.headers[name] = std::string(f.value());
    }
    const bool good = out.status >= 200 && out.status < 300;
    if (good) {
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) return Status::IOError("create " + path + ": " + std::strerror(errno));
    }
    std::string buf(size_t{1} << 20, '\0');
    while (!parser.is_done()) {
      parser.get().body().data = buf.data();
      parser.get().body().size = buf.size();
      beast::error_code ec;
      stream.With([&](auto& s) { http::read(s, buffer, parser, ec); });
      if (ec && ec != http::error::need_buffer) {
        return fail("the answer was cut short after " + std::to_string(out.bytes) + " bytes: " + ec.message());
      }
      const size_t n = buf.size() - parser.get().body().size;
      if (good) {
        for (size_t done = 0; done < n;) {
          ssize_t w = ::write(fd, buf.data() + done, n - done);
          if (w < 0 && errno == EINTR) continue;
          if (w < 0) return fail("write " + path + ": " + std::strerror(errno));
          done += size_t(w);
        }
        out.bytes += n;
        if (progress) progress(out.bytes);
      } else if (out.error_body.size() < 65536) {
        out.error_body.append(buf.data(), std::min(n, 65536 - out.error_body.size()));
      }
    }
    if (fd >= 0) {
      if (::fsync(fd) != 0) return fail("fsync " + path + ": " + std::strerror(errno));
      ::close(fd);
      fd = -1;
    }
    stream.Close();
  } catch (const std::exception& e) {
    return fail(url + ": " + e.what());
  }
  return out;
}

struct HttpClient::Impl {
  Url url;
  std::string bearer;
  TlsTrust trust;
  asio::io_context ioc;
  std::optional<Stream> stream;
  beast::flat_buffer buffer;

  void Open() {
    stream.reset();
    buffer.clear();
    stream.emplace(ioc, url, trust);
  }

  HttpResponse Send(std::string_view method, std::string_view target, std::string_view body,
                    std::string_view content_type) {
    http::request<http::string_body> req(http::string_to_verb(beast::string_view(method.data(), method.size())),
                                         std::string(target), 11);
    req.set(http::field::host, url.host);
    req.set(http::field::user_agent, "corvid");
    if (!bearer.empty()) req.set(http::field::authorization, "Bearer " + bearer);
    if (!body.empty() || method == "POST" || method == "PUT") {
      req.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
      req.body().assign(body.data(), body.size());
      req.prepare_payload();
    }
    stream->With([&](auto& s) { http::write(s, req); });
    http::response_parser<http::string_body> parser;
    parser.body_limit(kNoBodyLimit);
    stream->With([&](auto& s) { http::read(s, buffer, parser); });
    auto& res = parser.get();
    HttpResponse out;
    out.status = int(res.result_int());
    out.content_type = std::string(res[http::field::content_type]);
    out.body = std::move(res.body());
    if (!res.keep_alive()) stream.reset();
    return out;
  }
};

HttpClient::HttpClient(std::unique_ptr<Impl> impl, std::string base_url)
    : impl_(std::move(impl)), base_url_(std::move(base_url)) {}
HttpClient::~HttpClient() = default;

Result<std::unique_ptr<HttpClient>> HttpClient::Connect(const std::string& base_url, std::string bearer_token,
                                                        const TlsTrust& trust) {
  auto u = ParseUrl(base_url);
  if (!u.ok()) return u.status();
  auto impl = std::make_unique<Impl>();
  impl->url = *u;
  impl->bearer = std::move(bearer_token);
  impl->trust = trust;
  try {
    impl->Open();
  } catch (const std::exception& e) {
    return Status::IOError("cannot connect to " + base_url + ": " + e.what());
  }
  return std::unique_ptr<HttpClient>(new HttpClient(std::move(impl), base_url));
}

Result<HttpResponse> HttpClient::Request(std::string_view method, std::string_view target, std::string_view body,
                                         std::string_view content_type) {
  // A kept-alive connection the server closed fails on first use: one
  // retry on a fresh one (requests here are idempotent or fail whole).
  for (int attempt = 0;; ++attempt) {
    try {
      if (!impl_->stream) impl_->Open();
      return impl_->Send(method, target, body, content_type);
    } catch (const std::exception& e) {
      impl_->stream.reset();
      if (attempt == 1) return Status::IOError(base_url_ + ": " + e.what());
    }
  }
}

std::string PercentEncode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(char(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

}  // namespace corvid::server
