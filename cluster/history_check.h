// Whether this node applied the same log entries as its peers - all of
// them, not only the last one (docs/cluster.md, "Divergence").
//
// A JetStream replica that was stopped can, once restarted, serve a
// consumer its own copy of the log for a while, and that copy may hold at
// some sequence an entry the cluster's log does not (nats-server 2.9 keeps
// an entry its former leadership never committed). A node reading through
// that consumer applies the wrong entry and, later, the right ones again:
// its last entry matches the leader's, yet its store differs.
//
// Every node therefore digests the fingerprints of all the entries it
// applied, in order (the digest is committed with the store's log position,
// so it survives restarts and travels with snapshots), and publishes a
// checkpoint - (seq, digest) every kEvery entries and where it goes idle -
// in its heartbeat. Nodes compare checkpoints at equal sequences:
//  - agreement with any peer moves `agreed_through` forward;
//  - a disagreement past it that lasts two heartbeats (or that a peer has
//    verified entry by entry) makes the node verify its own entries since
//    `agreed_through` against the leader's copies (Plan, then Mismatch or
//    Verified); a mismatch seen kConfirmations times in a row means this
//    node diverged (the leader answers every time);
//  - entries applied before this process started are not kept: when the
//    disagreement lies there, two peers that agree with each other against
//    this node decide it (Outvoted).
// Pure bookkeeping, no NATS here: cluster_node.cc does the asking.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace corvid::cluster {

// The digest before entry 1, and the step: never 0 (0 is "not recorded").
inline constexpr uint64_t kEmptyHistory = 1;
uint64_t ExtendHistory(uint64_t history, uint64_t fingerprint);

struct Checkpoint {
  uint64_t seq = 0;  // 0: none
  uint64_t history = 0;
  bool verified = false;  // this node checked its entries up to it against the leader
};

struct PeerCheckpoint {
  std::string node_id;
  Checkpoint checkpoint;
};

class HistoryCheck {
 public:
  static constexpr uint64_t kEvery = 256;
  static constexpr size_t kKeptEntries = size_t{1} << 16;
  static constexpr size_t kKeptCheckpoints = 1024;
  static constexpr int kConfirmations = 5;

  // Starts from a store's position. A store that applied entries without
  // recording a digest (written before digests existed) turns the check off
  // until a snapshot replaces it.
  void Reset(uint64_t applied, uint64_t history);
  bool enabled() const;

  // The applier: entry `seq`, the one after the last recorded, with its
  // fingerprint. Returns the digest through it (0 when off).
  uint64_t Record(uint64_t seq, uint64_t fingerprint);
  // The applier, idle at the log's end: a checkpoint at its last entry.
  void MarkIdle();
  // What the heartbeat publishes: the newest checkpoint.
  Checkpoint Latest() const;

  // One heartbeat's comparison with the peers' checkpoints.
  struct Plan {
    bool outvoted = false;  // unverifiable here, and two peers agree against it
    uint64_t through = 0;   // verify up to this checkpoint (0: nothing to do)
    // The entries to ask the leader for, in order: (seq, fingerprint).
    std::vector<std::pair<uint64_t, uint64_t>> entries;
    bool covered = false;     // `entries` hold every entry since the agreement
    bool confirming = false;  // `entries` is the one that mismatched before
    uint64_t from = 0;        // entries after this one (internal)
  };
  Plan Compare(const std::vector<PeerCheckpoint>& peers);
  // The leader's copy of entry `seq` differs: true once it did
  // kConfirmations times in a row (then this node diverged).
  bool Mismatch(uint64_t seq);
  // Entries up to `seq` of the plan for `through` matched the leader's
  // (all of them when seq == through and the plan was covered).
  void Verified(const Plan& plan, uint64_t seq);

 private:
  mutable std::mutex mu_;
  bool enabled_ = true;
  uint64_t base_ = 0;     // the store's position when this process started (or rewound)
  uint64_t last_ = 0;     // the last entry recorded
  uint64_t history_ = kEmptyHistory;
  std::deque<std::pair<uint64_t, uint64_t>> entries_;  // (seq, fingerprint), the newest kKeptEntries
  std::map<uint64_t, uint64_t> checkpoints_;          // seq -> digest through it
  uint64_t agreed_through_ = 0;                       // a peer (or the leader) agreed up to here
  uint64_t verified_through_ = 0;
  uint64_t checked_through_ = 0;  // of the current disagreement's range, entries matched so far
  uint64_t pending_ = 0;          // a disagreement seen at the last heartbeat (0: none)
  uint64_t mismatch_seq_ = 0;
  int mismatches_ = 0;
};

}  // namespace corvid::cluster
