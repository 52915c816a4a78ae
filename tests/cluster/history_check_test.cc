// Comparing applied histories (cluster/history_check.h): a node that took
// one wrong entry and then the right ones again is found by its checkpoints
// and pinned to that entry by the leader's copies; honest nodes never are.
#include "cluster/history_check.h"

#include <catch2/catch.hpp>

#include <map>
#include <optional>

namespace corvid::cluster {
namespace {

uint64_t Fp(uint64_t seq) { return seq * 0x9e3779b97f4a7c15ull + 7; }

// A node's applier and heartbeat over a log whose entry `seq` has
// fingerprint Fp(seq), except where `wrong` says this node read another.
struct Node {
  std::string id;
  HistoryCheck check;
  std::map<uint64_t, uint64_t> wrong;
  uint64_t applied = 0;

  explicit Node(std::string name) : id(std::move(name)) { check.Reset(0, 0); }
  void ApplyThrough(uint64_t seq) {
    for (uint64_t s = applied + 1; s <= seq; ++s) check.Record(s, wrong.contains(s) ? wrong[s] : Fp(s));
    applied = seq;
  }
  PeerCheckpoint Heartbeat() const { return {id, check.Latest()}; }
};

struct Outcome {
  bool diverged = false;
  uint64_t asked = 0;  // entries asked of the leader
};

// One heartbeat on `self`, as ClusterNode::CheckHistory does it, with the
// leader answering from the true log (nullopt: no leader).
void Heartbeat(Node& self, const std::vector<PeerCheckpoint>& peers, Outcome& out, bool leader = true) {
  if (out.diverged) return;  // a diverged node stops comparing
  const HistoryCheck::Plan plan = self.check.Compare(peers);
  if (plan.through == 0) return;
  uint64_t good = 0;
  bool complete = true;
  for (const auto& [seq, fp] : plan.entries) {
    ++out.asked;
    const std::optional<uint64_t> theirs = leader ? std::optional<uint64_t>(Fp(seq)) : std::nullopt;
    if (!theirs) {
      complete = false;
      break;
    }
    if (*theirs != fp) {
      if (good) self.check.Verified(plan, good);
      if (self.check.Mismatch(seq)) out.diverged = true;
      return;
    }
    good = seq;
  }
  if (good) self.check.Verified(plan, good);
  if (complete && !plan.covered && !plan.confirming && plan.outvoted) out.diverged = true;
}

// Heartbeats of three nodes until `rounds` have passed.
void Rounds(std::vector<Node*> nodes, int rounds, std::map<std::string, Outcome>& out) {
  for (int r = 0; r < rounds; ++r) {
    std::vector<PeerCheckpoint> beats;
    for (Node* n : nodes) beats.push_back(n->Heartbeat());
    for (Node* n : nodes) {
      std::vector<PeerCheckpoint> others;
      for (const auto& b : beats)
        if (b.node_id != n->id) others.push_back(b);
      Heartbeat(*n, others, out[n->id]);
    }
  }
}

}  // namespace

TEST_CASE("the digest depends on every entry and its order", "[cluster][history]") {
  const uint64_t ab = ExtendHistory(ExtendHistory(kEmptyHistory, 1), 2);
  CHECK(ab == ExtendHistory(ExtendHistory(kEmptyHistory, 1), 2));
  CHECK(ab != ExtendHistory(ExtendHistory(kEmptyHistory, 2), 1));
  CHECK(ab != ExtendHistory(ExtendHistory(kEmptyHistory, 1), 3));
  CHECK(ExtendHistory(kEmptyHistory, 1) != 0);
}

TEST_CASE("honest nodes agree and never ask the leader", "[cluster][history]") {
  Node a("a"), b("b"), c("c");
  std::map<std::string, Outcome> out;
  for (uint64_t through : {300, 700, 1024, 1500, 1500}) {
    a.ApplyThrough(through);
    b.ApplyThrough(through - 100);  // behind, then caught up on idle
    c.ApplyThrough(through);
    if (through == 1500) {
      b.ApplyThrough(1500);
      for (Node* n : {&a, &b, &c}) n->check.MarkIdle();
    }
    Rounds({&a, &b, &c}, 2, out);
  }
  for (auto& [id, o] : out) {
    CHECK_FALSE(o.diverged);
    CHECK(o.asked == 0);
  }
  CHECK(a.check.Latest().seq == 1500);
}

TEST_CASE("a node that read one wrong entry, then the right ones, diverges; its peers do not", "[cluster][history]") {
  Node a("a"), b("b"), c("c");
  b.wrong[600] = 12345;  // a stale replica's entry, where the log holds another
  std::map<std::string, Outcome> out;
  a.ApplyThrough(512);
  b.ApplyThrough(512);
  c.ApplyThrough(512);
  Rounds({&a, &b, &c}, 1, out);  // all agree at 512
  for (Node* n : {&a, &b, &c}) n->ApplyThrough(1000);
  for (Node* n : {&a, &b, &c}) n->check.MarkIdle();  // the last entry matches everywhere
  Rounds({&a, &b, &c}, HistoryCheck::kConfirmations + 2, out);
  CHECK(out["b"].diverged);
  CHECK_FALSE(out["a"].diverged);
  CHECK_FALSE(out["c"].diverged);
  // b asked for its entries since the agreement at 512, and then only for
  // the mismatching one, once per heartbeat.
  CHECK(out["b"].asked <= (600 - 512) + HistoryCheck::kConfirmations);
  CHECK(out["a"].asked == 0);
}

TEST_CASE("a mismatch must repeat: a leader that answers differently once is not believed", "[cluster][history]") {
  Node a("a"), b("b");
  b.wrong[300] = 1;
  a.ApplyThrough(256);
  b.ApplyThrough(256);
  std::map<std::string, Outcome> out;
  Rounds({&a, &b}, 1, out);
  a.ApplyThrough(512);
  b.ApplyThrough(512);
  // Two heartbeats with no leader: nothing is decided.
  for (int r = 0; r < 4; ++r) {
    Heartbeat(b, {a.Heartbeat()}, out["b"], /*leader=*/false);
    Heartbeat(a, {b.Heartbeat()}, out["a"], /*leader=*/false);
  }
  CHECK_FALSE(out["b"].diverged);
  CHECK_FALSE(out["a"].diverged);
  // With a leader, b is pinned to entry 300 and a (alone with b, so it
  // checks itself too) is found right.
  for (int r = 0; r < HistoryCheck::kConfirmations + 2; ++r) {
    Heartbeat(b, {a.Heartbeat()}, out["b"]);
    Heartbeat(a, {b.Heartbeat()}, out["a"]);
  }
  CHECK(out["b"].diverged);
  CHECK_FALSE(out["a"].diverged);
  CHECK(a.check.Latest().verified);
}

TEST_CASE("a restarted node whose difference predates it is decided by two agreeing peers", "[cluster][history]") {
  Node a("a"), c("c"), old_b("b");
  old_b.wrong[100] = 5;
  a.ApplyThrough(512);
  c.ApplyThrough(512);
  old_b.ApplyThrough(512);
  // b restarts from its store at 512: it keeps the digest, not the entries.
  Node b("b");
  b.check.Reset(512, old_b.check.Latest().history);
  b.applied = 512;
  std::map<std::string, Outcome> out;
  Rounds({&a, &b, &c}, 3, out);
  CHECK(out["b"].diverged);
  CHECK_FALSE(out["a"].diverged);
  CHECK_FALSE(out["c"].diverged);
}

TEST_CASE("a store without a digest turns the check off", "[cluster][history]") {
  HistoryCheck check;
  check.Reset(40, 0);
  CHECK_FALSE(check.enabled());
  CHECK(check.Record(41, 1) == 0);
  CHECK(check.Latest().seq == 0);
  check.Reset(0, 0);  // an empty store starts from the empty history
  CHECK(check.enabled());
  CHECK(check.Record(1, 1) == ExtendHistory(kEmptyHistory, 1));
}

TEST_CASE("a rewind records the entries after the store's position again, alike", "[cluster][history]") {
  HistoryCheck check;
  check.Reset(0, 0);
  uint64_t at_300 = 0, at_512 = 0;
  for (uint64_t s = 1; s <= 512; ++s) {
    const uint64_t h = check.Record(s, Fp(s));
    if (s == 300) at_300 = h;
    if (s == 512) at_512 = h;
  }
  check.Reset(300, at_300);
  for (uint64_t s = 301; s <= 512; ++s) check.Record(s, Fp(s));
  CHECK(check.Latest().seq == 512);
  CHECK(check.Latest().history == at_512);
}

}  // namespace corvid::cluster
