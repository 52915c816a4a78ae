// corvid: the server binary. `corvid serve [--data DIR] [--listen HOST:PORT]
// [--threads N] [--api-key KEY] ...` opens the store, serves HTTP until
// SIGTERM/SIGINT, drains, closes the store and exits 0.
#include <malloc.h>
#include <sys/resource.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>

#include "common/memory_budget.h"
#include "indexing/index_engine.h"
#include "server/http_server.h"
#include "storage/document_store.h"

namespace {

constexpr const char* kUsage =
    "usage: corvid serve [--data DIR] [--listen HOST:PORT] [--threads N] [--api-key KEY]\n"
    "                    [--max-doc-bytes N] [--max-bulk-bytes N] [--max-response-bytes N]\n"
    "                    [--max-header-bytes N] [--max-header-fields N] [--max-target-bytes N]\n"
    "                    [--max-connections N] [--idle-timeout-ms N] [--header-timeout-ms N]\n"
    "                    [--max-result-window N] [--memory-budget BYTES]\n"
    "defaults: --data ./corvid-data --listen 127.0.0.1:8080 --threads <cores>\n"
    "          --memory-budget: half the cgroup's memory limit, else a quarter of RAM\n"
    "          (BYTES may end in K, M or G: powers of 1024)\n";

bool ParseNumber(std::string_view s, uint64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

// A byte count with an optional K, M or G suffix (powers of 1024).
bool ParseBytes(std::string_view s, uint64_t& out) {
  uint64_t unit = 1;
  if (!s.empty()) {
    const char c = s.back();
    if (c == 'K' || c == 'k') unit = uint64_t{1} << 10;
    if (c == 'M' || c == 'm') unit = uint64_t{1} << 20;
    if (c == 'G' || c == 'g') unit = uint64_t{1} << 30;
    if (unit != 1) s.remove_suffix(1);
  }
  if (!ParseNumber(s, out) || out > (uint64_t{1} << 50) / unit) return false;
  out *= unit;
  return true;
}

int Fail(const std::string& message) {
  std::cerr << "corvid: " << message << "\n" << kUsage;
  return 2;
}

}  // namespace

// Process-wide settings made before any thread starts.
static void ConfigureProcess() {
  // glibc gives each thread that contends its own arena, up to 8 per core,
  // and an arena keeps what was freed in it. Two arenas per core still
  // avoid contention; what they keep after a burst is given back by the
  // server's trim when it goes quiet (http_server.cc). (A fixed mmap
  // threshold gave it back too, but faulted every large body's pages in
  // afresh: bulk loads paid 15% more system time.)
  mallopt(M_ARENA_MAX, int(std::max(2u, 2 * std::thread::hardware_concurrency())));
  // The soft descriptor limit up to the hard one, as Go's runtime does:
  // connections, segment files and the store all need descriptors.
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, rlim_t{1} << 20);
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int main(int argc, char** argv) {
  ConfigureProcess();
  if (argc < 2 || std::string_view(argv[1]) != "serve") return Fail("expected the 'serve' command");
  std::string data_dir = "./corvid-data";
  std::string listen = "127.0.0.1:8080";
  corvid::server::HttpServerOptions options;
  uint64_t memory_budget = corvid::DefaultMemoryBudget();
  for (int i = 2; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (i + 1 >= argc) return Fail("missing value for " + std::string(flag));
    std::string_view value = argv[++i];
    uint64_t n = 0;
    if (flag == "--data") {
      data_dir = value;
    } else if (flag == "--listen") {
      listen = value;
    } else if (flag == "--api-key") {
      options.router.api_key = value;
    } else if (flag == "--memory-budget") {
      if (!ParseBytes(value, memory_budget) || memory_budget < (uint64_t{16} << 20))
        return Fail("--memory-budget needs a byte count of at least 16M");
    } else if (flag == "--threads" || flag == "--max-doc-bytes" || flag == "--max-bulk-bytes" ||
               flag == "--max-response-bytes" || flag == "--max-header-bytes" || flag == "--max-header-fields" ||
               flag == "--max-target-bytes" || flag == "--max-connections" || flag == "--idle-timeout-ms" ||
               flag == "--header-timeout-ms" || flag == "--max-result-window") {
      if (!ParseNumber(value, n) || n == 0) return Fail(std::string(flag) + " needs a positive integer");
      n = std::min<uint64_t>(n, uint64_t{1} << 40);  // keeps every sum of limits far from overflow
      if (flag == "--threads") options.threads = int(std::min<uint64_t>(n, 1024));
      if (flag == "--max-doc-bytes") options.router.max_doc_bytes = n;
      if (flag == "--max-bulk-bytes") options.router.max_bulk_bytes = n;
      if (flag == "--max-response-bytes") options.router.max_response_bytes = n;
      if (flag == "--max-header-bytes") options.max_header_bytes = std::min<uint64_t>(n, UINT32_MAX / 2);
      if (flag == "--max-header-fields") options.max_header_fields = n;
      if (flag == "--max-target-bytes") options.max_target_bytes = n;
      if (flag == "--max-connections") options.max_connections = n;
      if (flag == "--max-result-window") options.router.max_result_window = n;
      if (flag == "--idle-timeout-ms") options.idle_timeout = std::chrono::milliseconds(n);
      if (flag == "--header-timeout-ms") options.header_timeout = std::chrono::milliseconds(n);
    } else {
      return Fail("unknown flag " + std::string(flag));
    }
  }
  size_t colon = listen.rfind(':');
  uint64_t port = 0;
  if (colon == std::string::npos || !ParseNumber(std::string_view(listen).substr(colon + 1), port) || port > 65535)
    return Fail("--listen must be HOST:PORT");
  options.host = listen.substr(0, colon);
  if (options.host.size() > 2 && options.host.front() == '[' && options.host.back() == ']')
    options.host = options.host.substr(1, options.host.size() - 2);
  options.port = uint16_t(port);

  corvid::SetMemoryBudget(memory_budget);
  auto store = corvid::storage::DocumentStore::Open(data_dir + "/store");
  if (!store.ok()) {
    std::cerr << "corvid: cannot open the store in " << data_dir << ": " << store.status().ToString() << "\n";
    return 1;
  }
  auto engine = corvid::indexing::IndexEngine::Open(data_dir + "/indexes", **store);
  if (!engine.ok()) {
    std::cerr << "corvid: cannot open the indexes in " << data_dir << ": " << engine.status().ToString() << "\n";
    return 1;
  }
  auto server = corvid::server::HttpServer::Create(**store, engine->get(), options);
  if (!server.ok()) {
    std::cerr << "corvid: " << server.status().ToString() << "\n";
    return 1;
  }
  std::printf("corvid listening on %s\n", (*server)->LocalEndpoint().c_str());
  std::fflush(stdout);
  (*server)->Run();
  // Index workers stop first (they read the store); then the store closes:
  // its merger drains and answers any queued write (into the stopped I/O
  // context) before the server's objects go away.
  engine->reset();
  store->reset();
  server->reset();
  std::fprintf(stderr, "corvid: shut down cleanly\n");
  return 0;
}
