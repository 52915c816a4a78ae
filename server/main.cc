// corvid: the server binary. `corvid serve [--data DIR] [--listen HOST:PORT]
// [--threads N] [--api-key KEY] ...` opens the store, serves HTTP until
// SIGTERM/SIGINT, drains, closes the store and exits 0.
// Every other command (import, export, status, index, search, results,
// backup, restore, verify) is in server/cli.cc.
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <filesystem>
#include <thread>

#include "cluster/cluster_node.h"
#include "common/log.h"
#include "common/memory_budget.h"
#include "common/version.h"
#include "indexing/index_engine.h"
#include "server/cli.h"
#include "server/http_client.h"
#include "server/http_server.h"
#include "storage/backup_format.h"
#include "storage/document_store.h"

namespace {

constexpr const char* kUsage =
    "usage: corvid serve [--data DIR] [--listen HOST:PORT] [--threads N] [--api-key KEY] [--read-key KEY]...\n"
    "                    [--tls-cert FILE --tls-key FILE]\n"
    "                    [--max-doc-bytes N] [--max-bulk-bytes N] [--max-response-bytes N]\n"
    "                    [--max-header-bytes N] [--max-header-fields N] [--max-target-bytes N]\n"
    "                    [--max-connections N] [--idle-timeout-ms N] [--header-timeout-ms N]\n"
    "                    [--max-result-window N] [--memory-budget BYTES]\n"
    "                    [--tombstone-retention DURATION]\n"
    "                    [--log-format text|json] [--log-level debug|info|warn|error] [--slow-ms N] [--access-log]\n"
    "                    [--nats nats://HOST:PORT[,nats://HOST:PORT...] --node-id ID --advertise URL\n"
    "                     [--replicas N] [--nats-timeout-ms N] [--log-max-age DURATION] [--log-max-bytes BYTES]]\n"
    "defaults: --data ./corvid-data --listen 127.0.0.1:8080 --threads <cores>\n"
    "          --memory-budget: half the cgroup's memory limit, else a quarter of RAM\n"
    "          (BYTES may end in K, M or G: powers of 1024)\n"
    "          --tombstone-retention 7d (0, seconds, or a number with s, m, h or d; 1.5h)\n"
    "          --log-format text --log-level info --slow-ms 1000 (0: no slow-request lines)\n"
    "the other commands: corvid --help\n";

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

// A duration in whole seconds: 0, seconds, or a number with s, m, h or d,
// decimals allowed (1.5h, 0.5d, 2.5). Computed exactly (0.1h is 360 s);
// a fraction of a second rounds up, so only 0 means none. Returns false,
// leaving `seconds` unspecified, for anything else (a sign, an exponent,
// blanks, "1.", ".5", no digits) or more than 2^40 s.
bool ParseDuration(std::string_view s, uint64_t& seconds) {
  uint64_t unit = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 's': unit = 1; break;
      case 'm': unit = 60; break;
      case 'h': unit = 3600; break;
      case 'd': unit = 86400; break;
      default: unit = 0;
    }
    if (unit != 0) s.remove_suffix(1);
    else unit = 1;
  }
  const size_t dot = s.find('.');
  std::string_view fraction = dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
  if (dot != std::string_view::npos && fraction.empty()) return false;
  for (const char c : fraction)
    if (c < '0' || c > '9') return false;
  uint64_t whole = 0;
  if (!ParseNumber(s.substr(0, dot), whole) || whole > (uint64_t{1} << 40) / unit) return false;
  seconds = whole * unit;
  // The fraction's share, rounded up: ceil(unit * 0.<digits>). Trailing
  // zeros change nothing; 18 digits keep unit * digits within 128 bits.
  while (!fraction.empty() && fraction.back() == '0') fraction.remove_suffix(1);
  if (fraction.empty()) return true;
  if (fraction.size() > 18) return false;
  uint64_t digits = 0, scale = 1;
  for (const char c : fraction) {
    digits = digits * 10 + uint64_t(c - '0');
    scale *= 10;
  }
  __extension__ using Uint128 = unsigned __int128;
  const Uint128 scaled = Uint128(digits) * unit;
  seconds += uint64_t(scaled / scale) + (scaled % scale != 0 ? 1 : 0);
  return seconds <= (uint64_t{1} << 40);
}

int Fail(const std::string& message) {
  std::cerr << "corvid: " << message << "\n" << kUsage;
  return 2;
}

// Cluster mode: before the store opens, a node with an empty store (while a
// peer has data), one behind the log's first entry, or one whose store
// disagrees with the log (it applied entries the log no longer holds, its
// last entry differs from the leader's copy, or it left the divergence
// mark while running) installs a peer's snapshot (the backup format) and
// continues from the log position it records. Returns an exit code, 0 to
// go on.
int BootstrapIfNeeded(const corvid::cluster::ClusterOptions& options, const std::string& data_dir,
                      const std::string& tls_cert_file) {
  namespace fs = std::filesystem;
  uint64_t last_etag = 0;
  corvid::storage::LogPosition pos;
  {
    auto store = corvid::storage::DocumentStore::Open(data_dir + "/store");
    if (!store.ok()) {
      corvid::logging::Error("server.start_failed", "cannot open the store in " + data_dir + ": " + store.status().ToString());
      return 1;
    }
    last_etag = (*store)->LastEtag();
    pos = (*store)->GetLogPosition();
  }
  // NATS may be starting beside us: try for half a minute.
  corvid::Result<corvid::cluster::Probe> probe = corvid::Status::Unavailable("not tried");
  for (int attempt = 0; attempt < 60; ++attempt) {
    probe = corvid::cluster::ProbeCluster(options, pos.applied_hash != 0 ? pos.applied : 0);
    if (probe.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  if (!probe.ok()) {
    corvid::logging::Error("server.start_failed", "cannot reach the cluster's log: " + probe.status().message());
    return 1;
  }
  const auto& log = probe->log;
  const bool marked = corvid::cluster::IsMarkedDiverged(data_dir);
  const bool differs = probe->checked_fingerprint != 0 && probe->checked_fingerprint != pos.applied_hash;
  const bool diverged = (pos.applied > log.last_seq && log.from_leader) || marked || differs;
  // Behind: the entries after its position are gone from the log (also
  // when retention emptied it: first_seq is then last_seq + 1).
  const bool behind = log.from_leader && std::max<uint64_t>(pos.resume, 1) < log.first_seq;
  const corvid::cluster::PeerInfo* peer = nullptr;
  for (const auto& p : probe->peers) {
    if (!corvid::cluster::CanGiveSnapshot(p, options.node_id)) continue;
    if (!peer || p.applied_etag > peer->applied_etag) peer = &p;
  }
  const bool fresh = last_etag == 0 && pos.applied == 0 && peer && peer->applied_etag > 0;
  if (!diverged && !behind && !fresh) return 0;
  const char* why = marked    ? "it diverged from the log while running"
                    : differs ? "its last applied log entry differs from the log's"
                    : diverged ? "it applied log entries the log no longer holds"
                    : behind ? "the log no longer holds the entries after its position"
                             : "it is new";
  if (!peer && (diverged || behind)) {
    // Serves reads and refuses writes (the mark makes the node start so);
    // it installs a snapshot once a peer is active (ClusterNode).
    if (!marked) {
      if (auto s = corvid::cluster::MarkDiverged(data_dir, why); !s.ok()) {
        corvid::logging::Error("server.start_failed", "cannot leave the divergence mark: " + s.message());
        return 1;
      }
    }
    corvid::logging::Warn("cluster.diverged", std::string("this node needs a peer's snapshot (") + why +
                                                  ") and no active peer is listed yet: it refuses writes until one is");
    return 0;
  }
  corvid::logging::Info("cluster.bootstrapping", "bootstrapping from " + peer->node_id + " (" + peer->url + "): " + why,
                        {{"peer", peer->node_id}, {"url", peer->url}});
  const std::string file = data_dir + ".bootstrap.corvidbk";
  const std::string fresh_dir = data_dir + ".bootstrap";
  std::error_code ec;
  fs::remove_all(fresh_dir, ec);
  const auto start = std::chrono::steady_clock::now();
  // An https:// peer is trusted through the system's CAs and $CORVID_CACERT,
  // else this node's own certificate file (one self-signed certificate
  // for the cluster, or a chain file that holds the cluster's CA).
  corvid::server::TlsTrust trust;
  if (const char* ca = std::getenv("CORVID_CACERT"); ca && *ca) trust.ca_file = ca;
  else trust.ca_file = tls_cert_file;
  auto got = corvid::server::DownloadToFile(peer->url + "/admin/backup", options.api_key, file, [](uint64_t) {}, trust);
  if (!got.ok() || got->status != 200) {
    corvid::logging::Error("server.start_failed", "bootstrap: fetching the snapshot failed: " +
                                                      (got.ok() ? std::to_string(got->status) + " " + got->error_body
                                                                : got.status().message()));
    fs::remove(file, ec);
    return 1;
  }
  auto info = corvid::storage::RestoreBackup(file, fresh_dir);
  fs::remove(file, ec);
  if (!info.ok()) {
    corvid::logging::Error("server.start_failed", "bootstrap: the snapshot does not restore: " + info.status().message());
    fs::remove_all(fresh_dir, ec);
    return 1;
  }
  const std::string old_dir = data_dir + ".replaced";
  fs::remove_all(old_dir, ec);
  if (fs::exists(data_dir)) fs::rename(data_dir, old_dir);
  fs::rename(fresh_dir, data_dir);
  fs::remove_all(old_dir, ec);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  corvid::logging::Info("cluster.bootstrapped", "bootstrapped from a peer's snapshot",
                        {{"etag", info->etag}, {"bytes", got->bytes}, {"seconds", secs},
                         {"mb_per_sec", secs > 0 ? double(got->bytes) / 1e6 / secs : 0.0}});
  return 0;
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
  // A peer that goes away makes a write fail with EPIPE, never ends the process.
  ::signal(SIGPIPE, SIG_IGN);
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
  // Every command but serve: the command line (server/cli.cc).
  if (argc < 2 || std::string_view(argv[1]) != "serve") return corvid::cli::Run(argc, argv);
  std::string data_dir = "./corvid-data";
  std::string listen = "127.0.0.1:8080";
  corvid::server::HttpServerOptions options;
  uint64_t memory_budget = corvid::DefaultMemoryBudget();
  corvid::indexing::EngineOptions engine_options;
  engine_options.tombstone_retention = std::chrono::hours(24 * 7);
  bool cluster_mode = false;
  corvid::cluster::ClusterOptions cluster_options;
  auto log_format = corvid::logging::Format::kText;
  auto log_level = corvid::logging::Level::kInfo;
  for (int i = 2; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (flag == "--access-log") {
      options.router.access_log = true;
      continue;
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
    } else if (flag == "--read-key") {
      if (value.empty()) return Fail("--read-key must not be empty");
      options.router.read_keys.emplace_back(value);
    } else if (flag == "--log-format") {
      if (!corvid::logging::ParseFormat(value, log_format)) return Fail("--log-format is text or json");
    } else if (flag == "--log-level") {
      if (!corvid::logging::ParseLevel(value, log_level)) return Fail("--log-level is debug, info, warn or error");
    } else if (flag == "--slow-ms") {
      if (!ParseNumber(value, n)) return Fail("--slow-ms needs a number of milliseconds (0: off)");
      options.router.slow_ms = n;
    } else if (flag == "--tls-cert") {
      options.tls_cert_file = value;
    } else if (flag == "--tls-key") {
      options.tls_key_file = value;
    } else if (flag == "--tombstone-retention") {
      if (!ParseDuration(value, n)) return Fail("--tombstone-retention must be 0, seconds, or a number with s, m, h or d");
      engine_options.tombstone_retention = std::chrono::seconds(n);
    } else if (flag == "--nats") {
      cluster_mode = true;
      std::string_view rest = value;
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        if (comma != 0) cluster_options.nats_urls.emplace_back(rest.substr(0, comma));
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    } else if (flag == "--node-id") {
      cluster_options.node_id = value;
    } else if (flag == "--advertise") {
      cluster_options.advertise = value;
    } else if (flag == "--replicas" || flag == "--nats-timeout-ms") {
      if (!ParseNumber(value, n) || n == 0 || n > 3600000) return Fail(std::string(flag) + " needs a positive integer");
      if (flag == "--replicas") cluster_options.replicas = int(n);
      else cluster_options.timeout_ms = int64_t(n);
    } else if (flag == "--log-max-age") {
      if (!ParseDuration(value, n) || n == 0) return Fail("--log-max-age must be seconds, or a number with s, m, h or d");
      cluster_options.max_age_seconds = int64_t(n);
    } else if (flag == "--log-max-bytes") {
      if (!ParseBytes(value, n) || n < (uint64_t{1} << 20)) return Fail("--log-max-bytes needs a byte count of at least 1M");
      cluster_options.max_bytes = int64_t(n);
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

  if (!options.router.read_keys.empty() && options.router.api_key.empty())
    return Fail("--read-key needs --api-key (the key for everything else)");
  if (options.tls_cert_file.empty() != options.tls_key_file.empty())
    return Fail("--tls-cert and --tls-key go together (PEM files: the certificate chain and its private key)");
  corvid::SetMemoryBudget(memory_budget);
  corvid::logging::Configure(log_format, log_level);
  namespace logging = corvid::logging;
  logging::Info("server.start", "corvid starting",
                {{"version", corvid::kVersion},
                 {"pid", int64_t(::getpid())},
                 {"data", data_dir},
                 {"listen", listen},
                 {"threads", int64_t(options.threads)},
                 {"memory_budget", memory_budget},
                 {"tls", !options.tls_cert_file.empty()},
                 {"api_key", !options.router.api_key.empty()},
                 {"read_keys", uint64_t(options.router.read_keys.size())},
                 {"tombstone_retention_s", uint64_t(engine_options.tombstone_retention->count())},
                 {"slow_ms", options.router.slow_ms},
                 {"cluster", cluster_mode},
                 {"node_id", cluster_options.node_id}});
  std::atomic<bool> reinstall{false};
  std::atomic<corvid::server::HttpServer*> live{nullptr};
  if (cluster_mode) {
    cluster_options.api_key = options.router.api_key;
    if (auto s = corvid::cluster::ValidateOptions(cluster_options); !s.ok()) return Fail(s.message());
    cluster_options.data_dir = data_dir;
    // A node that finds its store diverged from the log serves no more:
    // it stops, installs a peer's snapshot through the bootstrap below and
    // serves again, in this process.
    cluster_options.on_diverged = [&reinstall, &live] {
      reinstall = true;
      if (auto* s = live.load()) s->Stop();
    };
  }
  for (;;) {
    reinstall = false;
    if (cluster_mode)
      if (int rc = BootstrapIfNeeded(cluster_options, data_dir, options.tls_cert_file); rc != 0) return rc;
    {
      // LMDB creates a missing data.mdb: a store whose file was deleted must
      // not come back empty under indexes built from it.
      std::error_code ec;
      const std::filesystem::path indexes = data_dir + "/indexes";
      if (!std::filesystem::exists(data_dir + "/store/data.mdb", ec) && std::filesystem::is_directory(indexes, ec) &&
          std::filesystem::directory_iterator(indexes, ec) != std::filesystem::directory_iterator()) {
        logging::Error("server.start_failed", "cannot open the store in " + data_dir + ": " + data_dir +
                                                  "/store/data.mdb is missing, but indexes built from it are there "
                                                  "(restore a backup, or move " + indexes.string() + " away to start empty)");
        return 1;
      }
    }
    corvid::storage::StoreOptions store_options;
    store_options.slow_commit_ms = options.router.slow_ms;
    auto store = corvid::storage::DocumentStore::Open(data_dir + "/store", store_options);
    if (!store.ok()) {
      logging::Error("server.start_failed", "cannot open the store in " + data_dir + ": " + store.status().ToString());
      return 1;
    }
    auto engine = corvid::indexing::IndexEngine::Open(data_dir + "/indexes", **store, engine_options);
    if (!engine.ok()) {
      logging::Error("server.start_failed", "cannot open the indexes in " + data_dir + ": " + engine.status().ToString());
      return 1;
    }
    std::unique_ptr<corvid::cluster::ClusterNode> cluster;
    if (cluster_mode) {
      auto started = corvid::cluster::ClusterNode::Start(cluster_options, **store, engine->get());
      if (!started.ok()) {
        logging::Error("server.start_failed", "cannot join the cluster: " + started.status().message());
        return 1;
      }
      cluster = std::move(*started);
      options.router.cluster = cluster.get();
    }
    auto server = corvid::server::HttpServer::Create(**store, engine->get(), options);
    if (!server.ok()) {
      logging::Error("server.start_failed", server.status().ToString());
      return 1;
    }
    live = server->get();
    if (reinstall) (*server)->Stop();  // diverged before the server existed
    std::printf("corvid listening on %s\n", (*server)->LocalEndpoint().c_str());
    std::fflush(stdout);
    logging::Info("server.listening", "serving HTTP" + std::string(options.tls_cert_file.empty() ? "" : "S"),
                  {{"endpoint", (*server)->LocalEndpoint()}});
    (*server)->Run();
    live = nullptr;
    // The applier stops first (it writes to the store and defines indexes).
    cluster.reset();
    options.router.cluster = nullptr;
    // Index workers stop first (they read the store); then the store closes:
    // its merger drains and answers any queued write (into the stopped I/O
    // context) before the server's objects go away.
    engine->reset();
    store->reset();
    server->reset();
    if (!reinstall) break;
    logging::Warn("server.restarting", "stopped serving to install a peer's snapshot; serving again once it is in");
  }
  logging::Info("server.stopped", "shut down cleanly");
  return 0;
}
