// The environment of the router and bulk targets: a real DocumentStore and
// IndexEngine in a scratch directory (created once per process, rebuilt
// every few thousand inputs so that it stays small), a search and a
// map/reduce index over the collection "c", and two Routers over them (no
// API key; an API key and a read key with small size limits). Requests
// run as the transport runs them (http_server.cc): the body limit
// (BodyLimit), the early authentication (Admit), then Handle.
//
// Timers: delayed work is dropped (a long poll is never timed out); work
// due now (a parked request woken by a commit) runs on the fuzzing thread.
// A request not answered soon after Handle returns is taken as parked:
// CompleteWaiters answers it, as a shutdown would, and that router is then
// replaced (CompleteWaiters also stops its backups for good).
//
// Invariants checked for every request: the reply is called exactly once
// (within 30 s); no status 500; a JSON answer is one valid UTF-8 JSON
// value; no exception escapes Handle; no internal error is recorded
// anywhere (common/faults.h: the merger, index workers, query helpers); a
// backup streams to its end and verifies (VerifyBackup); after a write the
// indexes catch up, so a fault the indexing of a document causes is
// blamed on the input that wrote it. FUZZ_VERBOSE=1 prints every answer.
#pragma once

#include <rapidjson/document.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/exact_json.h"
#include "common/faults.h"
#include "common/utf8.h"
#include "indexing/index_engine.h"
#include "server/body_stream.h"
#include "server/router.h"
#include "storage/backup_format.h"
#include "storage/document_store.h"
#include "tests/fuzz/fuzz_util.h"

namespace corvid::fuzz {

inline constexpr const char* kSearchDefinition =
    R"json({"type":"search","collection":"c","fields":{"title":{"analyzer":"standard","boost":2.0},)json"
    R"json("body":{"analyzer":"english"},"tags":{"analyzer":"keyword","facet":true},"score":{"type":"number"},)json"
    R"json("createdAt":{"type":"date"},"author.name":{"analyzer":"folding"}},"store":["title","score"]})json";
inline constexpr const char* kMapReduceDefinition =
    R"json({"type":"mapreduce","collection":"c","map":{"month":"substr(createdAt, 0, 7)","score":"score",)json"
    R"json("tag":"unwind(tags)"},"groupBy":["month","tag"],"reduce":{"total":"sum(score)","n":"count()",)json"
    R"json("best":"max(score)","worst":"min(score)","mean":"avg(score)"}})json";
inline constexpr const char* kSeedDocuments[][2] = {
    {"1", R"json({"title":"The Quick Brown Fox","body":"jumps over the lazy dogs","tags":["animals","classic"],)json"
          R"json("score":42,"createdAt":"2024-03-05T10:20:30Z","author":{"name":"Ann Smith"}})json"},
    {"2", R"json({"title":"Caf\u00e9 na\u00efve","body":"running runners ran","tags":["food"],"score":1.5,)json"
          R"json("createdAt":"2024-04","author":[{"name":"B\u00f6b"},{"name":"Cy"}]})json"},
    {"3", R"json({"title":["two","titles"],"body":"","tags":[],"score":-9223372036854775808,"createdAt":"2023"})json"},
    {"4", R"json({"title":"\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8","score":"not a number","tags":"solo"})json"},
};
inline constexpr const char* kAdminKey = "admin-key";
inline constexpr const char* kReadKey = "read-key";

// Delayed work dropped; work due now queued for the fuzzing thread.
class DroppingTimers : public server::Timers {
 public:
  void RunAfter(std::chrono::milliseconds delay, std::function<void()> fn) override {
    if (delay.count() > 0) return;
    std::lock_guard lock(mu_);
    due_.push_back(std::move(fn));
  }
  void RunDue() {
    std::vector<std::function<void()>> run;
    {
      std::lock_guard lock(mu_);
      run.swap(due_);
    }
    for (auto& fn : run) fn();
  }

 private:
  std::mutex mu_;
  std::vector<std::function<void()>> due_;
};

inline uint64_t InternalErrors() {
  uint64_t n = 0;
  for (size_t i = 0; i < size_t(FaultSite::kCount); ++i) n += InternalErrorCount(FaultSite(i));
  return n;
}

class RouterEnv {
 public:
  explicit RouterEnv(std::string name) : name_(std::move(name)) { Open(); }
  ~RouterEnv() { Close(); }

  // Runs one request as the transport would, and checks its answer.
  void Run(server::Request req, bool keyed) {
    server::Router& router = keyed ? *keyed_ : *plain_;
    const uint64_t etag_before = store_->LastEtag();
    if (!req.body.empty()) {
      // A body follows: the transport refuses an unauthenticated one first,
      // then one over its route's limit (413).
      if (auto refusal = router.Admit(req.method, req.target, req.has_authorization ? &req.authorization : nullptr)) {
        CheckResponse(*refusal, req.method, req.target);
        return;
      }
      if (req.body.size() > router.BodyLimit(req.method, req.target)) return;  // 413 from the transport
    }
    struct Box {
      std::mutex mu;
      std::condition_variable cv;
      int calls = 0;
      server::Response response;
    };
    auto box = std::make_shared<Box>();
    const std::string method = req.method, target = req.target;
    try {
      router.Handle(std::move(req), [box, method, target](server::Response r) {
        std::lock_guard lock(box->mu);
        if (++box->calls > 1)
          Fail("reply called %d times for %s %s", box->calls, method.c_str(), Printable(target).c_str());
        box->response = std::move(r);
        box->cv.notify_all();
      });
    } catch (...) {
      Fail("an exception escaped Router::Handle for %s %s: %s", method.c_str(), Printable(target).c_str(),
           CurrentExceptionText().c_str());
    }
    if (!WaitForReply(*box, std::chrono::milliseconds(50))) {
      // Parked (a long poll, a minEtag wait): answer it as a shutdown would.
      router.CompleteWaiters();
      (keyed ? keyed_parked_ : plain_parked_) = true;
      if (!WaitForReply(*box, std::chrono::seconds(30)))
        Fail("no reply within 30 s for %s %s", method.c_str(), Printable(target).c_str());
    }
    server::Response response;
    {
      std::lock_guard lock(box->mu);
      response = box->response;
    }
    CheckResponse(response, method, target);
    if (store_->LastEtag() != etag_before) WaitForIndexes();
    CheckNoInternalErrors(method, target);
    Maintain();
  }

 private:
  bool WaitForReply(auto& box, std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    for (;;) {
      timers_.RunDue();
      std::unique_lock lock(box.mu);
      if (box.calls > 0) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      box.cv.wait_for(lock, std::chrono::milliseconds(2));
    }
  }

  void CheckResponse(server::Response& r, const std::string& method, const std::string& target) {
    static const bool verbose = std::getenv("FUZZ_VERBOSE") != nullptr;
    if (verbose)
      std::fprintf(stderr, "%s %s -> %d %s\n", method.c_str(), Printable(target).c_str(), r.status,
                   Printable(r.body, 300).c_str());
    FUZZ_CHECK_MSG(r.status >= 100 && r.status <= 599, "status %d", r.status);
    FUZZ_CHECK_MSG(r.status != 500, "500 for %s %s: %s", method.c_str(), Printable(target).c_str(),
                   Printable(r.body, 1000).c_str());
    if (r.stream) return DrainBackup(r, method, target);
    if (r.content_type == "application/json" && !r.body.empty()) {
      rapidjson::Document d;
      const rapidjson::ParseResult ok = ParseWithExactNumbers<rapidjson::kParseValidateEncodingFlag>(d, r.body);
      FUZZ_CHECK_MSG(!ok.IsError() && r.body.find('\0') == std::string::npos,
                     "%d answer to %s %s is not valid JSON (error %d at %zu): %s", r.status, method.c_str(),
                     Printable(target).c_str(), int(ok.Code()), ok.Offset(), Printable(r.body, 1000).c_str());
    }
    for (const auto& [name, value] : r.headers)
      FUZZ_CHECK_MSG(value.find_first_of("\r\n") == std::string::npos, "header %s holds a line break: %s",
                     name.c_str(), Printable(value).c_str());
  }

  void DrainBackup(server::Response& r, const std::string& method, const std::string& target) {
    std::string bytes;
    bool complete = true;
    for (;;) {
      auto piece = std::make_shared<std::promise<Result<std::string>>>();
      auto got = piece->get_future();
      r.stream->Next([piece](Result<std::string> p) { piece->set_value(std::move(p)); });
      if (got.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
        Fail("the backup stream of %s %s stalled", method.c_str(), Printable(target).c_str());
      Result<std::string> p = got.get();
      if (!p.ok()) {
        complete = false;
        break;
      }
      if (p->empty()) break;
      bytes += *p;
      if (bytes.size() > (size_t{256} << 20)) {
        r.stream->Cancel();
        complete = false;
        break;
      }
    }
    if (!complete || r.omit_body) return;
    const std::filesystem::path file = ScratchDir(name_) / "backup.bin";
    WriteFile(file, bytes);
    auto info = storage::VerifyBackup(file.string());
    FUZZ_CHECK_MSG(info.ok(), "the backup of %s %s does not verify: %s", method.c_str(), Printable(target).c_str(),
                   info.status().message().c_str());
    std::filesystem::remove(file);
  }

  // After a write: until the indexes have processed it (bounded; an index
  // that does not catch up within 5 s stops this env's waiting).
  void WaitForIndexes() {
    if (!wait_for_indexes_) return;
    const uint64_t etag = store_->LastEtag();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (const char* name : {"s", "m"}) {
      for (;;) {
        auto indexed = engine_->IndexedEtag(name);
        if (!indexed.ok() || *indexed >= etag) break;
        if (std::chrono::steady_clock::now() >= deadline) {
          wait_for_indexes_ = false;
          return;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }

  void CheckNoInternalErrors(const std::string& method, const std::string& target) {
    const uint64_t now = InternalErrors();
    FUZZ_CHECK_MSG(now == internal_errors_, "%llu internal error(s) recorded (logged above) during %s %s",
                   static_cast<unsigned long long>(now - internal_errors_), method.c_str(), Printable(target).c_str());
  }

  // Keeps the environment small and its base indexes in place.
  void Maintain() {
    if (++runs_ >= 3000 || store_->LastEtag() > 20000) {
      Close();
      Open();
      return;
    }
    if (plain_parked_) plain_ = NewRouter(false);
    if (keyed_parked_) keyed_ = NewRouter(true);
    plain_parked_ = keyed_parked_ = false;
    std::vector<std::string> names = engine_->Names();
    if (names.size() > 6)
      for (const auto& n : names)
        if (n != "s" && n != "m") (void)engine_->DeleteIndex(n);
    EnsureIndex("s", kSearchDefinition);
    EnsureIndex("m", kMapReduceDefinition);
    internal_errors_ = InternalErrors();
  }

  // Puts the base index back if a request replaced or deleted it, and
  // resumes it if a request paused it.
  void EnsureIndex(const char* name, const char* definition) {
    auto current = engine_->Definition(name);
    if (!current.ok() || *current != definition) {
      auto put = engine_->PutIndex(name, definition);
      FUZZ_CHECK_MSG(put.ok(), "PutIndex %s: %s", name, put.status().message().c_str());
    }
    (void)engine_->Resume(name);
  }

  std::unique_ptr<server::Router> NewRouter(bool keyed) {
    server::RouterOptions o;
    if (keyed) {
      o.api_key = kAdminKey;
      o.read_keys = {kReadKey};
      o.max_doc_bytes = 1024;
      o.max_bulk_bytes = 2048;
      o.max_response_bytes = 4096;
      o.max_result_window = 50;
      o.max_control_body_bytes = 512;
    } else {
      o.max_response_bytes = size_t{1} << 20;
    }
    return std::make_unique<server::Router>(*store_, engine_.get(), timers_, o);
  }

  void Open() {
    dir_ = ScratchDir(name_) / ("env-" + std::to_string(generation_++));
    std::filesystem::remove_all(dir_);
    storage::StoreOptions so;
    so.map_size = size_t{1} << 30;
    so.compress_threshold = 256;
    auto store = storage::DocumentStore::Open((dir_ / "store").string(), so);
    FUZZ_CHECK_MSG(store.ok(), "store: %s", store.status().message().c_str());
    store_ = std::move(store).value();
    indexing::EngineOptions eo;
    eo.batch_max_docs = 16;
    eo.tombstone_retention = std::chrono::seconds(1);
    auto engine = indexing::IndexEngine::Open((dir_ / "indexes").string(), *store_, eo);
    FUZZ_CHECK_MSG(engine.ok(), "engine: %s", engine.status().message().c_str());
    engine_ = std::move(engine).value();
    EnsureIndex("s", kSearchDefinition);
    EnsureIndex("m", kMapReduceDefinition);
    storage::WriteRequest w;
    for (const auto& [id, body] : kSeedDocuments) {
      storage::WriteOp op;
      op.collection = "c";
      op.id = id;
      op.body = body;
      w.ops.push_back(op);
      op.collection = "other";
      w.ops.push_back(std::move(op));
    }
    w.single = false;
    auto written = store_->Write(std::move(w));
    FUZZ_CHECK_MSG(written.status.ok(), "seed write: %s", written.status.message().c_str());
    plain_ = NewRouter(false);
    keyed_ = NewRouter(true);
    runs_ = 0;
    wait_for_indexes_ = true;
    WaitForIndexes();
    internal_errors_ = InternalErrors();
  }

  void Close() {
    plain_.reset();
    keyed_.reset();
    timers_.RunDue();
    engine_.reset();
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string name_;
  std::filesystem::path dir_;
  uint64_t generation_ = 0;
  uint64_t runs_ = 0;
  DroppingTimers timers_;
  std::unique_ptr<storage::DocumentStore> store_;
  std::unique_ptr<indexing::IndexEngine> engine_;
  std::unique_ptr<server::Router> plain_, keyed_;
  bool plain_parked_ = false, keyed_parked_ = false;
  bool wait_for_indexes_ = true;
  uint64_t internal_errors_ = 0;
};

// The process's environment, closed cleanly at exit (before the statics
// its threads use are destroyed).
inline RouterEnv& Env(const char* name) {
  static RouterEnv* env = [name] {
    ScratchDir(name);  // registered first, so removed after the env closes
    auto* e = new RouterEnv(name);
    std::atexit([] {
      delete env;
      env = nullptr;
    });
    return e;
  }();
  return *env;
}

}  // namespace corvid::fuzz
