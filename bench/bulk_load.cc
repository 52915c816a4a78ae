// bulk_load: the client side of the bulk NDJSON benchmark, and the loader
// the other benchmarks use to fill a collection. It builds every request
// body in memory first (so generating JSON is never timed), then POSTs them
// to /docs/{collection}/_bulk over plain keep-alive sockets and reports the
// body bytes the server acknowledged (200) per second of wall time.
// Plain POSIX sockets rather than Beast: the client must cost the server's
// two cores as little as possible, and nothing here needs an HTTP library.
//
//   bulk_load --target HOST:PORT [--collection C] [--docs N | --total-mb M]
//             [--doc-bytes B] [--request-mb R] [--connections K]
//             [--id-prefix P]
//
// Each line is one JSON object of exactly B bytes including its '\n', with
// a unique string "id" (P + sequence number) and English-like text.
// Prints one line: `bulk_load docs=.. requests=.. body_bytes=.. seconds=..
// mb_per_s=..` (MB = 10^6 bytes). Exit 1 if any request is not answered 200.

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

struct Options {
  std::string host = "127.0.0.1";
  std::string port = "8080";
  std::string collection = "bulk";
  std::string id_prefix = "d";
  std::uint64_t docs = 0;  // 0: derive from total_mb
  double total_mb = 128;
  std::size_t doc_bytes = 1024;
  double request_mb = 32;
  int connections = 1;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "bulk_load: %s\nusage: bulk_load --target HOST:PORT [--collection C] "
               "[--docs N | --total-mb M] [--doc-bytes B] [--request-mb R] "
               "[--connections K] [--id-prefix P]\n",
               why);
  std::exit(2);
}

template <typename T>
T ParseNumber(std::string_view v, const char* what) {
  T out{};
  auto [p, err] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (err != std::errc() || p != v.data() + v.size()) Usage(what);
  return out;
}

// A small deterministic generator (splitmix64): the same flags give the
// same bytes on every run.
struct Rng {
  std::uint64_t s;
  std::uint64_t Next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
};

constexpr const char* kWords[] = {
    "the",     "of",       "and",     "document", "store",   "index",   "query",   "river",
    "mountain", "quickly", "silent",  "engine",   "morning", "harbor",  "letter",  "garden",
    "crow",    "raven",    "winter",  "summer",   "window",  "market",  "bridge",  "signal",
    "number",  "between",  "through", "without",  "because", "against", "village", "station",
    "reading", "writing",  "history", "science",  "music",   "painter", "journey", "travel",
    "yellow",  "green",    "blue",    "ancient",  "modern",  "public",  "private", "system"};
constexpr std::size_t kWordCount = sizeof(kWords) / sizeof(kWords[0]);

// Appends one NDJSON line of exactly `bytes` bytes (including '\n').
void AppendDoc(std::string& out, const Options& o, std::uint64_t n, Rng& rng) {
  const std::size_t start = out.size();
  out += R"({"id":")";
  out += o.id_prefix;
  out += std::to_string(n);
  out += R"(","n":)";
  out += std::to_string(n);
  out += R"(,"score":)";
  out += std::to_string(rng.Next() % 1000);
  out += R"(,"text":")";
  const std::size_t tail = 3;  // "}\n
  while (out.size() - start + tail < o.doc_bytes) {
    const char* w = kWords[rng.Next() % kWordCount];
    std::size_t room = o.doc_bytes - (out.size() - start) - tail;
    std::size_t len = std::strlen(w);
    if (len + 1 <= room) {
      out += w;
      out += ' ';
    } else {
      out.append(room, 'z');
    }
  }
  out += "\"}\n";
}

int Connect(const Options& o) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(o.host.c_str(), o.port.c_str(), &hints, &res); rc != 0) {
    std::fprintf(stderr, "bulk_load: resolve %s: %s\n", o.host.c_str(), gai_strerror(rc));
    std::exit(1);
  }
  int fd = -1;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    std::fprintf(stderr, "bulk_load: connect %s:%s: %s\n", o.host.c_str(), o.port.c_str(),
                 std::strerror(errno));
    std::exit(1);
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool SendAll(int fd, const std::string& head, const std::string& body) {
  iovec iov[2] = {{const_cast<char*>(head.data()), head.size()},
                  {const_cast<char*>(body.data()), body.size()}};
  int idx = 0;
  while (idx < 2) {
    ssize_t n = writev(fd, iov + idx, 2 - idx);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    std::size_t left = static_cast<std::size_t>(n);
    while (idx < 2 && left >= iov[idx].iov_len) {
      left -= iov[idx].iov_len;
      ++idx;
    }
    if (idx < 2) {
      iov[idx].iov_base = static_cast<char*>(iov[idx].iov_base) + left;
      iov[idx].iov_len -= left;
    }
  }
  return true;
}

// Reads one HTTP response (Content-Length framed). Returns the status, or
// -1 on a connection error; `body` receives the response body.
int ReadResponse(int fd, std::string& buf, std::string& body) {
  std::size_t header_end;
  for (;;) {
    header_end = buf.find("\r\n\r\n");
    if (header_end != std::string::npos) break;
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    buf.append(tmp, static_cast<std::size_t>(n));
  }
  const std::string_view head(buf.data(), header_end);
  int status = -1;
  if (head.size() > 12) status = std::atoi(std::string(head.substr(9, 3)).c_str());
  std::size_t length = 0;
  for (std::size_t pos = 0; pos < head.size();) {
    std::size_t eol = head.find("\r\n", pos);
    if (eol == std::string_view::npos) eol = head.size();
    std::string_view line = head.substr(pos, eol - pos);
    if (line.size() > 15 && strncasecmp(line.data(), "content-length:", 15) == 0) {
      length = std::strtoull(std::string(line.substr(15)).c_str(), nullptr, 10);
    }
    pos = eol + 2;
  }
  const std::size_t need = header_end + 4 + length;
  while (buf.size() < need) {
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    buf.append(tmp, static_cast<std::size_t>(n));
  }
  body.assign(buf, header_end + 4, length);
  buf.erase(0, need);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool have_target = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (i + 1 >= argc) Usage("missing value");
    std::string_view v = argv[++i];
    if (a == "--target") {
      auto colon = v.rfind(':');
      if (colon == std::string_view::npos) Usage("--target wants HOST:PORT");
      o.host = std::string(v.substr(0, colon));
      o.port = std::string(v.substr(colon + 1));
      have_target = true;
    } else if (a == "--collection") {
      o.collection = std::string(v);
    } else if (a == "--id-prefix") {
      o.id_prefix = std::string(v);
    } else if (a == "--docs") {
      o.docs = ParseNumber<std::uint64_t>(v, "bad --docs");
    } else if (a == "--total-mb") {
      o.total_mb = std::strtod(std::string(v).c_str(), nullptr);
    } else if (a == "--doc-bytes") {
      o.doc_bytes = ParseNumber<std::size_t>(v, "bad --doc-bytes");
    } else if (a == "--request-mb") {
      o.request_mb = std::strtod(std::string(v).c_str(), nullptr);
    } else if (a == "--connections") {
      o.connections = ParseNumber<int>(v, "bad --connections");
    } else {
      Usage("unknown argument");
    }
  }
  if (!have_target) Usage("--target is required");
  if (o.doc_bytes < 64) Usage("--doc-bytes must be at least 64");
  if (o.request_mb <= 0 || o.connections < 1) Usage("bad --request-mb or --connections");
  if (o.docs == 0) o.docs = static_cast<std::uint64_t>(o.total_mb * 1e6 / o.doc_bytes);
  if (o.docs == 0) Usage("nothing to send");

  // Build every request body up front.
  const std::uint64_t per_request =
      std::max<std::uint64_t>(1, static_cast<std::uint64_t>(o.request_mb * 1e6 / o.doc_bytes));
  std::vector<std::string> bodies;
  Rng rng{42};
  for (std::uint64_t first = 0; first < o.docs; first += per_request) {
    const std::uint64_t last = std::min(o.docs, first + per_request);
    std::string body;
    body.reserve((last - first) * o.doc_bytes);
    for (std::uint64_t n = first; n < last; ++n) AppendDoc(body, o, n, rng);
    bodies.push_back(std::move(body));
  }
  std::vector<std::string> heads;
  for (const auto& body : bodies) {
    heads.push_back("POST /docs/" + o.collection + "/_bulk HTTP/1.1\r\nHost: " + o.host + ":" +
                    o.port + "\r\nContent-Type: application/x-ndjson\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n");
  }

  std::vector<int> fds;
  for (int c = 0; c < o.connections; ++c) fds.push_back(Connect(o));

  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> acked_bytes{0};
  std::atomic<bool> failed{false};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int c = 0; c < o.connections; ++c) {
    workers.emplace_back([&, fd = fds[c]] {
      std::string buf, reply;
      for (std::size_t i; (i = next.fetch_add(1)) < bodies.size();) {
        if (!SendAll(fd, heads[i], bodies[i])) {
          std::fprintf(stderr, "bulk_load: send failed: %s\n", std::strerror(errno));
          failed = true;
          return;
        }
        int status = ReadResponse(fd, buf, reply);
        if (status != 200) {
          std::fprintf(stderr, "bulk_load: request %zu answered %d: %.300s\n", i, status,
                       reply.c_str());
          failed = true;
          return;
        }
        acked_bytes += bodies[i].size();
      }
    });
  }
  for (auto& w : workers) w.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int fd : fds) close(fd);

  std::printf("bulk_load docs=%llu requests=%zu body_bytes=%llu seconds=%.3f mb_per_s=%.1f\n",
              static_cast<unsigned long long>(o.docs), bodies.size(),
              static_cast<unsigned long long>(acked_bytes.load()), seconds,
              acked_bytes.load() / 1e6 / seconds);
  return failed ? 1 : 0;
}
