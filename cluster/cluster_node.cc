// The cluster node: publishing, the applier, membership (cluster_node.h;
// the design and its guarantees are in docs/cluster.md).
#include "cluster/cluster_node.h"

#include "common/log.h"

#include <nats/nats.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "cluster/ack_gate.h"
#include "cluster/log_entry.h"
#include "common/durable_file.h"
#include "common/faults.h"
#include "indexing/index_engine.h"

namespace corvid::cluster {

namespace {

using Clock = std::chrono::steady_clock;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status NatsError(natsStatus s, std::string_view what, jsErrCode jerr = jsErrCode(0)) {
  std::string m(what);
  m += ": ";
  m += natsStatus_GetText(s);
  if (jerr != 0) m += " (JetStream error " + std::to_string(int(jerr)) + ")";
  const char* last = nats_GetLastError(nullptr);
  if (last && *last) {
    m += ": ";
    m += last;
  }
  return Status::Unavailable(m);
}

// A connection with its JetStream context, the log stream and the
// membership bucket, created if missing.
struct Connection {
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  kvStore* kv = nullptr;

  ~Connection() {
    if (kv) kvStore_Destroy(kv);
    if (js) jsCtx_Destroy(js);
    if (nc) {
      natsConnection_Close(nc);
      natsConnection_Destroy(nc);
    }
  }

  Status Open(const ClusterOptions& o, jsPubAckHandler ack_handler, void* ack_closure) {
    natsOptions* opts = nullptr;
    natsStatus s = natsOptions_Create(&opts);
    std::vector<const char*> urls;
    for (const auto& u : o.nats_urls) urls.push_back(u.c_str());
    if (s == NATS_OK) s = natsOptions_SetServers(opts, urls.data(), int(urls.size()));
    if (s == NATS_OK) s = natsOptions_SetNoRandomize(opts, true);
    if (s == NATS_OK) s = natsOptions_SetName(opts, ("corvid-" + o.node_id).c_str());
    if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, -1);
    if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, 250);
    if (s == NATS_OK) s = natsOptions_SetPingInterval(opts, 1000);
    if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(opts, 3);
    if (s == NATS_OK) s = natsOptions_SetTimeout(opts, 2000);
    if (s == NATS_OK) s = natsConnection_Connect(&nc, opts);
    natsOptions_Destroy(opts);
    if (s != NATS_OK) return NatsError(s, "connect to NATS");
    jsOptions jo;
    jsOptions_Init(&jo);
    // JetStream API requests (the stream's and the bucket's setup, their
    // reads, heartbeats): one sent while the JetStream cluster elects its
    // leaders can go unanswered, and waiting out a long write deadline
    // (--nats-timeout-ms 600000 in e2e_cluster test 7) stalled a node's
    // start for that long. At most 5 s, then the caller retries. Writes
    // have their own deadline (PublishOne).
    jo.Wait = std::clamp<int64_t>(o.timeout_ms, 1000, 5000);
    jo.PublishAsync.MaxPending = 65536;
    jo.PublishAsync.AckHandler = ack_handler;
    jo.PublishAsync.AckHandlerClosure = ack_closure;
    s = natsConnection_JetStream(&js, nc, &jo);
    if (s != NATS_OK) return NatsError(s, "JetStream context");

    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    const char* subjects[] = {o.subject.c_str()};
    sc.Name = o.stream.c_str();
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_FileStorage;
    sc.Replicas = o.replicas;
    sc.MaxAge = o.max_age_seconds * int64_t{1000000000};
    sc.MaxBytes = o.max_bytes;
    sc.Discard = js_DiscardOld;
    jsStreamInfo* si = nullptr;
    jsErrCode jerr = jsErrCode(0);
    s = js_AddStream(&si, js, &sc, nullptr, &jerr);
    if (si) jsStreamInfo_Destroy(si);
    if (s != NATS_OK && jerr != JSStreamNameExistErr) return NatsError(s, "create the log stream " + o.stream, jerr);

    kvConfig kc;
    kvConfig_Init(&kc);
    kc.Bucket = o.bucket.c_str();
    kc.History = 1;
    kc.Replicas = o.replicas;
    kc.StorageType = js_FileStorage;
    s = js_CreateKeyValue(&kv, js, &kc);
    if (s != NATS_OK) {
      kv = nullptr;
      natsStatus b = js_KeyValue(&kv, js, o.bucket.c_str());
      if (b != NATS_OK) return NatsError(s, "create the membership bucket " + o.bucket);
    }
    return Status::Ok();
  }

  Result<LogInfo> ReadLog(const ClusterOptions& o) const {
    jsStreamInfo* si = nullptr;
    jsErrCode jerr = jsErrCode(0);
    natsStatus s = js_GetStreamInfo(&si, js, o.stream.c_str(), nullptr, &jerr);
    if (s != NATS_OK) return NatsError(s, "read the log's state", jerr);
    LogInfo info;
    info.first_seq = si->State.FirstSeq;
    info.last_seq = si->State.LastSeq;
    info.messages = si->State.Msgs;
    info.replicas = int(si->Config ? si->Config->Replicas : 0);
    info.from_leader = !si->Cluster || (si->Cluster->Leader && *si->Cluster->Leader);
    jsStreamInfo_Destroy(si);
    return info;
  }

  // The fingerprint of log entry `seq` as the stream's leader holds it
  // (JetStream's non-direct get is answered by the leader only); nullopt
  // when it does not answer or does not hold the entry.
  std::optional<uint64_t> LeaderFingerprint(const ClusterOptions& o, uint64_t seq) const {
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 1000;
    natsMsg* msg = nullptr;
    jsErrCode jerr = jsErrCode(0);
    if (js_GetMsg(&msg, js, o.stream.c_str(), seq, &jo, &jerr) != NATS_OK || !msg) return std::nullopt;
    const uint64_t fp = EntryFingerprint(std::string_view(natsMsg_GetData(msg), size_t(natsMsg_GetDataLength(msg))));
    natsMsg_Destroy(msg);
    return fp;
  }

  // One node's heartbeat from its bucket entry; nullopt if unreadable.
  static std::optional<PeerInfo> ParsePeer(kvEntry* e) {
    if (kvEntry_Operation(e) != kvOp_Put) return std::nullopt;
    rapidjson::Document d;
    d.Parse(kvEntry_ValueString(e));
    if (d.HasParseError() || !d.IsObject()) return std::nullopt;
    PeerInfo p;
    p.node_id = kvEntry_Key(e);
    auto str = [&](const char* k) { return d.HasMember(k) && d[k].IsString() ? d[k].GetString() : ""; };
    auto num = [&](const char* k) -> uint64_t { return d.HasMember(k) && d[k].IsUint64() ? d[k].GetUint64() : 0; };
    p.url = str("url");
    p.state = str("state");
    p.applied_etag = num("appliedEtag");
    p.applied_seq = num("appliedSeq");
    p.lag_ms = int64_t(num("lagMs"));
    p.at_ms = int64_t(num("atMs"));
    p.checkpoint.seq = num("ckSeq");
    p.checkpoint.history = num("ckHistory");
    p.checkpoint.verified = d.HasMember("ckVerified") && d["ckVerified"].IsBool() && d["ckVerified"].GetBool();
    return p;
  }

  // Every node's last heartbeat, read once (a node's start); nullopt when
  // the bucket cannot be read. A running node watches the bucket instead.
  std::optional<std::vector<PeerInfo>> ReadPeers() const {
    std::vector<PeerInfo> peers;
    kvKeysList keys{};
    if (kvStore_Keys(&keys, kv, nullptr) != NATS_OK) return std::nullopt;
    for (int i = 0; i < keys.Count; ++i) {
      kvEntry* e = nullptr;
      if (kvStore_Get(&e, kv, keys.Keys[i]) != NATS_OK) continue;
      if (auto p = ParsePeer(e)) peers.push_back(std::move(*p));
      kvEntry_Destroy(e);
    }
    kvKeysList_Destroy(&keys);
    return peers;
  }
};

constexpr int64_t kHeartbeatMs = 1000;

}  // namespace

namespace {
constexpr const char* kDivergedMarker = "cluster-diverged";
}  // namespace

Status MarkDiverged(const std::string& data_dir, std::string_view why) {
  return WriteFileAtomic(data_dir, kDivergedMarker, std::string(why) + "\n");
}

bool IsMarkedDiverged(const std::string& data_dir) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::path(data_dir) / kDivergedMarker, ec);
}

bool CanGiveSnapshot(const PeerInfo& p, std::string_view self_id) {
  return p.node_id != self_id && p.state == "active" && !p.url.empty() && NowMs() - p.at_ms <= kPeerStaleMs;
}

uint64_t EntryFingerprint(std::string_view entry) {
  const uint64_t h = XXH3_64bits(entry.data(), entry.size());
  return h == 0 ? 1 : h;
}

Status ValidateOptions(const ClusterOptions& o) {
  if (o.nats_urls.empty()) return Status::InvalidArgument("--nats needs at least one nats://HOST:PORT");
  for (const auto& u : o.nats_urls)
    if (!u.starts_with("nats://") || u.size() <= 7) return Status::InvalidArgument("--nats URLs look like nats://HOST:PORT, got '" + u + "'");
  if (o.node_id.empty() || o.node_id.size() > 64) return Status::InvalidArgument("--node-id needs 1 to 64 characters");
  for (char c : o.node_id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'))
      return Status::InvalidArgument("--node-id may hold letters, digits, '-' and '_' only");
  if (!o.advertise.starts_with("http://") && !o.advertise.starts_with("https://"))
    return Status::InvalidArgument("--advertise needs this node's URL, http://HOST:PORT");
  if (o.replicas < 1 || o.replicas > 5) return Status::InvalidArgument("--replicas must be 1 to 5 (JetStream's limit)");
  if (o.timeout_ms < 100) return Status::InvalidArgument("--nats-timeout-ms must be at least 100");
  return Status::Ok();
}

Result<Probe> ProbeCluster(const ClusterOptions& options, uint64_t check_seq) {
  Connection c;
  if (Status s = c.Open(options, nullptr, nullptr); !s.ok()) return s;
  auto log = c.ReadLog(options);
  if (!log.ok()) return log.status();
  Probe p;
  p.log = *log;
  if (check_seq > 0 && log->from_leader && check_seq >= log->first_seq && check_seq <= log->last_seq)
    p.checked_fingerprint = c.LeaderFingerprint(options, check_seq).value_or(0);
  if (auto peers = c.ReadPeers()) p.peers = std::move(*peers);
  return p;
}

class ClusterNode::Impl {
 public:
  Impl(ClusterOptions o, storage::DocumentStore& store, indexing::IndexEngine* engine)
      : options_(std::move(o)), store_(store), engine_(engine) {
    std::random_device rd;
    next_request_ = (uint64_t(rd()) << 32 | rd()) & ((uint64_t{1} << 62) - 1);
  }

  Status Start() {
    if (Status s = conn_.Open(options_, &Impl::OnAck, this); !s.ok()) return s;
    // Every node's publish acknowledgements, before the applier reads an
    // entry: entries stored from now on are confirmed by them (ack_gate.h).
    natsStatus ns = natsConnection_Subscribe(&acks_sub_, conn_.nc, ack_subject_.c_str(), &Impl::OnConfirmations, this);
    if (ns == NATS_OK) ns = natsSubscription_SetPendingLimits(acks_sub_, -1, 64 << 20);
    if (ns == NATS_OK) ns = natsConnection_Subscribe(&vouch_sub_, conn_.nc, vouch_subject_.c_str(), &Impl::OnVouch, this);
    if (ns == NATS_OK) ns = natsConnection_FlushTimeout(conn_.nc, 5000);
    if (ns != NATS_OK) return NatsError(ns, "listen for the log's acknowledgements");
    watch_start_ms_ = NowMs();
    auto log = conn_.ReadLog(options_);
    if (!log.ok()) return log.status();
    log_ = *log;
    // A node behind where its start found the log's end is catching_up. A
    // stream between leaders answers with an empty state that says
    // nothing: the end is then the first leader's answer (MembershipLoop).
    seen_last_seq_ = log->last_seq;
    if (log->from_leader) start_last_seq_ = log->last_seq;
    const storage::LogPosition pos = store_.GetLogPosition();
    applied_seq_ = pos.applied;
    applied_fp_ = pos.applied_hash;
    history_.Reset(pos.applied, pos.history);
    gate_.Reset(pos.applied);
    if (!history_.enabled())
      logging::Warn("cluster.history_unrecorded", "this store predates history digests: comparing whole histories with the peers is off until it installs a snapshot",
                    {{"node", options_.node_id}});
    // Marked diverged (by this process before, or by the bootstrap for lack
    // of a peer to install from): no writes until a snapshot is in.
    if (!options_.data_dir.empty() && IsMarkedDiverged(options_.data_dir)) diverged_ = true;
    applier_ = std::thread([this] { RunGuarded([this] { ApplierLoop(); }); });
    subscriber_ = std::thread([this] { RunGuarded([this] { SubscriberLoop(); }); });
    sweeper_ = std::thread([this] { RunGuarded([this] { SweeperLoop(); }); });
    membership_ = std::thread([this] { RunGuarded([this] { MembershipLoop(); }); });
    verifier_ = std::thread([this] { RunGuarded([this] { VerifierLoop(); }); });
    return Status::Ok();
  }

  ~Impl() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    drained_cv_.notify_all();
    sub_cv_.notify_all();
    if (applier_.joinable()) applier_.join();
    if (subscriber_.joinable()) subscriber_.join();
    if (sub_ready_) DestroySubscription(std::exchange(sub_ready_, nullptr));
    if (sweeper_.joinable()) sweeper_.join();
    if (membership_.joinable()) membership_.join();
    if (verifier_.joinable()) verifier_.join();
    // The store's merger may still answer entries submitted by the
    // applier: wait for them (they reference this object).
    {
      std::unique_lock lock(mu_);
      drained_cv_.wait(lock, [&] { return in_flight_ == 0; });
    }
    std::map<uint64_t, Pending> left;
    {
      std::lock_guard lock(mu_);
      left.swap(pending_);
    }
    for (auto& [id, p] : left) p.done(Applied{Status::Unavailable("the node is shutting down"), {}, 0});
    // Nothing from NATS may reach this object once its members are gone:
    // the broadcast acknowledgements and JetStream's answers to publishes
    // (OnAck) arrive on the library's threads. Draining the connection lets
    // the callbacks under way finish, then closes it.
    if (conn_.nc) {
      if (natsConnection_DrainTimeout(conn_.nc, 2000) == NATS_OK) {
        const auto until = Clock::now() + std::chrono::milliseconds(2500);
        while (!natsConnection_IsClosed(conn_.nc) && Clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      natsConnection_Close(conn_.nc);
    }
    if (acks_sub_) natsSubscription_Destroy(acks_sub_);
    if (vouch_sub_) natsSubscription_Destroy(vouch_sub_);
  }

  struct Applied {
    Status status;
    storage::WriteResult write;
    int index_outcome = 0;
  };
  using Done = std::function<void(Applied)>;

  // Publishes one request: `encode` appends its payload to the entry (so
  // a body is copied once, into the message); too large for one message,
  // it goes as chunks and a commit entry.
  void Publish(EntryType type, const std::function<void(std::string&)>& encode, Done done) {
    if (diverged_.load()) {
      return done({Status::Unavailable("this node has diverged from the log (its store holds entries the log does "
                                       "not); it takes writes again once it has installed a peer's snapshot"),
                   {}, 0});
    }
    if (natsConnection_Status(conn_.nc) != NATS_CONN_STATUS_CONNECTED)
      return done({Status::Unavailable("not connected to NATS: the write was not sent to the log"), {}, 0});
    const int64_t deadline = NowMs() + options_.timeout_ms;
    uint64_t id;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return done({Status::Unavailable("the node is shutting down"), {}, 0});
      id = next_request_++;
      pending_.emplace(id, Pending{deadline, Clock::now(), false, std::move(done)});
    }
    EntryHeader h{type, id, deadline, options_.node_id};
    std::string entry;
    EncodeHeader(h, entry);
    const size_t header_bytes = entry.size();
    encode(entry);
    natsStatus s = NATS_OK;
    if (entry.size() - header_bytes <= options_.chunk_bytes) {
      s = PublishOne(entry);
    } else {
      const std::string_view payload = std::string_view(entry).substr(header_bytes);
      uint32_t chunks = 0;
      h.type = EntryType::kChunk;
      for (size_t off = 0; off < payload.size() && s == NATS_OK; off += options_.chunk_bytes, ++chunks) {
        std::string chunk;
        EncodeHeader(h, chunk);
        EncodeChunkPayload(chunks, payload.substr(off, options_.chunk_bytes), chunk);
        s = PublishOne(chunk);
      }
      if (s == NATS_OK) {
        h.type = EntryType::kCommit;
        std::string commit;
        EncodeHeader(h, commit);
        EncodeCommitPayload(chunks, payload.size(), commit);
        s = PublishOne(commit);
      }
    }
    // The final entry never left this node: it is never applied.
    if (s != NATS_OK) Resolve(id, {NatsError(s, "publish to the log"), {}, 0});
  }

  std::string DescribeJson() const {
    std::vector<PeerInfo> peers;
    LogInfo log;
    {
      std::lock_guard lock(view_mu_);
      peers = peers_;
      log = log_;
    }
    PeerInfo self = SelfInfo();
    {
      // The log's end as far as this node knows: the stream's state (read
      // every second, kept when NATS does not answer) or an entry received
      // since, whichever is newer.
      std::lock_guard lock(mu_);
      log.last_seq = std::max(log.last_seq, seen_last_seq_);
      if (log.first_seq == 0 && log.last_seq > 0) log.first_seq = 1;
    }
    bool found = false;
    for (auto& p : peers) {
      if (p.node_id == self.node_id) {
        p = self;
        found = true;
      } else if (NowMs() - p.at_ms > kPeerStaleMs) {
        p.state = "unreachable";
      }
    }
    if (!found) peers.push_back(self);
    std::sort(peers.begin(), peers.end(), [](const PeerInfo& a, const PeerInfo& b) { return a.node_id < b.node_id; });
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartObject();
    w.Key("nodeId");
    w.String(options_.node_id.c_str());
    w.Key("nodes");
    w.StartArray();
    for (const auto& p : peers) {
      w.StartObject();
      w.Key("nodeId");
      w.String(p.node_id.c_str());
      w.Key("url");
      w.String(p.url.c_str());
      w.Key("state");
      w.String(p.state.c_str());
      w.Key("appliedEtag");
      w.Uint64(p.applied_etag);
      w.Key("appliedSeq");
      w.Uint64(p.applied_seq);
      w.Key("lagMs");
      w.Int64(p.lag_ms);
      w.EndObject();
    }
    w.EndArray();
    w.Key("log");
    w.StartObject();
    w.Key("stream");
    w.String(options_.stream.c_str());
    w.Key("replicas");
    w.Int(log.replicas);
    w.Key("firstSeq");
    w.Uint64(log.first_seq);
    w.Key("lastSeq");
    w.Uint64(log.last_seq);
    w.EndObject();
    w.EndObject();
    return std::string(buf.GetString(), buf.GetSize());
  }

  Stats GetStats() const {
    std::lock_guard lock(mu_);
    Stats s = stats_;
    s.applied_seq = applied_seq_;
    s.lag_ms = LagMs();
    return s;
  }

 private:
  struct Pending {
    int64_t deadline_ms;
    Clock::time_point published;
    bool acked;
    Done done;
  };
  // A bulk's chunks until its commit entry arrives.
  struct Bulk {
    uint64_t first_seq = 0;
    int64_t deadline_ms = 0;
    std::map<uint32_t, std::string> chunks;
  };

  // Runs a thread's loop, restarting it after a fault until stopping.
  void RunGuarded(const std::function<void()>& loop) {
    for (;;) {
      try {
        loop();
        return;
      } catch (...) {
        RecordInternalError(FaultSite::kCluster, CurrentExceptionText());
      }
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_; })) return;
    }
  }

  // No message id: nothing is published twice (a failed publish is
  // answered, never retried), so JetStream's deduplication is not needed.
  natsStatus PublishOne(const std::string& entry) {
    natsMsg* msg = nullptr;
    natsStatus s = natsMsg_Create(&msg, options_.subject.c_str(), nullptr, entry.data(), int(entry.size()));
    if (s != NATS_OK) return s;
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = options_.timeout_ms;
    s = js_PublishMsgAsync(conn_.js, &msg, &po);
    if (msg) natsMsg_Destroy(msg);  // not taken by the library: it failed
    return s;
  }

  // JetStream's answer to an asynchronous publish (a NATS thread).
  // The message is ours to destroy (libnats' contract for this callback).
  static void OnAck(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
    struct Destroy {
      natsMsg* m;
      ~Destroy() { natsMsg_Destroy(m); }
    } destroy{msg};
    auto* self = static_cast<Impl*>(closure);
    const std::string_view data(natsMsg_GetData(msg), size_t(natsMsg_GetDataLength(msg)));
    if (pa) self->Acknowledged(pa->Sequence, EntryFingerprint(data));
    EntryHeader h;
    std::string_view payload;
    if (!DecodeHeader(data, h, payload).ok() || h.type == EntryType::kChunk)  // a request's last entry answers for it
      return;
    if (pa) {
      std::lock_guard lock(self->mu_);
      auto it = self->pending_.find(h.request_id);
      if (it == self->pending_.end()) return;
      it->second.acked = true;
      ++self->stats_.commits;
      self->stats_.commit_seconds_sum += std::chrono::duration<double>(Clock::now() - it->second.published).count();
    } else if (pae && pae->Err == NATS_NO_RESPONDERS) {
      // No stream took it: it is not in the log.
      self->Resolve(h.request_id, {Status::Unavailable("no JetStream server answered for the log stream (no quorum "
                                                       "or no stream): the write was not stored"),
                                   {}, 0});
    }
  }

  // ---- Confirmations: answers wait for them (ack_gate.h) ----

  // Both broadcasts carry one entry as 16 bytes (seq, fingerprint, host
  // order: every node runs this build on the same machines' kind).
  static void PutEntry(char* out, uint64_t seq, uint64_t fp) {
    std::memcpy(out, &seq, 8);
    std::memcpy(out + 8, &fp, 8);
  }
  static std::pair<uint64_t, uint64_t> GetEntry(const char* in) {
    uint64_t seq, fp;
    std::memcpy(&seq, in, 8);
    std::memcpy(&fp, in + 8, 8);
    return {seq, fp};
  }

  // This node's entry `seq` was acknowledged: the gate here, and every
  // peer's, learns it (outside the log).
  void Acknowledged(uint64_t seq, uint64_t fp) {
    {
      std::lock_guard lock(mu_);  // the log holds it: an applier reading directly reads it now
      seen_last_seq_ = std::max(seen_last_seq_, seq);
    }
    gate_.Confirm(seq, fp);
    char buf[16];
    PutEntry(buf, seq, fp);
    natsConnection_Publish(conn_.nc, ack_subject_.c_str(), buf, int(sizeof buf));  // lost: the leader is asked
  }

  // Acknowledgements broadcast by any node (a NATS thread).
  static void OnConfirmations(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    auto* self = static_cast<Impl*>(closure);
    const char* data = natsMsg_GetData(msg);
    if (natsMsg_GetDataLength(msg) == 16) {
      const auto [seq, fp] = GetEntry(data);
      self->gate_.Confirm(seq, fp);
    }
    natsMsg_Destroy(msg);
  }

  // This node applied entry `seq` with no acknowledgement: peers that did
  // too may count it confirmed (the entry, then this node's id).
  void VouchFor(uint64_t seq, uint64_t fp) {
    std::string buf(16, '\0');
    PutEntry(buf.data(), seq, fp);
    buf += options_.node_id;
    natsConnection_Publish(conn_.nc, vouch_subject_.c_str(), buf.data(), int(buf.size()));
  }

  static void OnVouch(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    auto* self = static_cast<Impl*>(closure);
    const std::string_view data(natsMsg_GetData(msg), size_t(natsMsg_GetDataLength(msg)));
    if (data.size() > 16 && data.substr(16) != self->options_.node_id) {
      const auto [seq, fp] = GetEntry(data.data());
      self->gate_.Vouch(seq, fp);
    }
    natsMsg_Destroy(msg);
  }

  // Answers request `id`, decided at entry `seq`, once every entry this
  // node applied up to it is confirmed; if the gate drops it (this node
  // diverged) the write's fate is unknown here.
  void AnswerAfter(uint64_t seq, uint64_t id, Applied a) {
    auto answer = std::make_shared<Applied>(std::move(a));
    gate_.Hold(seq, [this, id, answer](bool confirmed) {
      if (confirmed) return Resolve(id, std::move(*answer));
      Resolve(id, {Status::CommitUnknown("this node applied a log entry the log does not hold and stopped taking writes: "
                                         "the write is applied on every node or on none (read it back once the JetStream servers answer again, or retry it with If-Match or If-None-Match)"),
                   {}, 0});
    });
  }

  // Asks the stream's leader for entries no acknowledgement confirmed.
  void VerifierLoop() {
    std::unique_lock lock(mu_);
    bool busy = false;
    while (!stopping_) {
      if (cv_.wait_for(lock, std::chrono::milliseconds(busy ? 0 : 50), [&] { return stopping_; })) break;
      lock.unlock();
      busy = false;
      if (!diverged_.load()) {
        const std::vector<AckGate::Ask> asks = gate_.ToAsk(Clock::now(), 64);
        busy = asks.size() == 64;  // more may wait: no pause before the next round
        for (const AckGate::Ask& ask : asks) VouchFor(ask.seq, ask.fingerprint);
        for (const AckGate::Ask& ask : asks) {
          const std::optional<uint64_t> theirs = conn_.LeaderFingerprint(options_, ask.seq);
          if (!theirs) {  // no leader now: next round
            busy = false;
            break;
          }
          {
            std::lock_guard l(mu_);
            ++stats_.leader_asks;
          }
          if (*theirs != ask.fingerprint)
            logging::Warn("cluster.entry_mismatch", "the log's leader holds another entry where this node applied one; later answers wait",
                          {{"node", options_.node_id}, {"seq", ask.seq}});
          if (gate_.LeaderSays(ask.seq, *theirs))
            Diverge("it applied an entry the log does not hold", "entry " + std::to_string(ask.seq));
        }
      }
      lock.lock();
    }
  }

  void Resolve(uint64_t id, Applied a) {
    Done done;
    {
      std::lock_guard lock(mu_);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;
      done = std::move(it->second.done);
      pending_.erase(it);
    }
    done(std::move(a));
  }

  // Answers what its deadline passed by: commit_unknown (it may be in the
  // log; then every node applies it, or none does if it landed late). One
  // confirmed but not yet applied here waits one timeout more.
  void SweeperLoop() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(20));
      const int64_t now = NowMs();
      std::vector<Done> expired;
      for (auto it = pending_.begin(); it != pending_.end();) {
        const int64_t limit = it->second.deadline_ms + (it->second.acked ? options_.timeout_ms : 0);
        if (now <= limit) {
          ++it;
          continue;
        }
        expired.push_back(std::move(it->second.done));
        it = pending_.erase(it);
        ++stats_.timeouts;
      }
      if (expired.empty()) continue;
      lock.unlock();
      for (auto& d : expired)
        d({Status::CommitUnknown("no confirmation within " + std::to_string(options_.timeout_ms) +
                                 " ms: the write is applied on every node or on none (read it back once the JetStream servers answer again, or retry it with If-Match or If-None-Match)"),
           {}, 0});
      lock.lock();
    }
  }

  PeerInfo SelfInfo() const {
    PeerInfo p;
    p.node_id = options_.node_id;
    p.url = options_.advertise;
    {
      std::lock_guard lock(mu_);
      p.applied_seq = applied_seq_;
      p.lag_ms = LagMs();
      // Active once the store holds every entry the log had when this
      // process started (receiving the last one is not applying it: the
      // merger commits it a moment later), and while it receives all.
      p.state = diverged_ ? "diverged"
                : (connected_ && caught_up_ && start_last_seq_ && applied_seq_ >= *start_last_seq_) ? "active"
                                                                                                   : "catching_up";
    }
    // Read after applied_seq_: the store commits an entry before it is
    // marked applied, so this etag covers at least that entry.
    p.applied_etag = store_.LastEtag();
    return p;
  }

  // Guarded by mu_.
  // The age of the oldest entry not applied: the last applied entry's
  // timestamp stands for it (the next was stored after it); before this
  // process has applied one, its start does (a lower bound, never the
  // age of the epoch).
  int64_t LagMs() const {
    if (applied_seq_ >= seen_last_seq_) return 0;
    const int64_t since = last_applied_ts_ms_ != 0 ? last_applied_ts_ms_ : watch_start_ms_;
    return std::max<int64_t>(0, NowMs() - since);
  }

  // Heartbeats into the bucket every second, and watches it (one
  // long-lived watcher: listing the keys would create a consumer each time).
  void MembershipLoop() {
    kvWatcher* watcher = nullptr;
    // This node's own heartbeat comes back through the watcher every
    // second. A watcher whose consumer was lost (its server stopped, the
    // bucket's stream changed leader) times out quietly instead of failing:
    // when the echo has been missing for a few heartbeats although the puts
    // succeed, it is replaced.
    auto echo_at = Clock::now();
    bool heartbeat_failing = false;
    std::map<std::string, PeerInfo> peers;
    std::unique_lock lock(mu_);
    while (!stopping_) {
      lock.unlock();
      const PeerInfo self = SelfInfo();
      const Checkpoint ck = history_.Latest();
      char value[1024];
      std::snprintf(value, sizeof value,
                    "{\"url\":\"%s\",\"state\":\"%s\",\"appliedEtag\":%llu,\"appliedSeq\":%llu,\"lagMs\":%lld,"
                    "\"atMs\":%lld,\"ckSeq\":%llu,\"ckHistory\":%llu,\"ckVerified\":%s}",
                    self.url.c_str(), self.state.c_str(), (unsigned long long)self.applied_etag,
                    (unsigned long long)self.applied_seq, (long long)self.lag_ms, (long long)NowMs(),
                    (unsigned long long)ck.seq, (unsigned long long)ck.history, ck.verified ? "true" : "false");
      uint64_t rev = 0;
      const natsStatus put = kvStore_PutString(&rev, conn_.kv, options_.node_id.c_str(), value);
      if (put != NATS_OK) echo_at = Clock::now();  // no echo to expect
      if ((put != NATS_OK) != heartbeat_failing) {
        heartbeat_failing = put != NATS_OK;
        if (heartbeat_failing)
          logging::Warn("cluster.heartbeat_failed", "heartbeat into the node bucket failed; other nodes will see this one as unreachable",
                        {{"node", options_.node_id}, {"error", natsStatus_GetText(put)}});
        else
          logging::Info("cluster.heartbeat_ok", "heartbeat into the node bucket succeeds again", {{"node", options_.node_id}});
      }
      if (watcher && Clock::now() - echo_at > std::chrono::milliseconds(3 * kHeartbeatMs)) {
        logging::Warn("cluster.watcher_replaced", "the node bucket's watcher has not echoed this node's heartbeat for 3 s; replacing it",
                      {{"node", options_.node_id}});
        kvWatcher_Destroy(watcher);
        watcher = nullptr;
      }
      uint64_t applied_before = 0;  // read before the log's state, which is then at least as new
      {
        std::lock_guard l(mu_);
        applied_before = applied_seq_;
      }
      auto log = conn_.ReadLog(options_);
      bool past_end = false;
      if (log.ok()) {
        std::lock_guard l(mu_);
        seen_last_seq_ = std::max(seen_last_seq_, log->last_seq);
        if (log->from_leader && !start_last_seq_) start_last_seq_ = log->last_seq;
        // Past the log's end in every leader's answer for 5 s (not a stream
        // between leaders, nor one former leader answering before it hears
        // of the next).
        if (log->from_leader) past_end_ = applied_before > log->last_seq ? past_end_ + 1 : 0;
        past_end = past_end_ >= 5;
      }
      if (past_end)
        Diverge("it applied log entries the log no longer holds",
                "applied_seq " + std::to_string(applied_before) + ", the log's last " + std::to_string(log->last_seq));
      if (log.ok() && log->from_leader && !diverged_.load()) CheckAgainstLeader(*log);  // once diverged, nothing to learn
      if (log.ok() && log->from_leader && !diverged_.load()) CheckHistory(peers);
      if (diverged_.load()) ReinstallWhenPossible(peers);
      // Until the next heartbeat: the bucket's changes.
      const auto next = Clock::now() + std::chrono::milliseconds(kHeartbeatMs);
      if (!watcher) {
        if (kvStore_WatchAll(&watcher, conn_.kv, nullptr) != NATS_OK) watcher = nullptr;
        echo_at = Clock::now();
      }
      while (watcher) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
        if (left <= 0) break;
        kvEntry* e = nullptr;
        natsStatus st = kvWatcher_Next(&e, watcher, left);
        if (st == NATS_TIMEOUT) break;
        if (st != NATS_OK) {  // a broken watcher: a new one next time
          kvWatcher_Destroy(watcher);
          watcher = nullptr;
          break;
        }
        if (!e) continue;  // the initial values are all in
        if (kvEntry_Key(e) == options_.node_id) echo_at = Clock::now();
        if (auto p = Connection::ParsePeer(e)) peers[p->node_id] = std::move(*p);
        else if (kvEntry_Operation(e) != kvOp_Put) peers.erase(kvEntry_Key(e));
        kvEntry_Destroy(e);
      }
      {
        std::lock_guard view(view_mu_);
        peers_.clear();
        for (const auto& [id, p] : peers) peers_.push_back(p);  // a silent node ages into "unreachable"
        if (log.ok()) log_ = *log;
      }
      lock.lock();
      const auto left = next - Clock::now();
      if (left > Clock::duration::zero()) cv_.wait_for(lock, left, [&] { return stopping_; });
    }
    lock.unlock();
    if (watcher) kvWatcher_Destroy(watcher);
  }

  // ---- Divergence: this node's store no longer follows the log ----

  // Stops taking writes and leaves a mark in the data directory, so that
  // even a restart installs a peer's snapshot (docs/cluster.md).
  void Diverge(const std::string& why, const std::string& detail) {
    if (diverged_.exchange(true)) return;
    gate_.DropHeld();
    logging::Error("cluster.diverged", "this node diverged from the log (" + why + "); it refuses writes until it has installed a peer's snapshot",
                   {{"node", options_.node_id}, {"detail", detail}});
    if (options_.data_dir.empty()) return;
    if (Status s = MarkDiverged(options_.data_dir, why + ": " + detail); !s.ok())
      logging::Error("cluster.diverged", "cannot leave the divergence mark in the data directory: " + s.message(),
                     {{"node", options_.node_id}});
  }

  // Compares the last entry this node applied with the stream leader's copy
  // of it. A mismatch five times in a row (a leader deposed while stopped
  // can answer for a moment with its own, unreplicated copy) means this
  // node applied entries the log does not hold: a replica that served its
  // consumer diverged (nats-server 2.9 after a stopped leader resumes), or
  // a data directory from another cluster.
  void CheckAgainstLeader(const LogInfo& log) {
    uint64_t seq, fp;
    {
      std::lock_guard lock(mu_);
      seq = applied_seq_;
      fp = applied_fp_;
    }
    if (fp == 0 || seq < std::max<uint64_t>(log.first_seq, 1) || seq > log.last_seq) return;
    const std::optional<uint64_t> theirs = conn_.LeaderFingerprint(options_, seq);
    if (!theirs) return;
    if (*theirs == fp) {
      mismatches_ = 0;
      return;
    }
    logging::Warn("cluster.entry_mismatch", "the log's leader holds another entry where this node applied one",
                  {{"node", options_.node_id}, {"seq", seq}, {"in_a_row", int64_t(mismatches_ + 1)}});
    if (++mismatches_ >= 5)
      Diverge("the log's leader holds other entries than the ones it applied", "entry " + std::to_string(seq));
  }

  // Compares this node's history with its peers' checkpoints and, where
  // they disagree, its entries with the leader's copies (history_check.h).
  // At most half a second of asking per heartbeat; the rest waits for the
  // next one.
  void CheckHistory(const std::map<std::string, PeerInfo>& peers) {
    std::vector<PeerCheckpoint> checkpoints;
    for (const auto& [id, p] : peers)
      if (id != options_.node_id && p.state != "diverged" && NowMs() - p.at_ms <= kPeerStaleMs)
        checkpoints.push_back({id, p.checkpoint});
    const HistoryCheck::Plan plan = history_.Compare(checkpoints);
    if (plan.through == 0) return;
    const auto until = Clock::now() + std::chrono::milliseconds(500);
    uint64_t good = 0;
    bool complete = true;
    for (const auto& [seq, fp] : plan.entries) {
      const std::optional<uint64_t> theirs = conn_.LeaderFingerprint(options_, seq);
      if (!theirs) {  // no leader now, or the entry is gone from the log
        complete = false;
        break;
      }
      if (*theirs != fp) {
        if (good) history_.Verified(plan, good);
        logging::Warn("cluster.history_mismatch", "the log's leader holds another entry where this node applied one (its history differs from a peer's)",
                      {{"node", options_.node_id}, {"seq", seq}});
        if (history_.Mismatch(seq))
          Diverge("it applied an entry the log does not hold", "entry " + std::to_string(seq));
        return;
      }
      good = seq;
      if (Clock::now() > until) {
        complete = false;
        break;
      }
    }
    if (good) history_.Verified(plan, good);
    if (!complete || plan.covered || plan.confirming) return;
    // Every entry kept here matches, yet the histories differ: the
    // difference is older than this process.
    if (plan.outvoted) {
      Diverge("two peers agree on a history that differs from this node's before the entries it can check",
              "checkpoint " + std::to_string(plan.through));
    } else if (!warned_unverifiable_) {
      warned_unverifiable_ = true;
      logging::Warn("cluster.history_unverifiable", "a peer's history differs from this node's before the entries it can check",
                    {{"node", options_.node_id}, {"checkpoint", plan.through}});
    }
  }

  // Once diverged, the node restarts itself through the bootstrap (the
  // server's on_diverged) as soon as an active peer can give it a snapshot.
  void ReinstallWhenPossible(const std::map<std::string, PeerInfo>& peers) {
    if (reinstall_requested_ || !options_.on_diverged) return;
    for (const auto& [id, p] : peers) {
      if (!CanGiveSnapshot(p, options_.node_id)) continue;
      reinstall_requested_ = true;
      logging::Warn("cluster.reinstalling", "restarting to install a snapshot from an active peer",
                    {{"node", options_.node_id}, {"peer", id}});
      options_.on_diverged();
      return;
    }
  }

  // ---- The applier ----
  //
  // The applier reads the log through an ordered consumer. Making one is a
  // request to JetStream's metadata leader, which can be missing while the
  // log's stream answers: being elected (in CI once, with one of three
  // servers SIGSTOPped, a node asked for a consumer and got none for 41 s
  // while the stream took its writes), or the node's NATS user may not
  // create consumers. So the
  // subscriber thread makes consumers, retrying, and while none is to be
  // had the applier reads the entries the log is known to hold one by one
  // from the stream's leader (ReadDirect): writes are still applied, and
  // answered.

  static void DestroySubscription(natsSubscription* sub) {
    natsSubscription_Unsubscribe(sub);
    natsSubscription_Destroy(sub);
  }

  // A consumer of the log from entry `from` on (nullptr if JetStream does
  // not make one within the API's wait).
  natsSubscription* MakeSubscription(uint64_t from) {
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Ordered = true;
    if (from > 1) {
      so.Config.DeliverPolicy = js_DeliverByStartSequence;
      so.Config.OptStartSeq = from;
    } else {
      so.Config.DeliverPolicy = js_DeliverAll;
    }
    so.Stream = options_.stream.c_str();
    so.Config.Heartbeat = int64_t{1000} * 1000000;  // 1 s: a lost consumer is noticed sooner
    jsErrCode jerr = jsErrCode(0);
    natsSubscription* sub = nullptr;
    if (js_SubscribeSync(&sub, conn_.js, options_.subject.c_str(), nullptr, &so, &jerr) != NATS_OK) return nullptr;
    natsSubscription_SetPendingLimits(sub, -1, 256 << 20);
    return sub;
  }

  // The subscriber thread: makes the consumer the applier last asked for.
  void SubscriberLoop() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      if (!sub_wanted_ || sub_ready_) {
        sub_cv_.wait(lock);
        continue;
      }
      const uint64_t gen = sub_gen_, from = sub_from_;
      lock.unlock();
      natsSubscription* sub = MakeSubscription(from);
      lock.lock();
      if (sub && sub_wanted_ && gen == sub_gen_ && !stopping_) {
        sub_ready_ = sub;
        sub_cv_.notify_all();
        continue;
      }
      if (sub) {  // asked for another meanwhile
        lock.unlock();
        DestroySubscription(sub);
        lock.lock();
      } else {
        sub_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_ || gen != sub_gen_; });
      }
    }
  }

  // Applier: reads the log from entry `from` on, through a new consumer
  // (directly from the stream's leader until the subscriber makes it).
  void Resubscribe(uint64_t from) {
    if (sub_) DestroySubscription(std::exchange(sub_, nullptr));
    natsSubscription* stale;
    {
      std::lock_guard lock(mu_);
      next_seq_ = from;
      last_msg_at_ = Clock::now();
      sub_wanted_ = true;
      ++sub_gen_;
      sub_from_ = from;
      stale = std::exchange(sub_ready_, nullptr);
    }
    sub_cv_.notify_all();
    if (stale) DestroySubscription(stale);
    wanted_at_ = Clock::now();
  }

  // Applier: no consumer and none wanted (a diverged node reads nothing).
  void Unsubscribe() {
    if (sub_) DestroySubscription(std::exchange(sub_, nullptr));
    natsSubscription* stale;
    {
      std::lock_guard lock(mu_);
      sub_wanted_ = false;
      ++sub_gen_;
      stale = std::exchange(sub_ready_, nullptr);
    }
    if (stale) DestroySubscription(stale);
  }

  // Applier: takes the consumer the subscriber made, if it has. It starts
  // where the applier was when it asked: entries read directly since then
  // come again and are dropped.
  bool TakeSubscription() {
    std::lock_guard lock(mu_);
    if (!sub_ready_) return false;
    sub_ = std::exchange(sub_ready_, nullptr);
    sub_wanted_ = false;
    quiet_below_ = next_seq_;
    last_msg_at_ = Clock::now();
    return true;
  }

  // Applier, with no consumer: reads on, one request per entry, what the
  // log is known to hold (seen_last_seq_: the log's state read each
  // heartbeat, and this node's acknowledged publishes). JetStream's
  // non-direct get is answered by the stream's leader only, which needs
  // no metadata leader. At most 64 entries, then the loop looks for a
  // consumer again.
  void ReadDirect() {
    if (!reading_direct_) {
      reading_direct_ = true;
      logging::Warn("cluster.reading_direct", "no consumer of the log for 0.5 s: reading its entries one by one from the stream's leader until one is made",
                    {{"node", options_.node_id}});
    }
    for (int n = 0; n < 64 && !rewind_.load() && !diverged_.load(); ++n) {
      uint64_t next;
      bool idle;
      {
        std::lock_guard lock(mu_);
        next = next_seq_;
        idle = caught_up_ = next > seen_last_seq_;
        if (idle) history_.MarkIdle();
      }
      if (idle) {
        SetConnected(natsConnection_Status(conn_.nc) == NATS_CONN_STATUS_CONNECTED);
        std::unique_lock lock(mu_);
        sub_cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stopping_ || sub_ready_; });
        return;
      }
      jsOptions jo;
      jsOptions_Init(&jo);
      jo.Wait = 1000;
      natsMsg* msg = nullptr;
      jsErrCode jerr = jsErrCode(0);
      if (js_GetMsg(&msg, conn_.js, options_.stream.c_str(), next, &jo, &jerr) != NATS_OK || !msg ||
          natsMsg_GetSequence(msg) != next) {
        // No leader, or the entry is gone from the log (a consumer, once
        // made, tells which).
        if (msg) natsMsg_Destroy(msg);
        SetConnected(false);
        std::unique_lock lock(mu_);
        sub_cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stopping_ || sub_ready_; });
        return;
      }
      {
        std::lock_guard lock(mu_);
        next_seq_ = next + 1;
        caught_up_ = next_seq_ > seen_last_seq_;
        last_msg_at_ = Clock::now();
        connected_ = true;
      }
      Apply(next, natsMsg_GetTime(msg) / 1000000,
            std::string_view(natsMsg_GetData(msg), size_t(natsMsg_GetDataLength(msg))));
      natsMsg_Destroy(msg);
    }
  }

  // Reads the log again from the store's position: after a local failure
  // (the store's fence is up) or a broken subscription.
  void Rewind() {
    {
      std::unique_lock lock(mu_);
      drained_cv_.wait(lock, [&] { return in_flight_ == 0; });
    }
    const storage::LogPosition pos = store_.GetLogPosition();
    bulks_.clear();
    {
      std::lock_guard lock(mu_);
      applied_seq_ = pos.applied;
      applied_fp_ = pos.applied_hash;
    }
    history_.Reset(pos.applied, pos.history);
    gate_.Reset(pos.applied);
    replay_below_ = pos.applied;
    store_.ResetLogFence();
    rewind_ = false;
    Resubscribe(std::max<uint64_t>(pos.resume, 1));
  }

  void ApplierLoop() {
    if (!applier_started_) {  // not when RunGuarded restarts the loop: it reads on
      applier_started_ = true;
      const storage::LogPosition pos = store_.GetLogPosition();
      replay_below_ = pos.applied;
      Resubscribe(std::max<uint64_t>(pos.resume, 1));
    }
    int backoff_ms = 50;
    while (true) {
      {
        std::lock_guard lock(mu_);
        if (stopping_) break;
      }
      if (diverged_.load()) {
        // Entries applied on a store that disagrees with the log would be
        // wrong too: nothing is read until a snapshot replaces the store.
        Unsubscribe();
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_; });
        continue;
      }
      if (rewind_.load()) {
        Rewind();
        std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
        backoff_ms = std::min(backoff_ms * 2, 2000);
      }
      if (!sub_ && !TakeSubscription()) {
        bool wanted;
        uint64_t next;
        {
          std::lock_guard lock(mu_);
          wanted = sub_wanted_;
          next = next_seq_;
        }
        if (!wanted) Resubscribe(next);  // after a divergence
        if (Clock::now() - wanted_at_ >= std::chrono::milliseconds(500)) {
          ReadDirect();
        } else {
          std::unique_lock lock(mu_);
          sub_cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return stopping_ || sub_ready_; });
        }
        continue;
      }
      natsMsg* msg = nullptr;
      natsStatus s = natsSubscription_NextMsg(&msg, sub_, 100);
      if (s == NATS_TIMEOUT) {
        SetConnected(natsConnection_Status(conn_.nc) == NATS_CONN_STATUS_CONNECTED);
        bool stalled;
        uint64_t missing, next;
        {
          std::lock_guard lock(mu_);
          next = next_seq_;
          missing = seen_last_seq_ + 1 - std::min(next_seq_, seen_last_seq_ + 1);
          caught_up_ = next_seq_ > seen_last_seq_;
          if (caught_up_) history_.MarkIdle();
          // The log holds entries this node has not received for a while:
          // the server hosting its consumer is gone or stuck. Read on from
          // the next entry through a new consumer.
          stalled = !caught_up_ && Clock::now() - last_msg_at_ > std::chrono::seconds(2);
        }
        if (stalled) {
          logging::Warn("cluster.consumer_replaced", "no log entry received for 2 s while the log holds more; reading on through a new consumer",
                        {{"node", options_.node_id}, {"missing", uint64_t(missing)}});
          Resubscribe(next);
        }
        continue;
      }
      if (s != NATS_OK) {
        // The subscription broke: read on from the next entry.
        uint64_t next;
        {
          std::lock_guard lock(mu_);
          next = next_seq_;
        }
        Resubscribe(next);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, msg) == NATS_OK) {
        const uint64_t seq = meta->Sequence.Stream;
        const int64_t ts_ms = meta->Timestamp / 1000000;
        uint64_t expected;
        {
          std::lock_guard lock(mu_);
          expected = next_seq_;
        }
        if (reading_direct_) {
          reading_direct_ = false;
          logging::Info("cluster.reading_consumer", "a consumer of the log is made: reading through it again",
                        {{"node", options_.node_id}, {"seq", seq}});
        }
        // Exactly once, in order, whatever the consumer delivers: an entry
        // already received (a consumer that restarted behind, or one that
        // starts where this node asked for it before reading on directly)
        // is dropped - applied twice, a write would take a second etag on
        // this node only - and a gap is read again through a new consumer.
        if (seq < expected) {
          if (seq >= quiet_below_)
            logging::Warn("cluster.duplicate_dropped", "a log entry delivered again was dropped",
                          {{"node", options_.node_id}, {"seq", seq}, {"expected", expected}});
          jsMsgMetaData_Destroy(meta);
          natsMsg_Destroy(msg);
          continue;
        }
        if (seq > expected) {
          if (gap_at_ != expected) {
            gap_at_ = expected;
            logging::Warn("cluster.gap", "a log entry was skipped by the consumer; reading on through a new one",
                          {{"node", options_.node_id}, {"seq", seq}, {"expected", expected}});
            jsMsgMetaData_Destroy(meta);
            natsMsg_Destroy(msg);
            Resubscribe(expected);
            continue;
          }
          // A new consumer starts past it too: the log no longer holds it.
          Diverge("log entries this node never applied are gone from the log",
                  "expected " + std::to_string(expected) + ", received " + std::to_string(seq));
        }
        gap_at_ = 0;
        {
          std::lock_guard lock(mu_);
          seen_last_seq_ = std::max(seen_last_seq_, seq + meta->NumPending);
          caught_up_ = meta->NumPending == 0;
          next_seq_ = seq + 1;
          last_msg_at_ = Clock::now();
          connected_ = true;
        }
        Apply(seq, ts_ms, std::string_view(natsMsg_GetData(msg), size_t(natsMsg_GetDataLength(msg))));
        if (!rewind_.load()) backoff_ms = 50;
        jsMsgMetaData_Destroy(meta);
      }
      natsMsg_Destroy(msg);
    }
    Unsubscribe();
  }

  void SetConnected(bool c) {
    std::lock_guard lock(mu_);
    connected_ = c;
  }

  // Where a restart must read the log from once `seq` is applied: before
  // the first chunk of a bulk still waiting for its commit.
  uint64_t ResumeAfter(uint64_t seq) const {
    uint64_t r = seq + 1;
    for (const auto& [key, b] : bulks_) r = std::min(r, b.first_seq);
    return r;
  }

  void MarkApplied(uint64_t seq, int64_t ts_ms, uint64_t fp) {
    std::lock_guard lock(mu_);
    if (seq >= applied_seq_) {
      applied_seq_ = seq;
      applied_fp_ = fp;
    }
    last_applied_ts_ms_ = ts_ms;
  }

  // An entry that writes nothing (a bulk's chunk, or one every node skips)
  // goes through the merger like a write: it is marked applied in log
  // order, once the writes before it are committed (a node is not active
  // with those still queued), and the store records its position.
  void ApplyNothing(uint64_t seq, int64_t ts_ms, uint64_t fp, uint64_t history) {
    if (seq > replay_below_) SubmitToStore(storage::WriteRequest{}, seq, ts_ms, fp, history, std::nullopt);
  }

  void Apply(uint64_t seq, int64_t ts_ms, std::string_view data) {
    const uint64_t fp = EntryFingerprint(data);
    // Every entry applied for the first time, whatever it holds.
    const uint64_t history = seq > replay_below_ ? history_.Record(seq, fp) : 0;
    if (seq > replay_below_) gate_.Applied(seq, fp, ts_ms >= watch_start_ms_, Clock::now());
    EntryHeader h;
    std::string_view payload;
    if (Status s = DecodeHeader(data, h, payload); !s.ok()) {
      // Every node reads the same bytes and skips them alike.
      logging::Warn("cluster.entry_skipped", "log entry skipped: " + s.message(), {{"node", options_.node_id}, {"seq", seq}});
      return ApplyNothing(seq, ts_ms, fp, history);
    }
    const bool mine = h.origin == options_.node_id;
    const std::string bulk_key = h.origin + "/" + std::to_string(h.request_id);
    // A bulk whose deadline passed can no longer commit.
    for (auto it = bulks_.begin(); it != bulks_.end();)
      it = it->second.deadline_ms < ts_ms ? bulks_.erase(it) : std::next(it);

    if (h.type == EntryType::kChunk) {
      uint32_t index;
      std::string_view bytes;
      if (!DecodeChunkPayload(payload, index, bytes).ok()) return ApplyNothing(seq, ts_ms, fp, history);  // skipped alike
      Bulk& b = bulks_[bulk_key];
      if (b.chunks.empty()) b.first_seq = seq;
      b.deadline_ms = h.deadline_ms;
      b.chunks[index].assign(bytes);
      return ApplyNothing(seq, ts_ms, fp, history);
    }
    if (seq <= replay_below_) {  // applied before a restart: only its chunks mattered
      if (h.type == EntryType::kCommit) bulks_.erase(bulk_key);
      return;
    }
    if (ts_ms > h.deadline_ms) {
      // Stored after its deadline: every node skips it, and the node that
      // received it has answered (or answers now) that it is not applied.
      bulks_.erase(bulk_key);
      {
        std::lock_guard lock(mu_);
        ++stats_.skipped_late;
      }
      if (mine)
        AnswerAfter(seq, h.request_id,
                    {Status::Unavailable("the entry reached the log after its deadline: it is not applied"), {}, 0});
      return ApplyNothing(seq, ts_ms, fp, history);
    }
    storage::WriteRequest request;
    Status decoded;
    switch (h.type) {
      case EntryType::kWrite: decoded = DecodeWritePayload(payload, request); break;
      case EntryType::kCommit: {
        uint32_t count;
        uint64_t bytes;
        decoded = DecodeCommitPayload(payload, count, bytes);
        auto it = bulks_.find(bulk_key);
        std::string whole;
        if (decoded.ok()) {
          if (it == bulks_.end() || it->second.chunks.size() != count) {
            decoded = Status::Corruption("a bulk's chunks are missing from the log");
          } else {
            whole.reserve(bytes);
            for (auto& [i, c] : it->second.chunks) whole.append(c);
            if (whole.size() != bytes) decoded = Status::Corruption("a bulk's chunks do not add up");
          }
        }
        if (it != bulks_.end()) bulks_.erase(it);
        if (decoded.ok()) decoded = DecodeWritePayload(whole, request);
        break;
      }
      case EntryType::kIndexPut:
      case EntryType::kIndexDelete: return ApplyIndex(seq, ts_ms, fp, history, h, payload, mine);
      default: decoded = Status::Corruption("unexpected entry type");
    }
    if (!decoded.ok()) {
      logging::Warn("cluster.entry_skipped", "log entry skipped: " + decoded.message(), {{"node", options_.node_id}, {"seq", seq}});
      if (mine) AnswerAfter(seq, h.request_id, {Status::Internal(decoded.message()), {}, 0});
      return ApplyNothing(seq, ts_ms, fp, history);
    }
    SubmitToStore(std::move(request), seq, ts_ms, fp, history,
                  mine ? std::optional<uint64_t>(h.request_id) : std::nullopt);
  }

  void SubmitToStore(storage::WriteRequest request, uint64_t seq, int64_t ts_ms, uint64_t fp, uint64_t history,
                     std::optional<uint64_t> mine) {
    request.log = storage::LogPosition{seq, ResumeAfter(seq), fp, history};
    {
      std::unique_lock lock(mu_);
      // Bounded: the merger takes what is queued in one transaction.
      drained_cv_.wait(lock, [&] { return in_flight_ < 20000 || stopping_; });
      ++in_flight_;
    }
    store_.Submit(std::move(request), [this, seq, ts_ms, fp, mine](storage::WriteResult r) {
      if (IsLocalFailure(r.status.code())) {
        // Not this entry's own outcome: read the log again from the
        // store's position (the request stays parked until then).
        rewind_ = true;
        logging::Error("cluster.apply_failed", "applying a log entry failed on this node; retrying",
                       {{"node", options_.node_id}, {"seq", seq}, {"error", r.status.message()}});
      } else {
        MarkApplied(seq, ts_ms, fp);
        if (mine) AnswerAfter(seq, *mine, {Status::Ok(), std::move(r), 0});
      }
      std::lock_guard lock(mu_);
      --in_flight_;
      drained_cv_.notify_all();  // only the waits on in_flight_: the loops sleeping on cv_ are not woken per entry
    });
  }

  void ApplyIndex(uint64_t seq, int64_t ts_ms, uint64_t fp, uint64_t history, const EntryHeader& h,
                  std::string_view payload, bool mine) {
    std::string name, definition;
    Applied a;
    if (Status s = DecodeIndexPayload(payload, h.type, name, definition); !s.ok()) {
      a.status = s;
    } else if (!engine_) {
      a.status = Status::NotFound("this node runs no index engine");
    } else if (h.type == EntryType::kIndexPut) {
      auto outcome = engine_->PutIndex(name, definition);
      if (outcome.ok()) a.index_outcome = int(*outcome);
      else a.status = outcome.status();
    } else {
      a.status = engine_->DeleteIndex(name);
    }
    if (mine) AnswerAfter(seq, h.request_id, std::move(a));
    // Recorded, so that a restart does not define it again.
    SubmitToStore(storage::WriteRequest{}, seq, ts_ms, fp, history, std::nullopt);
  }

  const ClusterOptions options_;
  const std::string ack_subject_ = "_corvid.acks." + options_.stream;  // ack_gate.h: outside the log
  const std::string vouch_subject_ = "_corvid.vouches." + options_.stream;
  storage::DocumentStore& store_;
  indexing::IndexEngine* const engine_;
  Connection conn_;

  mutable std::mutex mu_;
  std::condition_variable cv_;          // stopping_, and the loops' sleeps
  std::condition_variable drained_cv_;  // in_flight_ went down
  bool stopping_ = false;                  // guarded by mu_
  uint64_t next_request_ = 0;              // guarded by mu_
  std::map<uint64_t, Pending> pending_;    // guarded by mu_
  HistoryCheck history_;  // its own lock: the applier records, membership compares
  AckGate gate_;          // its own lock: answers wait for confirmed entries
  natsSubscription *acks_sub_ = nullptr, *vouch_sub_ = nullptr;
  int64_t watch_start_ms_ = 0;  // entries the log stored before it are not gated
  bool warned_unverifiable_ = false;  // membership thread only
  uint64_t applied_seq_ = 0, applied_fp_ = 0;  // guarded by mu_: the last entry applied, its fingerprint
  uint64_t seen_last_seq_ = 0;             // guarded by mu_
  std::optional<uint64_t> start_last_seq_;  // guarded by mu_: the log's end as Start (or the first leader's answer) found it
  int64_t last_applied_ts_ms_ = 0;         // guarded by mu_
  uint64_t in_flight_ = 0;                 // guarded by mu_: entries submitted, not answered
  bool connected_ = false, caught_up_ = false;  // guarded by mu_
  int past_end_ = 0;                       // guarded by mu_: refreshes that found applied > the log's last
  int mismatches_ = 0;                     // membership thread: leader checks that disagreed in a row
  bool reinstall_requested_ = false;       // membership thread
  uint64_t next_seq_ = 1;                  // guarded by mu_: the next entry the applier expects
  uint64_t gap_at_ = 0;                    // applier only: the entry whose absence was retried once
  Clock::time_point last_msg_at_{};        // guarded by mu_: when the applier last received an entry
  Stats stats_;                            // guarded by mu_
  std::atomic<bool> diverged_{false};
  std::atomic<bool> rewind_{false};

  // The subscriber's consumer for the applier (SubscriberLoop).
  std::condition_variable sub_cv_;           // a consumer is wanted or made, or stopping_
  bool sub_wanted_ = false;                  // guarded by mu_
  uint64_t sub_gen_ = 0, sub_from_ = 1;      // guarded by mu_: the request, and where it reads from
  natsSubscription* sub_ready_ = nullptr;    // guarded by mu_: made for the request, not taken yet

  // Applier thread only.
  natsSubscription* sub_ = nullptr;
  bool applier_started_ = false, reading_direct_ = false;
  Clock::time_point wanted_at_{};  // when the applier last asked for a consumer
  uint64_t quiet_below_ = 0;       // entries below it delivered again are expected (TakeSubscription)
  uint64_t replay_below_ = 0;
  std::map<std::string, Bulk> bulks_;

  mutable std::mutex view_mu_;
  std::vector<PeerInfo> peers_;  // guarded by view_mu_
  LogInfo log_;                  // guarded by view_mu_

  std::thread applier_, subscriber_, sweeper_, membership_, verifier_;
};

ClusterNode::ClusterNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClusterNode::~ClusterNode() = default;

Result<std::unique_ptr<ClusterNode>> ClusterNode::Start(ClusterOptions options, storage::DocumentStore& store,
                                                        indexing::IndexEngine* engine) {
  if (Status s = ValidateOptions(options); !s.ok()) return s;
  auto impl = std::make_unique<Impl>(std::move(options), store, engine);
  if (Status s = impl->Start(); !s.ok()) return s;
  return std::unique_ptr<ClusterNode>(new ClusterNode(std::move(impl)));
}

void ClusterNode::Submit(storage::WriteRequest request, storage::DocumentStore::WriteCallback done) {
  impl_->Publish(
      EntryType::kWrite, [&](std::string& out) { EncodeWritePayload(request, out); },
      [done = std::move(done)](Impl::Applied a) {
        if (!a.status.ok()) return done(storage::WriteResult{std::move(a.status)});
        done(std::move(a.write));
      });
}

void ClusterNode::SubmitIndexPut(std::string name, std::string definition,
                                 std::function<void(Result<indexing::PutOutcome>)> done) {
  impl_->Publish(
      EntryType::kIndexPut, [&](std::string& out) { EncodeIndexPayload(name, definition, out); },
      [done = std::move(done)](Impl::Applied a) {
        if (!a.status.ok()) return done(std::move(a.status));
        done(indexing::PutOutcome(a.index_outcome));
      });
}

void ClusterNode::SubmitIndexDelete(std::string name, std::function<void(Status)> done) {
  impl_->Publish(
      EntryType::kIndexDelete, [&](std::string& out) { EncodeIndexPayload(name, {}, out); },
      [done = std::move(done)](Impl::Applied a) { done(a.status); });
}

std::string ClusterNode::DescribeJson() const { return impl_->DescribeJson(); }
ClusterNode::Stats ClusterNode::GetStats() const { return impl_->GetStats(); }

}  // namespace corvid::cluster
