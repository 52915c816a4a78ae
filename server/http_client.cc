#include "server/http_client.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstring>

namespace corvid::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

struct Url {
  std::string host, port, target;
};

Result<Url> ParseUrl(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return Status::InvalidArgument("--url must start with http:// (got '" + url + "')");
  std::string rest = url.substr(scheme.size());
  Url u;
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  u.target = slash == std::string::npos ? "/" : rest.substr(slash);
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return Status::InvalidArgument("bad host in '" + url + "'");
    u.host = authority.substr(1, close - 1);
    u.port = close + 1 < authority.size() && authority[close + 1] == ':' ? authority.substr(close + 2) : "80";
  } else {
    const size_t colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    u.port = colon == std::string::npos ? "80" : authority.substr(colon + 1);
  }
  if (u.host.empty() || u.port.empty()) return Status::InvalidArgument("bad host in '" + url + "'");
  return u;
}

}  // namespace

Result<DownloadResult> DownloadToFile(const std::string& url, const std::string& bearer_token,
                                      const std::string& path, const std::function<void(uint64_t)>& progress) {
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
    tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    stream.connect(resolver.resolve(u->host, u->port));
    http::request<http::empty_body> req(http::verb::get, u->target, 11);
    req.set(http::field::host, u->host);
    req.set(http::field::user_agent, "corvid");
    if (!bearer_token.empty()) req.set(http::field::authorization, "Bearer " + bearer_token);
    http::write(stream, req);

    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    http::read_header(stream, buffer, parser);
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
      http::read(stream, buffer, parser, ec);
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
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  } catch (const std::exception& e) {
    return fail(url + ": " + e.what());
  }
  return out;
}

}  // namespace corvid::server
