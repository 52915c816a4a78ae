// A Corvid node in a cluster whose write log is a NATS JetStream stream
// (docs/cluster.md). The server sees the cluster only through this facade:
// Submit has the shape of DocumentStore::Submit ("apply this write, call me
// with its result"), so the router does not care which one it talks to.
// This folder is the only code that includes libnats (in the .cc files).
//
// Write path: Submit publishes the request as one log entry (a bulk too
// large for one message as chunks and a commit entry) and parks the
// callback; every node's applier thread reads the log in order and submits
// each entry to its own store (many per transaction, the log position
// recorded in the same transaction); the applier of the node that received
// the request answers it. A request not applied by its deadline answers
// 503 (unavailable: it never reached the log; commit_unknown otherwise).
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/history_check.h"
#include "common/status.h"
#include "storage/document_store.h"

namespace corvid::indexing {
class IndexEngine;
enum class PutOutcome;
}  // namespace corvid::indexing

namespace corvid::cluster {

struct ClusterOptions {
  std::vector<std::string> nats_urls;  // nats://HOST:PORT, tried in this order
  std::string node_id;                 // [A-Za-z0-9_-], at most 64 bytes
  std::string advertise;               // this node's URL for peers (http://HOST:PORT)
  std::string api_key;                 // to fetch a peer's snapshot
  int replicas = 3;
  int64_t timeout_ms = 5000;  // --nats-timeout-ms: a write's deadline
  // The log's retention: entries older or beyond this many bytes go (a
  // node behind them bootstraps from a peer's snapshot).
  int64_t max_age_seconds = 7 * 86400;
  int64_t max_bytes = -1;  // -1: no limit
  std::string stream = "CORVID";
  std::string subject = "corvid.log";
  std::string bucket = "corvid_nodes";
  size_t chunk_bytes = size_t{512} << 10;  // a log message's payload at most
  // Not options a user gives: where a diverged node leaves its mark (the
  // data directory: a restart then installs a peer's snapshot), and what
  // it calls once it has diverged while a peer it can install from is
  // active (the server restarts itself through the bootstrap).
  std::string data_dir;
  std::function<void()> on_diverged;
};

// The mark a node leaves in its data directory once it knows its store
// disagrees with the log (the file "cluster-diverged", saying why); while
// it is there the node refuses writes, and its next start installs a
// peer's snapshot, which replaces the directory and the mark with it.
Status MarkDiverged(const std::string& data_dir, std::string_view why);
bool IsMarkedDiverged(const std::string& data_dir);

// The fingerprint of a log entry (XXH3-64 of its bytes; never 0), which
// the store records for the last entry it applied.
uint64_t EntryFingerprint(std::string_view entry);

// Validates the options a user gives (node id, URLs, replicas, timeout).
Status ValidateOptions(const ClusterOptions& options);

// A node whose last heartbeat (every second) is older than this is
// unreachable: shown so, and never a bootstrap's source.
inline constexpr int64_t kPeerStaleMs = 5000;

struct PeerInfo {
  std::string node_id, url, state;
  uint64_t applied_etag = 0, applied_seq = 0;
  int64_t lag_ms = 0;
  int64_t at_ms = 0;      // its last heartbeat (unix ms, its clock)
  Checkpoint checkpoint;  // of the history it applied (history_check.h)
};

// Whether `p` can give node `self_id` a snapshot now: another node,
// active, with a URL, and heard from within kPeerStaleMs.
bool CanGiveSnapshot(const PeerInfo& p, std::string_view self_id);

struct LogInfo {
  uint64_t first_seq = 0, last_seq = 0, messages = 0;
  int replicas = 0;
  // Whether the answer came from the stream's leader. While a stream has
  // none (an election, a majority away), JetStream's meta leader answers
  // with an empty state: such a last_seq says nothing about lost entries.
  bool from_leader = true;
};

// Before the store opens: connects, creates the log and the membership
// bucket if they do not exist yet, and reads both.
// `check_seq` (0: none) is an entry whose fingerprint the stream's leader
// is asked for: the last one the local store applied.
struct Probe {
  LogInfo log;
  std::vector<PeerInfo> peers;
  uint64_t checked_fingerprint = 0;  // 0: not asked, or not in the log
};
Result<Probe> ProbeCluster(const ClusterOptions& options, uint64_t check_seq = 0);

class ClusterNode {
 public:
  // Connects and starts the applier from the store's log position.
  // `engine` may be null (then index entries are skipped).
  static Result<std::unique_ptr<ClusterNode>> Start(ClusterOptions options, storage::DocumentStore& store,
                                                    indexing::IndexEngine* engine);
  // Answers every parked request (503), stops the applier, disconnects.
  ~ClusterNode();
  ClusterNode(const ClusterNode&) = delete;
  ClusterNode& operator=(const ClusterNode&) = delete;

  // A document write through the log; `done` is called exactly once.
  void Submit(storage::WriteRequest request, storage::DocumentStore::WriteCallback done);
  // Index definitions through the log (every node gets the same indexes).
  void SubmitIndexPut(std::string name, std::string definition,
                      std::function<void(Result<indexing::PutOutcome>)> done);
  void SubmitIndexDelete(std::string name, std::function<void(Status)> done);

  // The body of GET /admin/cluster (API.md, Cluster).
  std::string DescribeJson() const;

  struct Stats {
    uint64_t applied_seq = 0;
    int64_t lag_ms = 0;
    uint64_t commits = 0;            // requests whose log entry was confirmed
    double commit_seconds_sum = 0;   // publish -> confirmation
    uint64_t skipped_late = 0;       // entries past their deadline
    uint64_t timeouts = 0;           // requests answered 503 by their deadline
    uint64_t leader_asks = 0;        // entries asked of the leader: no acknowledgement confirmed them
  };
  Stats GetStats() const;

  class Impl;

 private:
  explicit ClusterNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace corvid::cluster
