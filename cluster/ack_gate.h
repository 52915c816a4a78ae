// Holds this node's answers until every log entry it applied before them
// is known to be the log's (docs/cluster.md, "Answers wait for confirmed
// entries").
//
// A JetStream replica can serve a consumer an entry the log does not hold
// (history_check.h). A node that applied it gives every later write an etag
// that the log's other readers do not, and the history check notices only
// seconds later: answers given meanwhile would name etags that end up on
// other writes. So an answer for entry S is held until every entry this
// node applied up to S is *confirmed*:
//  - a publish acknowledgement named the same sequence and fingerprint (the
//    stream's leader sends one once a quorum holds the entry; every node
//    broadcasts the acknowledgements it receives, outside the log), or
//  - or, for an entry with no acknowledgement after kAskAfter (its origin
//    died or was cut off before it broadcast, or the broadcast was lost):
//    the leader's own copy has the same fingerprint, or a peer that applied
//    the entry without an acknowledgement too vouches for the same bytes.
//    Peers vouch for what they ask the leader about, so the nodes that
//    still reach each other confirm an entry while JetStream cannot answer
//    (its meta leader being elected). A vouch never outweighs a
//    contradiction: an entry an acknowledgement or a peer contradicted
//    waits for the leader.
// The leader's copy differing kConfirmations times, kRecheck apart, means
// this node diverged (a deposed leader may answer for a moment from its own
// copy, so one answer is not enough). Entries stored in the log before this
// node listened for acknowledgements (Applied's `watched` false) count as
// confirmed: the history check covers them.
//
// Pure bookkeeping, no NATS here: cluster_node.cc broadcasts, listens and
// asks. Thread safety: every method may be called from any thread; held
// answers run on the calling thread, outside the gate's lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

namespace corvid::cluster {

class AckGate {
 public:
  using Clock = std::chrono::steady_clock;
  // Called once: true when the entries up to the answer's are confirmed,
  // false when the gate drops it (this node diverged).
  using Answer = std::function<void(bool confirmed)>;

  static constexpr size_t kRingEntries = size_t{1} << 18;  // acknowledgements kept ahead of the applier
  static constexpr std::chrono::milliseconds kAskAfter{250};
  static constexpr std::chrono::milliseconds kRecheck{1000};
  static constexpr int kConfirmations = 5;
  static constexpr size_t kVouchesKept = 65536;  // vouches for entries not applied yet

  AckGate();

  // The applier's position (start, or a rewind to the store's position):
  // entries up to `applied` need nothing; unconfirmed entries past it are
  // forgotten (they will be applied again).
  void Reset(uint64_t applied);
  // The applier, in log order, for every entry past the position.
  void Applied(uint64_t seq, uint64_t fingerprint, bool watched, Clock::time_point now);
  // A publish acknowledgement: the log holds `fingerprint` at `seq`.
  void Confirm(uint64_t seq, uint64_t fingerprint);
  // Another node applied `fingerprint` at `seq` without an acknowledgement.
  void Vouch(uint64_t seq, uint64_t fingerprint);
  // The answer for entry `seq` (already Applied): runs now if the entries up
  // to it are confirmed, else once they are.
  void Hold(uint64_t seq, Answer answer);

  // Entries to ask the leader for: unconfirmed ones applied kAskAfter ago
  // or contradicted by an acknowledgement, each at most once per kRecheck.
  struct Ask {
    uint64_t seq = 0, fingerprint = 0;
  };
  std::vector<Ask> ToAsk(Clock::time_point now, size_t max);
  // The leader's fingerprint of entry `seq`: confirms it, or counts a
  // mismatch; true once it mismatched kConfirmations times (diverged).
  bool LeaderSays(uint64_t seq, uint64_t leader_fingerprint);

  // Drops every held answer (each runs with false).
  void DropHeld();

  uint64_t confirmed_through() const;
  size_t held() const;
  size_t unconfirmed() const;

 private:
  struct Entry {
    uint64_t seq = 0, fingerprint = 0;
    Clock::time_point applied_at{}, asked_at{};  // asked_at: never asked while {}
    bool confirmed = false, contradicted = false;
    int mismatches = 0;
  };
  struct Slot {
    uint64_t seq = 0, fingerprint = 0;
  };

  Entry* Find(uint64_t seq);           // an unconfirmed entry still waiting, or null
  void Advance(std::vector<Answer>& released);  // moves confirmed_through_, takes what it frees
  static void Run(std::vector<Answer>& answers, bool confirmed);

  mutable std::mutex mu_;
  std::vector<Slot> ring_;     // acknowledgements by seq % kRingEntries
  std::deque<Entry> waiting_;  // applied, not all confirmed: in seq order
  uint64_t last_applied_ = 0;
  uint64_t confirmed_through_ = 0;
  std::multimap<uint64_t, Answer> held_;  // by entry seq
  std::map<uint64_t, std::pair<uint64_t, bool>> vouches_;  // seq -> (fingerprint, contradicted) ahead of the applier
};

}  // namespace corvid::cluster
