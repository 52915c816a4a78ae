#include "cluster/ack_gate.h"

#include <algorithm>

namespace corvid::cluster {

AckGate::AckGate() : ring_(kRingEntries) {}

void AckGate::Reset(uint64_t applied) {
  std::vector<Answer> released;
  {
    std::lock_guard lock(mu_);
    while (!waiting_.empty() && waiting_.back().seq > applied) waiting_.pop_back();
    last_applied_ = applied;
    if (confirmed_through_ > applied) confirmed_through_ = applied;
    Advance(released);
  }
  Run(released, true);
}

void AckGate::Applied(uint64_t seq, uint64_t fingerprint, bool watched, Clock::time_point now) {
  std::vector<Answer> released;
  {
    std::lock_guard lock(mu_);
    if (seq <= last_applied_) return;  // applied before the position: nothing to confirm
    last_applied_ = seq;
    while (!vouches_.empty() && vouches_.begin()->first < seq) vouches_.erase(vouches_.begin());
    const Slot& s = ring_[seq % kRingEntries];
    const bool acknowledged = s.seq == seq && s.fingerprint == fingerprint;
    if (waiting_.empty() && (!watched || acknowledged)) {
      confirmed_through_ = seq;
    } else {
      Entry e;
      e.seq = seq;
      e.fingerprint = fingerprint;
      e.applied_at = now;
      e.confirmed = !watched || acknowledged;
      e.contradicted = s.seq == seq && !acknowledged;
      if (auto v = vouches_.find(seq); v != vouches_.end()) {
        if (v->second.first != fingerprint || v->second.second) e.contradicted = true;
        else if (!e.contradicted) e.confirmed = true;
      }
      waiting_.push_back(e);
    }
    Advance(released);
  }
  Run(released, true);
}

void AckGate::Confirm(uint64_t seq, uint64_t fingerprint) {
  std::vector<Answer> released;
  {
    std::lock_guard lock(mu_);
    if (seq <= confirmed_through_) return;
    ring_[seq % kRingEntries] = {seq, fingerprint};
    if (Entry* e = Find(seq)) {
      if (e->fingerprint == fingerprint) e->confirmed = true;
      else e->contradicted = true;
    }
    Advance(released);
  }
  Run(released, true);
}

void AckGate::Vouch(uint64_t seq, uint64_t fingerprint) {
  std::vector<Answer> released;
  {
    std::lock_guard lock(mu_);
    if (seq <= confirmed_through_) return;
    if (seq > last_applied_) {  // this node has not applied it yet
      auto [v, fresh] = vouches_.try_emplace(seq, fingerprint, false);
      if (!fresh && v->second.first != fingerprint) v->second.second = true;  // two peers disagree
      if (vouches_.size() > kVouchesKept) vouches_.erase(std::prev(vouches_.end()));
      return;
    }
    Entry* e = Find(seq);
    if (!e) return;
    if (e->fingerprint != fingerprint) e->contradicted = true;
    else if (!e->contradicted) e->confirmed = true;
    Advance(released);
  }
  Run(released, true);
}

void AckGate::Hold(uint64_t seq, Answer answer) {
  {
    std::lock_guard lock(mu_);
    if (seq > confirmed_through_) {
      held_.emplace(seq, std::move(answer));
      return;
    }
  }
  answer(true);
}

std::vector<AckGate::Ask> AckGate::ToAsk(Clock::time_point now, size_t max) {
  std::vector<Ask> out;
  std::lock_guard lock(mu_);
  // Only the front of the queue: asking far ahead of the first entry still
  // waiting frees nothing sooner, and acknowledgements usually come anyway.
  size_t scanned = 0;
  for (Entry& e : waiting_) {
    if (out.size() >= max || ++scanned > 4 * max) break;
    if (e.confirmed) continue;
    if (!e.contradicted && now - e.applied_at < kAskAfter) break;  // younger ones too
    if (e.asked_at != Clock::time_point{} && now - e.asked_at < kRecheck) continue;
    e.asked_at = now;
    out.push_back({e.seq, e.fingerprint});
  }
  return out;
}

bool AckGate::LeaderSays(uint64_t seq, uint64_t leader_fingerprint) {
  std::vector<Answer> released;
  bool diverged = false;
  {
    std::lock_guard lock(mu_);
    Entry* e = Find(seq);
    if (!e) return false;
    if (e->fingerprint == leader_fingerprint) {
      e->confirmed = true;
      Advance(released);
    } else {
      e->contradicted = true;
      diverged = ++e->mismatches >= kConfirmations;
    }
  }
  Run(released, true);
  return diverged;
}

void AckGate::DropHeld() {
  std::vector<Answer> dropped;
  {
    std::lock_guard lock(mu_);
    for (auto& [seq, a] : held_) dropped.push_back(std::move(a));
    held_.clear();
  }
  Run(dropped, false);
}

uint64_t AckGate::confirmed_through() const {
  std::lock_guard lock(mu_);
  return confirmed_through_;
}

size_t AckGate::held() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

size_t AckGate::unconfirmed() const {
  std::lock_guard lock(mu_);
  return size_t(std::count_if(waiting_.begin(), waiting_.end(), [](const Entry& e) { return !e.confirmed; }));
}

AckGate::Entry* AckGate::Find(uint64_t seq) {
  auto it = std::lower_bound(waiting_.begin(), waiting_.end(), seq,
                             [](const Entry& e, uint64_t s) { return e.seq < s; });
  return it != waiting_.end() && it->seq == seq ? &*it : nullptr;
}

void AckGate::Advance(std::vector<Answer>& released) {
  while (!waiting_.empty()) {
    Entry& e = waiting_.front();
    if (!e.confirmed) {
      const Slot& s = ring_[e.seq % kRingEntries];
      if (s.seq != e.seq || s.fingerprint != e.fingerprint) break;
      e.confirmed = true;
    }
    confirmed_through_ = e.seq;
    waiting_.pop_front();
  }
  if (waiting_.empty()) confirmed_through_ = std::max(confirmed_through_, last_applied_);
  while (!held_.empty() && held_.begin()->first <= confirmed_through_) {
    released.push_back(std::move(held_.begin()->second));
    held_.erase(held_.begin());
  }
}

void AckGate::Run(std::vector<Answer>& answers, bool confirmed) {
  for (Answer& a : answers) a(confirmed);
}

}  // namespace corvid::cluster
