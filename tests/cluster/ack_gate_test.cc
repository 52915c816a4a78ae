// Answers held until the entries before them are confirmed
// (cluster/ack_gate.h): a node that applied an entry no acknowledgement and
// no leader vouches for answers nothing after it; honest traffic is
// answered as soon as its acknowledgements arrive.
#include "cluster/ack_gate.h"

#include <catch2/catch.hpp>

#include <vector>

namespace corvid::cluster {
namespace {

using Clock = AckGate::Clock;
using std::chrono::milliseconds;

uint64_t Fp(uint64_t seq) { return seq * 0x9e3779b97f4a7c15ull + 7; }

// Answers as the node gives them: (seq, confirmed).
struct Answers {
  std::vector<std::pair<uint64_t, bool>> given;
  AckGate::Answer For(uint64_t seq) {
    return [this, seq](bool ok) { given.emplace_back(seq, ok); };
  }
};

TEST_CASE("an answer waits for the acknowledgements of every entry up to its own", "[ack_gate]") {
  AckGate gate;
  Answers a;
  const auto t0 = Clock::now();
  gate.Reset(10);
  for (uint64_t s = 11; s <= 13; ++s) gate.Applied(s, Fp(s), true, t0);
  gate.Hold(13, a.For(13));
  gate.Hold(11, a.For(11));
  CHECK(a.given.empty());
  gate.Confirm(12, Fp(12));  // out of order: 11 still missing
  CHECK(a.given.empty());
  gate.Confirm(11, Fp(11));
  REQUIRE(a.given.size() == 1);
  CHECK(a.given[0] == std::make_pair(uint64_t{11}, true));
  CHECK(gate.confirmed_through() == 12);
  gate.Confirm(13, Fp(13));
  REQUIRE(a.given.size() == 2);
  CHECK(a.given[1] == std::make_pair(uint64_t{13}, true));
  CHECK(gate.unconfirmed() == 0);
  CHECK(gate.held() == 0);
}

TEST_CASE("acknowledgements that arrive before the entry confirm it when it is applied", "[ack_gate]") {
  AckGate gate;
  Answers a;
  gate.Reset(0);
  for (uint64_t s = 1; s <= 100; ++s) gate.Confirm(s, Fp(s));
  for (uint64_t s = 1; s <= 100; ++s) {
    gate.Applied(s, Fp(s), true, Clock::now());
    gate.Hold(s, a.For(s));
  }
  CHECK(a.given.size() == 100);
  CHECK(gate.confirmed_through() == 100);
  CHECK(gate.ToAsk(Clock::now() + milliseconds(5000), 10).empty());
}

TEST_CASE("entries stored before the node listened need no acknowledgement", "[ack_gate]") {
  AckGate gate;
  Answers a;
  gate.Reset(0);
  gate.Applied(1, Fp(1), false, Clock::now());
  gate.Hold(1, a.For(1));
  CHECK(a.given.size() == 1);
  // An unwatched entry behind a watched one still waits for the first.
  gate.Applied(2, Fp(2), true, Clock::now());
  gate.Applied(3, Fp(3), false, Clock::now());
  gate.Hold(3, a.For(3));
  CHECK(a.given.size() == 1);
  gate.Confirm(2, Fp(2));
  CHECK(a.given.size() == 2);
}

// The case the gate exists for: the consumer served entry 5 from a replica
// whose copy the log does not hold; the writes after it are answered only
// once the leader has the last word, and not at all if it disagrees.
TEST_CASE("a phantom entry holds every later answer and, confirmed wrong by the leader, diverges the node",
          "[ack_gate]") {
  AckGate gate;
  Answers a;
  const auto t0 = Clock::now();
  gate.Reset(4);
  gate.Applied(5, 0xbad, true, t0);  // the phantom: its real entry was Fp(5)
  for (uint64_t s = 6; s <= 8; ++s) gate.Applied(s, Fp(s), true, t0);
  gate.Confirm(5, Fp(5));  // the acknowledgement of the real entry 5 contradicts it
  for (uint64_t s = 6; s <= 8; ++s) gate.Confirm(s, Fp(s));
  gate.Hold(8, a.For(8));
  CHECK(a.given.empty());
  CHECK(gate.confirmed_through() == 4);

  // Contradicted: asked at once, then once per kRecheck.
  auto ask = gate.ToAsk(t0, 8);
  REQUIRE(ask.size() == 1);
  CHECK(ask[0].seq == 5);
  CHECK(ask[0].fingerprint == 0xbad);
  CHECK(gate.ToAsk(t0 + milliseconds(10), 8).empty());
  bool diverged = gate.LeaderSays(5, Fp(5));
  for (int i = 1; i < AckGate::kConfirmations; ++i) {
    CHECK_FALSE(diverged);
    ask = gate.ToAsk(t0 + i * AckGate::kRecheck, 8);
    REQUIRE(ask.size() == 1);
    diverged = gate.LeaderSays(5, Fp(5));
  }
  CHECK(diverged);
  CHECK(a.given.empty());
  gate.DropHeld();
  REQUIRE(a.given.size() == 1);
  CHECK(a.given[0] == std::make_pair(uint64_t{8}, false));
}

TEST_CASE("an entry nobody acknowledged is asked of the leader after a while and released by its answer",
          "[ack_gate]") {
  AckGate gate;
  Answers a;
  const auto t0 = Clock::now();
  gate.Reset(0);
  gate.Applied(1, Fp(1), true, t0);  // its origin died before broadcasting
  gate.Applied(2, Fp(2), true, t0);
  gate.Confirm(2, Fp(2));
  gate.Hold(2, a.For(2));
  CHECK(gate.ToAsk(t0 + milliseconds(10), 8).empty());  // too young
  auto ask = gate.ToAsk(t0 + AckGate::kAskAfter, 8);
  REQUIRE(ask.size() == 1);
  CHECK(ask[0].seq == 1);
  CHECK(a.given.empty());
  CHECK_FALSE(gate.LeaderSays(1, Fp(1)));
  REQUIRE(a.given.size() == 1);
  CHECK(a.given[0] == std::make_pair(uint64_t{2}, true));
}

// A partition: the entry's origin is cut off before it could broadcast its
// acknowledgement, and JetStream answers no get while it elects its meta
// leader. The nodes that still reach each other vouch for what they applied.
TEST_CASE("a peer's vouch for the same bytes confirms an entry nobody acknowledged", "[ack_gate]") {
  AckGate gate;
  Answers a;
  const auto t0 = Clock::now();
  gate.Reset(0);
  gate.Applied(1, Fp(1), true, t0);
  gate.Applied(2, Fp(2), true, t0);
  gate.Confirm(2, Fp(2));
  gate.Hold(2, a.For(2));
  CHECK(a.given.empty());
  gate.Vouch(1, Fp(1));
  REQUIRE(a.given.size() == 1);
  CHECK(a.given[0] == std::make_pair(uint64_t{2}, true));

  // A vouch that arrives before this node applied the entry.
  gate.Vouch(3, Fp(3));
  gate.Applied(3, Fp(3), true, t0);
  gate.Hold(3, a.For(3));
  CHECK(a.given.size() == 2);
}

TEST_CASE("a vouch never outweighs a contradiction: the leader decides", "[ack_gate]") {
  AckGate gate;
  Answers a;
  const auto t0 = Clock::now();
  gate.Reset(0);
  gate.Applied(1, 0xbad, true, t0);  // this node's copy
  gate.Hold(1, a.For(1));
  gate.Vouch(1, Fp(1));   // a peer applied other bytes there
  gate.Vouch(1, 0xbad);   // and another the same as this node
  CHECK(a.given.empty());
  auto ask = gate.ToAsk(t0, 8);  // contradicted: asked at once
  REQUIRE(ask.size() == 1);
  CHECK_FALSE(gate.LeaderSays(1, 0xbad));
  CHECK(a.given.size() == 1);

  // Two peers disagreeing ahead of this node: its entry waits for the leader.
  gate.Vouch(2, Fp(2));
  gate.Vouch(2, 0xbad);
  gate.Applied(2, Fp(2), true, t0);
  gate.Hold(2, a.For(2));
  CHECK(a.given.size() == 1);
  // An acknowledgement is the log's own word and settles it.
  gate.Confirm(2, Fp(2));
  CHECK(a.given.size() == 2);
}

TEST_CASE("a rewind forgets entries past the store's position; they are applied again", "[ack_gate]") {
  AckGate gate;
  Answers a;
  gate.Reset(0);
  gate.Applied(1, Fp(1), true, Clock::now());
  gate.Applied(2, Fp(2), true, Clock::now());
  gate.Confirm(1, Fp(1));
  gate.Reset(1);  // entry 2 failed locally: the applier reads it again
  CHECK(gate.unconfirmed() == 0);
  gate.Applied(2, Fp(2), true, Clock::now());
  gate.Hold(2, a.For(2));
  CHECK(a.given.empty());
  gate.Confirm(2, Fp(2));
  CHECK(a.given.size() == 1);
}

TEST_CASE("an acknowledgement overwritten in the ring before its entry is applied leaves that entry to the leader",
          "[ack_gate]") {
  AckGate gate;
  gate.Reset(0);
  gate.Confirm(1, Fp(1));
  gate.Confirm(1 + AckGate::kRingEntries, Fp(1 + AckGate::kRingEntries));
  const auto t0 = Clock::now();
  gate.Applied(1, Fp(1), true, t0);
  CHECK(gate.confirmed_through() == 0);
  auto ask = gate.ToAsk(t0 + AckGate::kAskAfter, 8);
  REQUIRE(ask.size() == 1);
  CHECK(ask[0].seq == 1);
}

}  // namespace
}  // namespace corvid::cluster
