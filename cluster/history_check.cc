#include "cluster/history_check.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace corvid::cluster {

uint64_t ExtendHistory(uint64_t history, uint64_t fingerprint) {
  unsigned char bytes[16];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<unsigned char>(history >> (8 * i));
    bytes[8 + i] = static_cast<unsigned char>(fingerprint >> (8 * i));
  }
  const uint64_t h = XXH3_64bits(bytes, sizeof bytes);
  return h == 0 ? 1 : h;
}

void HistoryCheck::Reset(uint64_t applied, uint64_t history) {
  std::lock_guard lock(mu_);
  const bool was_enabled = enabled_;
  enabled_ = !(applied > 0 && history == 0);
  base_ = last_ = applied;
  history_ = applied == 0 ? kEmptyHistory : history;
  // A rewind keeps what was applied up to the store's position (the same
  // entries); what came after is read, and recorded, again.
  if (!enabled_ || !was_enabled) {
    entries_.clear();
    checkpoints_.clear();
    agreed_through_ = verified_through_ = checked_through_ = 0;
  }
  while (!entries_.empty() && entries_.back().first > applied) entries_.pop_back();
  checkpoints_.erase(checkpoints_.upper_bound(applied), checkpoints_.end());
  if (enabled_ && applied > 0) checkpoints_[applied] = history_;
  agreed_through_ = std::min(agreed_through_, applied);
  verified_through_ = std::min(verified_through_, applied);
  checked_through_ = std::min(checked_through_, applied);
  pending_ = mismatch_seq_ = 0;
  mismatches_ = 0;
}

bool HistoryCheck::enabled() const {
  std::lock_guard lock(mu_);
  return enabled_;
}

uint64_t HistoryCheck::Record(uint64_t seq, uint64_t fingerprint) {
  std::lock_guard lock(mu_);
  if (!enabled_) return 0;
  history_ = ExtendHistory(history_, fingerprint);
  last_ = seq;
  entries_.emplace_back(seq, fingerprint);
  if (entries_.size() > kKeptEntries) entries_.pop_front();
  if (seq % kEvery == 0) {
    checkpoints_[seq] = history_;
    if (checkpoints_.size() > kKeptCheckpoints) checkpoints_.erase(checkpoints_.begin());
  }
  return history_;
}

void HistoryCheck::MarkIdle() {
  std::lock_guard lock(mu_);
  if (!enabled_ || last_ == 0 || checkpoints_.contains(last_)) return;
  checkpoints_[last_] = history_;
  if (checkpoints_.size() > kKeptCheckpoints) checkpoints_.erase(checkpoints_.begin());
}

Checkpoint HistoryCheck::Latest() const {
  std::lock_guard lock(mu_);
  if (!enabled_ || checkpoints_.empty()) return {};
  const auto& [seq, history] = *checkpoints_.rbegin();
  return {seq, history, seq <= verified_through_};
}

HistoryCheck::Plan HistoryCheck::Compare(const std::vector<PeerCheckpoint>& peers) {
  std::lock_guard lock(mu_);
  Plan plan;
  if (!enabled_) return plan;
  struct Against {
    uint64_t seq, history;
    bool verified;
  };
  std::vector<Against> against;
  for (const auto& p : peers) {
    const Checkpoint& c = p.checkpoint;
    if (c.seq == 0) continue;
    auto it = checkpoints_.find(c.seq);
    if (it == checkpoints_.end()) continue;  // not a point this node can compare
    if (it->second == c.history) agreed_through_ = std::max(agreed_through_, c.seq);
    else against.push_back({c.seq, c.history, c.verified});
  }
  // A later agreement outweighs an earlier disagreement: that peer, not
  // this node, took another entry.
  std::erase_if(against, [&](const Against& a) { return a.seq <= agreed_through_; });
  if (against.empty()) {
    pending_ = 0;
    return plan;
  }
  uint64_t first = UINT64_MAX;
  bool urgent = false;
  for (const auto& a : against) {
    first = std::min(first, a.seq);
    urgent |= a.verified;
    for (const auto& b : against)  // two peers agreeing with each other against this node
      if (&a != &b && a.seq == b.seq && a.history == b.history) {
        urgent = true;
        plan.outvoted = true;
      }
  }
  // One heartbeat's disagreement may be a peer about to agree; two, or a
  // verified or shared one, is checked.
  const bool act = urgent || pending_ != 0;
  pending_ = first;
  if (!act) {
    plan.outvoted = false;
    return plan;
  }
  plan.through = first;
  const uint64_t from = plan.from = std::max(agreed_through_, checked_through_);
  plan.covered = !entries_.empty() ? entries_.front().first <= agreed_through_ + 1 : last_ <= agreed_through_;
  if (mismatch_seq_ > from && mismatch_seq_ <= first) {
    // Confirm the mismatch first: the rest waits for its verdict.
    auto it = std::lower_bound(entries_.begin(), entries_.end(), std::make_pair(mismatch_seq_, uint64_t{0}));
    if (it != entries_.end() && it->first == mismatch_seq_) {
      plan.entries.push_back(*it);
      plan.confirming = true;
      plan.outvoted = false;
      return plan;
    }
  }
  auto it = std::upper_bound(entries_.begin(), entries_.end(), std::make_pair(from, UINT64_MAX));
  for (; it != entries_.end() && it->first <= first; ++it) plan.entries.push_back(*it);
  // Outvoted counts only where the entries cannot tell.
  if (plan.covered) plan.outvoted = false;
  return plan;
}

bool HistoryCheck::Mismatch(uint64_t seq) {
  std::lock_guard lock(mu_);
  if (seq == mismatch_seq_) {
    ++mismatches_;
  } else {
    mismatch_seq_ = seq;
    mismatches_ = 1;
  }
  return mismatches_ >= kConfirmations;
}

void HistoryCheck::Verified(const Plan& plan, uint64_t seq) {
  std::lock_guard lock(mu_);
  if (mismatch_seq_ != 0 && mismatch_seq_ <= seq) {
    mismatch_seq_ = 0;
    mismatches_ = 0;
  }
  // Only a run from where the entries were last known good counts (a
  // rewind or an agreement since moved that point).
  if (plan.confirming || plan.from != std::max(agreed_through_, checked_through_)) return;
  checked_through_ = std::max(checked_through_, seq);
  if (seq >= plan.through && plan.covered) {
    agreed_through_ = std::max(agreed_through_, plan.through);
    verified_through_ = std::max(verified_through_, plan.through);
    pending_ = 0;
  }
}

}  // namespace corvid::cluster
