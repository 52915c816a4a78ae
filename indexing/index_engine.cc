// The indexing engine: index lifecycle (definitions on disk, create,
// replace, delete, reset) and one worker thread per index.
//
// The indexing loop is IndexSlot::Run: sleep until the store commits
// something newer than what the index has processed (a commit listener
// wakes it; no polling), read the collection's next changes with their
// bodies in one snapshot, hand them to the kind, which applies them and
// records the batch's etag in one durable commit, then publish progress.
//
// On disk, one directory per version of an index's definition:
// <dir>/<name>/v<k>/definition.json (written by write-fsync-rename),
// v<k>/state/ (the kind's own files) and v<k>/errors.log; <dir>/<name>/current
// names the version that answers queries (one write-fsync-rename switches
// it). A version newer than `current` is a changed definition building
// side by side (API.md, Indexes): the current one answers every query
// until the new one has caught up, then `current` names the new one and the
// old directory is removed. A crash anywhere leaves `current` naming a
// whole version, and a replacement resumes. An index directory without
// `current` from before versions (definition.json and state/ directly in
// <name>/) is version 0. definition.json is the truth: a kind whose state
// belongs to another definition wipes and rebuilds it.
#include "indexing/index_engine.h"

#include "common/durable_file.h"
#include "common/log.h"

#include <rapidjson/document.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <fcntl.h>
#include <malloc.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <mutex>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "common/background_thread.h"
#include "common/faults.h"
#include "common/listener_set.h"
#include "common/memory_budget.h"
#include "indexing/error_log.h"
#include "indexing/index_kind.h"
#include "mapreduce/mapreduce_index.h"
#include "postings/search_index.h"
#include "storage/document_store.h"

namespace corvid::indexing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::chrono::seconds kRetryAfterFailure{1};
// A batch may hold this many times its JSON while it is applied (the
// parsed document, the builder's token logs and sort buffers, the segment
// image; measured peak about 3x for the search kind).
constexpr size_t kBatchMemoryFactor = 4;
// A progress report counts the backlog exactly up to this many changes
// and estimates it beyond (DocumentStore::BacklogSince), so /admin/indexes
// answers in milliseconds over any backlog: the exact part scans ~70
// pages of the change feed, which a store larger than memory may have to
// read from disk (100,000 took a second under a 512 MiB cap).
constexpr uint64_t kExactBacklog = 10000;
// Batches of at least this much JSON (or a 32nd of the budget, if less)
// trim the allocator afterwards.
constexpr size_t kTrimAfterBytes = size_t{8} << 20;
constexpr std::chrono::seconds kRateWindow{60};

Status ValidateIndexName(std::string_view name) {
  if (name.empty() || name.size() > 128) return Status::InvalidArgument("index name must be 1 to 128 characters");
  if (name[0] == '.' || name[0] == '-') return Status::InvalidArgument("index name must not start with '.' or '-'");
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.';
    if (!ok) return Status::InvalidArgument("index name may hold only letters, digits, '_', '-' and '.'");
  }
  return Status::Ok();
}

// Writes `content` to `path` so that after a crash the file holds either
// the old or the new content (common/durable_file.h).
Status WriteFileDurably(const fs::path& path, std::string_view content) {
  return WriteFileAtomic(path.parent_path().string(), path.filename().string(), content);
}

Result<std::string> ReadFile(const fs::path& path) {
  std::string out;
  if (Status s = ReadWholeFile(path.string(), &out); !s.ok()) return s;
  return out;
}

// A version's definition.json, read and compiled (its text kept).
struct LoadedDefinition {
  std::string json;
  CompiledDefinition def;
};
Result<LoadedDefinition> ReadDefinition(const fs::path& path) {
  auto json = ReadFile(path);
  if (!json.ok()) return json.status();
  auto def = CompileDefinition(*json);
  if (!def.ok()) return def.status();
  return LoadedDefinition{std::move(*json), std::move(*def)};
}

bool SameJson(std::string_view a, std::string_view b) {
  rapidjson::Document da, db;
  da.Parse(a.data(), a.size());
  db.Parse(b.data(), b.size());
  return !da.HasParseError() && !db.HasParseError() && da == db;
}

// Removes a directory tree so that a crash midway leaves no half-deleted
// index behind: rename it aside first (atomic), then delete.
void RemoveTree(const fs::path& dir) {
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  fs::path trash = dir.parent_path() / (".trash-" + dir.filename().string() + "-" + std::to_string(::getpid()) +
                                        "-" + std::to_string(counter++));
  fs::rename(dir, trash, ec);
  fs::remove_all(ec ? dir : trash, ec);
}

uint64_t TreeBytes(const fs::path& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2)) total += it->file_size(ec2);
  }
  return total;
}

// Process-wide unique: a replaced index's slot never shares a generation
// with the slot it replaced.
uint64_t NextGeneration() {
  static std::atomic<uint64_t> next{0};
  return ++next;
}

}  // namespace

// One index: its definition, its kind, its worker thread and its progress.
class IndexSlot {
 public:
  IndexSlot(std::string name, std::string definition_json, CompiledDefinition def, fs::path dir,
            std::shared_ptr<IndexKind> kind, storage::DocumentStore& store, const EngineOptions& options,
            std::function<void(const std::string&, uint64_t)> on_progress)
      : name_(std::move(name)),
        definition_json_(std::move(definition_json)),
        type_(def.type),
        collection_(def.collection),
        read_fields_(def.read_fields),
        dir_(std::move(dir)),
        kind_(std::move(kind)),
        store_(store),
        options_(options),
        on_progress_(std::move(on_progress)),
        error_log_(dir_ / "errors.log") {
    indexed_etag_ = kind_->LastAppliedEtag();
    errors_.assign(error_log_.recent().begin(), error_log_.recent().end());
    error_count_ = error_log_.count();
    if (std::string damage = kind_->DamageFoundAtOpen(); !damage.empty()) RecordDamage(damage);
    // A batch's errors are logged just before the batch commits (see
    // ErrorLog::Append for a batch that runs again).
    kind_->SetBeforeCommit([this](std::span<const IndexError> errors) {
      std::vector<RecordedError> recorded;
      recorded.reserve(errors.size());
      const auto now = std::chrono::system_clock::now();
      for (const IndexError& e : errors) {
        recorded.push_back(RecordedError{e.etag, e.id, e.message, now});
        uint64_t suppressed = 0;
        if (logging::Enabled(logging::Level::kWarn) && error_lines_.Allow(suppressed))
          logging::Warn("index.document_error", e.message,
                        {{"index", name_}, {"etag", e.etag}, {"id", e.id}, {"suppressed", suppressed}});
      }
      error_log_.Append(recorded);  // worker thread, inside ApplyBatch
    });
  }

  ~IndexSlot() { Stop(); }

  void Start() {
    listener_ = store_.AddCommitListener([this](uint64_t) {
      { std::lock_guard lock(mu_); }  // orders the wake-up after the worker's predicate check
      cv_.notify_all();
    });
    thread_ = std::thread([this] { Run(); });
  }

  void Stop() {
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    store_.RemoveCommitListener(listener_);
  }

  // Pause (or Resume): no batch starts while paused; AwaitBatch then
  // waits out the one in progress, so that no change committed after the
  // pause is indexed until Resume.
  void SetPaused(bool paused) {
    std::lock_guard lock(mu_);
    paused_ = paused;
    cv_.notify_all();
  }
  // Returns once no batch is in progress.
  void AwaitBatch() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !working_ || stop_; });
  }
  bool paused() const {
    std::lock_guard lock(mu_);
    return paused_;
  }

  // Returns once the state is dropped (after the batch in progress, if
  // any): the index then reports etag 0 and rebuilds from the store.
  void RequestReset() {
    std::unique_lock lock(mu_);
    reset_requested_ = true;
    const uint64_t done = resets_done_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return resets_done_ > done || stop_; });
  }

  // Whether this version, building beside the current one, may now take
  // its place: it has processed everything through `target`, its last
  // batch did not fail, it is not paused, and it is not a version that
  // cannot build (errors, and not one entry to show for them).
  bool ReadyToReplace(uint64_t target) const {
    if (indexed_etag() < target) return false;
    std::lock_guard lock(mu_);
    if (!failure_.empty() || paused_ || stop_) return false;
    return error_count_ == 0 || kind_->Entries() > 0;
  }

  Result<StateSnapshot> SnapshotFiles() const { return kind_->SnapshotFiles(); }

  const std::string& name() const { return name_; }
  const std::string& definition_json() const { return definition_json_; }
  const std::string& collection() const { return collection_; }
  IndexType type() const { return type_; }
  const fs::path& dir() const { return dir_; }
  uint64_t indexed_etag() const { return indexed_etag_.load(std::memory_order_acquire); }

  IndexReader Reader() const {
    IndexReader r;
    r.name = name_;
    r.type = type_;
    r.collection = collection_;
    {
      // The pair a reset changes together (Run): the etag is never a
      // generation's older than the one read with it.
      std::lock_guard lock(mu_);
      r.generation = generation_;
      r.indexed_etag = indexed_etag();
    }
    if (type_ == IndexType::kMapReduce)
      r.mapreduce = std::static_pointer_cast<const mapreduce::MapReduceIndex>(kind_);
    else
      r.search = std::static_pointer_cast<const postings::SearchIndex>(kind_);
    return r;
  }

  uint64_t generation() const {
    std::lock_guard lock(mu_);
    return generation_;
  }

  IndexProgress Progress() const {
    IndexProgress p;
    p.name = name_;
    p.type = type_;
    p.collection = collection_;
    // Entries first, then the etags: a batch applied in between then shows
    // in the etag and not yet in entries, never the other way round.
    p.entries = kind_->Entries();
    p.last_indexed_etag = std::max(kind_->LastAppliedEtag(), indexed_etag());
    auto backlog = store_.BacklogSince(collection_, p.last_indexed_etag, kExactBacklog);
    p.backlog = backlog.ok() ? *backlog : 0;
    auto coll = store_.Collection(collection_);
    const uint64_t total = coll ? coll->count + coll->tombstones : 0;  // change-feed entries
    p.progress = total == 0 ? 1.0 : double(total - std::min(total, p.backlog)) / double(total);
    p.stale = p.backlog > 0;
    p.memory_bytes = kind_->MemoryBytes();
    p.disk_bytes = TreeBytes(dir_);
    std::lock_guard lock(mu_);
    if (paused_) p.state = IndexState::kPaused;
    else if (!failure_.empty()) p.state = IndexState::kError, p.state_message = failure_;
    else p.state = p.backlog > 0 || working_ ? IndexState::kIndexing : IndexState::kIdle;
    // Documents per second of wall time over the last minute (or since the
    // first batch in it began), which is what lastIndexedEtag shows: not
    // per second spent inside batches, which left out reading the store.
    const auto now = Clock::now();
    const auto cutoff = now - kRateWindow;
    uint64_t docs = 0;
    auto since = now;
    for (const auto& b : window_) {
      if (b.end < cutoff) continue;
      docs += b.docs;
      since = std::min(since, b.start);
    }
    since = std::max(since, cutoff);
    const double seconds = std::chrono::duration<double>(now - since).count();
    p.docs_per_sec = seconds > 0 ? double(docs) / seconds : 0.0;
    p.eta_seconds = p.backlog == 0 ? std::optional<double>(0.0)
                    : p.docs_per_sec > 0 ? std::optional<double>(double(p.backlog) / p.docs_per_sec)
                                         : std::nullopt;
    p.error_count = error_count_;
    p.recent_errors.assign(errors_.begin(), errors_.end());
    p.last_batch_docs = last_batch_docs_;
    p.last_batch_ms = last_batch_ms_;
    p.indexed_docs_total = docs_total_;
    p.batches_total = batches_total_;
    p.batch_ms_total = batch_ms_total_;
    return p;
  }

 private:
  struct BatchStat {
    Clock::time_point start;  // the batch's read of the store began
    Clock::time_point end;
    uint64_t docs;
    double ms;
  };

  void Run() {
    MarkBackgroundThread();
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] {
        return stop_ || reset_requested_ ||
               (!paused_ && (store_.LastEtag() > indexed_etag() || (!failure_.empty() && Clock::now() >= retry_at_)));
      });
      if (stop_) return;
      if (reset_requested_) {
        reset_requested_ = false;
        // Etag 0 and a new generation first, together: a query that finds
        // the state already cleared (or partly rebuilt) sees the generation
        // change and reports only what its own snapshot covers.
        generation_ = NextGeneration();
        indexed_etag_.store(0, std::memory_order_release);
        lock.unlock();
        on_progress_(name_, 0);
        Status s = Guarded([&] {
          Status cleared = kind_->Clear();
          error_log_.Clear();
          return cleared;
        });
        lock.lock();
        ++resets_done_;
        cv_.notify_all();  // RequestReset waits for this
        if (!s.ok()) {
          Fail(s.ToString());
          continue;
        }
        failure_.clear();
        errors_.clear();
        error_count_ = 0;
        window_.clear();
        if (!damage_.empty()) {
          RecordDamage(damage_);
          damage_.clear();
        }
        continue;
      }
      if (paused_) continue;
      working_ = true;
      lock.unlock();
      Status fault = Guarded([&] {
        RunBatch();
        return Status::Ok();
      });
      lock.lock();
      working_ = false;
      if (!fault.ok()) Fail(fault.message());
      cv_.notify_all();  // a Pause may be waiting for this batch
      if (!failure_.empty()) {
        // Back off, interruptibly, before retrying a failing batch.
        cv_.wait_until(lock, retry_at_, [&] { return stop_ || reset_requested_; });
      }
    }
  }

  // Runs `work` (mu_ not held), turning an exception that escapes it
  // into an error Status: the index goes to `error` and retries later,
  // and the process goes on (common/faults.h).
  template <class F>
  Status Guarded(F&& work) {
    try {
      return work();
    } catch (...) {
      std::string what = "internal error: " + CurrentExceptionText();
      RecordInternalError(FaultSite::kIndexWorker, "index " + name_ + ": " + what);
      return Status::Internal(std::move(what));
    }
  }

  // The state's files were found damaged and the index starts over from
  // the store: the error log starts over too, with this one error (etag 0,
  // no id) saying so, which /admin/indexes shows. The constructor, or the
  // worker with mu_ held.
  void RecordDamage(const std::string& what) {
    error_log_.Clear();
    const RecordedError e{0, "", "index files damaged (" + what + "); rebuilding from the store",
                          std::chrono::system_clock::now()};
    error_log_.Append(std::span(&e, 1));
    errors_.assign(error_log_.recent().begin(), error_log_.recent().end());
    error_count_ = error_log_.count();
    logging::Error("index.damaged", "index files damaged (" + what + "); rebuilding from the store", {{"index", name_}});
  }

  void Fail(std::string message) {  // mu_ held
    if (message != failure_)  // once per distinct failure, not per retry
      logging::Error("index.failed", "indexing failed; retrying", {{"index", name_}, {"error", message}});
    failure_ = std::move(message);
    retry_at_ = Clock::now() + kRetryAfterFailure;
  }

  // Processes the next batch of the collection's changes. mu_ not held.
  void RunBatch() {
    const auto read_start = Clock::now();
    const uint64_t since = indexed_etag();
    // The batch's JSON is a sixteenth of the budget at most, and the batch
    // takes kBatchMemoryFactor times that from the index workers' share
    // before it reads anything (waiting while other indexes hold it).
    const size_t max_bytes = std::min<size_t>(options_.batch_max_bytes, BudgetShare(16, size_t{1} << 20, SIZE_MAX));
    auto held_back = [&] {
      std::lock_guard lock(mu_);
      return stop_ || reset_requested_ || paused_;
    };
    IndexingMemory::Grant grant = IndexingMemory::Instance().Take(kBatchMemoryFactor * max_bytes, held_back);
    // Given up waiting for memory (or granted it just as it came): a pause,
    // reset or stop goes first, and nothing committed after a pause is
    // indexed until Resume.
    if (held_back()) return;
    auto batch = store_.ReadChangeBatch(collection_, since, options_.batch_max_docs, max_bytes, read_fields_);
    if (!batch.ok()) {
      std::lock_guard lock(mu_);
      Fail("reading the change feed: " + batch.status().ToString());
      return;
    }
    auto changes = (*batch)->changes();
    const uint64_t through = (*batch)->complete() ? std::max((*batch)->snapshot_etag(), since) : changes.back().etag;
    if (changes.empty()) {
      // Nothing for this collection: everything up to the snapshot is done.
      {
        std::lock_guard lock(mu_);
        failure_.clear();
      }
      Publish(through);
      return;
    }
    std::vector<IndexError> errors;
    auto start = Clock::now();
    Status s = kind_->ApplyBatch(changes, through, errors);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    const size_t docs = changes.size();
    const bool caught_up = (*batch)->complete();
    size_t batch_bytes = 0;
    for (const auto& c : changes) batch_bytes += c.json.size();
    batch->reset();  // release the snapshot before anything else
    if (caught_up) kind_->Idle();
    NoteCatchUp(read_start, docs, caught_up, through);
    // What a large batch freed goes back to the system, not to the arena.
    if (batch_bytes >= std::min<size_t>(kTrimAfterBytes, BudgetShare(32, 0, SIZE_MAX))) ::malloc_trim(0);
    if (!s.ok()) {
      std::lock_guard lock(mu_);
      if (s.code() == StatusCode::kCorruption && !rebuilding_for_damage_) {
        // The state's files are damaged (LMDB noticed a bad page): start
        // over from the store (the reset reports it). Damage again before
        // a batch has applied is an error to retry, not another rebuild.
        damage_ = s.ToString();
        rebuilding_for_damage_ = true;
        reset_requested_ = true;
        return;
      }
      Fail("applying a batch: " + s.ToString());
      return;
    }
    // The errors are in the log already (the kind's BeforeCommit hook).
    std::unique_lock lock(mu_);
    failure_.clear();
    rebuilding_for_damage_ = false;
    if (error_log_.count() != error_count_) {
      // Only the batch's new errors: the last (count - seen) of recent().
      const auto& recent = error_log_.recent();
      const size_t fresh = std::min<uint64_t>(error_log_.count() - error_count_, recent.size());
      errors_.insert(errors_.end(), recent.end() - static_cast<std::ptrdiff_t>(fresh), recent.end());
      while (errors_.size() > recent.size()) errors_.pop_front();
      error_count_ = error_log_.count();
    }
    auto now = Clock::now();
    window_.push_back(BatchStat{read_start, now, docs, ms});
    while (!window_.empty() && window_.front().end < now - kRateWindow) window_.pop_front();
    last_batch_docs_ = docs;
    last_batch_ms_ = ms;
    docs_total_ += docs;
    ++batches_total_;
    batch_ms_total_ += ms;
    lock.unlock();
    Publish(through);
  }

  // index.caught_up once a backlog is done: at info when it took a second
  // or more (a build, a reset, a bulk load), at debug otherwise (a write
  // or two), so a steady trickle of writes logs nothing by default.
  void NoteCatchUp(Clock::time_point batch_start, size_t docs, bool caught_up, uint64_t through) {
    if (backlog_docs_ == 0) backlog_start_ = batch_start;
    backlog_docs_ += docs;
    if (!caught_up) return;
    const double secs = std::chrono::duration<double>(Clock::now() - backlog_start_).count();
    logging::Log(secs >= 1.0 ? logging::Level::kInfo : logging::Level::kDebug, "index.caught_up",
                 "index caught up with its collection",
                 {{"index", name_}, {"etag", through}, {"docs", uint64_t(backlog_docs_)}, {"seconds", secs},
                  {"docs_per_sec", secs > 0 ? double(backlog_docs_) / secs : 0.0}});
    backlog_docs_ = 0;
  }

  void Publish(uint64_t through) {
    indexed_etag_.store(through, std::memory_order_release);
    on_progress_(name_, through);
  }

  const std::string name_;
  const std::string definition_json_;
  const IndexType type_;
  const std::string collection_;
  const std::vector<std::string> read_fields_;  // what the kind reads of a document (empty: all)
  const fs::path dir_;
  const std::shared_ptr<IndexKind> kind_;
  storage::DocumentStore& store_;
  const EngineOptions options_;
  const std::function<void(const std::string&, uint64_t)> on_progress_;
  ErrorLog error_log_;  // worker thread only (and the constructor)
  logging::RateLimit error_lines_{10, std::chrono::seconds(10)};  // index.document_error lines
  Clock::time_point backlog_start_{};  // worker thread only: the backlog being worked off
  size_t backlog_docs_ = 0;

  // Processed through this etag: every change of the collection up to it
  // is in the kind's state (durably, or it had nothing for the collection).
  std::atomic<uint64_t> indexed_etag_{0};
  uint64_t listener_ = 0;
  std::thread thread_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool stop_ = false;
  bool paused_ = false;
  bool reset_requested_ = false;
  uint64_t resets_done_ = 0;  // resets carried out (RequestReset waits for the next)
  uint64_t generation_ = NextGeneration();  // new with every reset, unique in the process
  bool working_ = false;
  std::string failure_;  // non-empty: the last batch failed, retry at retry_at_
  Clock::time_point retry_at_;
  std::deque<RecordedError> errors_;
  uint64_t error_count_ = 0;
  std::string damage_;  // a batch found the state damaged: the reset it asked for reports it
  bool rebuilding_for_damage_ = false;  // since that reset, no batch has applied
  std::deque<BatchStat> window_;
  uint64_t last_batch_docs_ = 0;
  double last_batch_ms_ = 0;
  uint64_t docs_total_ = 0;
  uint64_t batches_total_ = 0;
  double batch_ms_total_ = 0;
};

class IndexEngine::Impl {
 public:
  Impl(fs::path dir, storage::DocumentStore& store, EngineOptions options)
      : dir_(std::move(dir)), store_(store), options_(options) {}

  ~Impl() {
    {
      std::lock_guard lock(switch_mu_);
      stop_switcher_ = true;
    }
    switch_cv_.notify_all();
    if (switcher_.joinable()) switcher_.join();
    if (purger_.joinable()) purger_.join();
    std::vector<std::shared_ptr<IndexSlot>> all;
    {
      std::lock_guard lock(mu_);
      for (auto& [name, slot] : slots_) all.push_back(slot);
      for (auto& [name, r] : replacements_) all.push_back(r.slot);
      slots_.clear();
      replacements_.clear();
    }
    for (auto& slot : all) slot->Stop();
  }

  // A changed definition building beside the current version.
  struct Replacement {
    std::shared_ptr<IndexSlot> slot;
    uint64_t min_etag = 0;  // the store's last etag when it was defined
  };

  static std::optional<uint64_t> ParseVersion(const std::string& dirname) {
    if (dirname.size() < 2 || dirname[0] != 'v' || dirname.size() > 20) return std::nullopt;
    uint64_t k = 0;
    for (size_t i = 1; i < dirname.size(); ++i) {
      if (dirname[i] < '0' || dirname[i] > '9') return std::nullopt;
      k = k * 10 + uint64_t(dirname[i] - '0');
    }
    return k;
  }

  // The versions v<k> under an index's directory, ascending.
  static std::vector<uint64_t> Versions(const fs::path& top) {
    std::vector<uint64_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(top, ec))
      if (auto k = ParseVersion(e.path().filename().string()); k && e.is_directory()) out.push_back(*k);
    std::sort(out.begin(), out.end());
    return out;
  }

  static fs::path VersionDir(const fs::path& top, uint64_t k) {
    return k == 0 ? top : top / ("v" + std::to_string(k));
  }

  // What RemoveTree renamed aside in `dir` and did not finish removing
  // (".trash-*"): a start removes it, `corvid verify` names it.
  static std::vector<fs::path> Trash(const fs::path& dir) {
    std::error_code ec;
    std::vector<fs::path> trash;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().starts_with(".trash-")) trash.push_back(e.path());
    return trash;
  }
  static void RemoveTrash(const fs::path& dir) {
    std::error_code ec;
    for (const fs::path& t : Trash(dir)) fs::remove_all(t, ec);
  }

  // Removes one version's files. Version 0 shares its directory with the
  // others, so it is removed piece by piece.
  static void RemoveVersion(const fs::path& top, uint64_t k) {
    if (k != 0) return RemoveTree(VersionDir(top, k));
    RemoveTree(top / "state");
    std::error_code ec;
    fs::remove(top / "errors.log", ec);
    fs::remove(top / "definition.json", ec);
  }

  // Which version of an index answers: the one its `current` file names.
  // A create writes v1's definition, then `current`: without that file
  // and with v1 alone, it crashed in between (v1 answers). Otherwise a
  // `current` that is missing, unreadable or names no version on disk is
  // damage: the server falls back to the oldest version whose definition
  // reads (a newer one is a replacement, which resumes beside it; version
  // 0, from before versions, is the oldest) and rewrites `current`;
  // `corvid verify` reports it. One rule for both, so that they agree.
  struct Current {
    std::optional<uint64_t> version;  // none: no version has a definition
    std::string damage;               // what is wrong with `current`, if anything
    bool rewrite = false;             // `current` is to be (re)written
  };
  static Current ResolveCurrent(const fs::path& top, const std::vector<uint64_t>& versions) {
    Current c;
    std::error_code ec;
    const fs::path file = top / "current";
    const bool legacy = fs::exists(top / "definition.json", ec);
    if (fs::exists(file, ec)) {
      auto text = ReadFile(file);
      std::string v = text.ok() ? *text : std::string();
      while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
      const std::optional<uint64_t> k = text.ok() ? ParseVersion(v) : std::nullopt;
      if (k && (*k == 0 ? legacy : std::binary_search(versions.begin(), versions.end(), *k))) {
        c.version = k;
        return c;
      }
      const bool printable = v.size() <= 40 && std::all_of(v.begin(), v.end(), [](char ch) { return ch >= 0x20 && ch < 0x7f; });
      c.damage = file.string() + (!text.ok()   ? " cannot be read (" + text.status().ToString() + ")"
                                  : printable ? " names no version of the index on disk (\"" + v + "\")"
                                              : " names no version of the index on disk");
    } else if (legacy) {
      c.version = 0;  // from before versions
      return c;
    } else if (!versions.empty() && versions != std::vector<uint64_t>{1}) {
      c.damage = file.string() + " is missing";
    }
    std::vector<uint64_t> candidates = versions;
    if (legacy) candidates.insert(candidates.begin(), 0);
    for (uint64_t k : candidates)
      if (ReadDefinition(VersionDir(top, k) / "definition.json").ok()) {
        c.version = k;
        break;
      }
    // None reads: the oldest with a definition file, which the load then
    // reports damaged (and keeps for the operator).
    for (size_t i = 0; i < candidates.size() && !c.version; ++i)
      if (fs::exists(VersionDir(top, candidates[i]) / "definition.json", ec)) c.version = candidates[i];
    c.rewrite = c.version.has_value();
    return c;
  }

  static Status SetCurrentVersion(const fs::path& top, uint64_t k) {
    return WriteFileDurably(top / "current", "v" + std::to_string(k) + "\n");
  }

  Result<std::shared_ptr<IndexSlot>> LoadVersion(const std::string& name, const fs::path& top, uint64_t k) {
    // Without its definition an index cannot be rebuilt: a definition.json
    // that is missing, unreadable or not a valid definition leaves the
    // index out (its files are kept for the operator) instead of stopping
    // the server; PUT the definition again to rebuild it.
    const fs::path path = VersionDir(top, k) / "definition.json";
    auto loaded = ReadDefinition(path);
    if (!loaded.ok()) {
      logging::Error("index.definition_damaged",
                     path.string() + " is missing or damaged (" + loaded.status().ToString() +
                         "); the index is left out until its definition is PUT again",
                     {{"index", name}});
      return Status::InvalidArgument(loaded.status().message());
    }
    return MakeSlot(name, loaded->json, std::move(loaded->def), VersionDir(top, k));
  }

  Status LoadAll() {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) return Status::IOError("create " + dir_.string() + ": " + ec.message());
    RemoveTrash(dir_);  // deleted indexes a crash left half removed
    for (const auto& entry : fs::directory_iterator(dir_, ec)) {
      std::string name = entry.path().filename().string();
      if (!entry.is_directory() || !ValidateIndexName(name).ok()) continue;
      const fs::path top = entry.path();
      RemoveTrash(top);  // versions (and version 0's state) a crash left half removed
      const std::vector<uint64_t> versions = Versions(top);
      const Current resolved = ResolveCurrent(top, versions);
      if (!resolved.damage.empty())
        logging::Error("index.current_damaged",
                       resolved.damage + (resolved.version ? "; v" + std::to_string(*resolved.version) + " answers"
                                                           : "; no version has a definition: the index is left out"),
                       {{"index", name}});
      if (!resolved.version) {
        // A create that crashed before its definition landed (or damage:
        // the files are kept for the operator).
        if (resolved.damage.empty()) RemoveTree(top);
        continue;
      }
      const std::optional<uint64_t> current = resolved.version;
      if (resolved.rewrite)  // best effort: the version answers either way, and this start resolves it again
        if (Status s = SetCurrentVersion(top, *current); !s.ok())
          logging::Warn("index.current_unwritten", "cannot rewrite " + (top / "current").string() + ": " + s.ToString(),
                        {{"index", name}});
      auto slot = LoadVersion(name, top, *current);
      if (!slot.ok()) {
        if (slot.status().code() == StatusCode::kInvalidArgument) continue;  // logged; skipped
        return slot.status();
      }
      // Versions newer than the current one: the newest is a replacement
      // that was building (it resumes); the rest, and older ones, are
      // leftovers of earlier switches. So is version 0 (from before
      // versions) beside a `current` that names another: a switch from it
      // that a crash interrupted while removing it. (With `current`
      // damaged, what the fallback passed over is kept for the operator.)
      if (*current != 0 && resolved.damage.empty() && fs::exists(top / "definition.json", ec)) RemoveVersion(top, 0);
      std::shared_ptr<IndexSlot> replacement;
      for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
        if (*it == *current) continue;
        if (*it > *current && !replacement) {
          auto r = LoadVersion(name, top, *it);
          if (r.ok()) {
            replacement = *r;
            continue;
          }
        }
        RemoveVersion(top, *it);
      }
      std::lock_guard lock(mu_);
      slots_.emplace(name, *slot);
      if (replacement) replacements_.emplace(name, Replacement{replacement, 0});
    }
    if (ec) return Status::IOError("list " + dir_.string() + ": " + ec.message());
    std::vector<std::string> pending;
    {
      std::lock_guard lock(mu_);
      for (auto& [name, slot] : slots_) slot->Start();
      for (auto& [name, r] : replacements_) {
        r.slot->Start();
        pending.push_back(name);
      }
    }
    switcher_ = std::thread([this] { SwitchLoop(); });
    if (options_.tombstone_retention) purger_ = std::thread([this] { PurgeLoop(); });
    for (const auto& name : pending) WakeSwitcher(name);
    return Status::Ok();
  }

  Result<std::shared_ptr<IndexSlot>> MakeSlot(const std::string& name, const std::string& json, CompiledDefinition def,
                                              const fs::path& dir) {
    std::error_code ec;
    fs::create_directories(dir / "state", ec);
    if (ec) return Status::IOError("create " + (dir / "state").string() + ": " + ec.message());
    auto kind = def.open((dir / "state").string());
    if (!kind.ok()) return kind.status();
    return std::make_shared<IndexSlot>(name, json, std::move(def), dir, std::move(*kind), store_, options_,
                                       [this](const std::string& n, uint64_t) { OnSlotProgress(n); });
  }

  std::shared_ptr<IndexSlot> Find(std::string_view name) const {
    std::lock_guard lock(mu_);
    auto it = slots_.find(name);
    return it == slots_.end() ? nullptr : it->second;
  }

  std::shared_ptr<IndexSlot> FindReplacement(std::string_view name) const {
    std::lock_guard lock(mu_);
    auto it = replacements_.find(name);
    return it == replacements_.end() ? nullptr : it->second.slot;
  }

  // Both versions of `name` as of one instant (a switch in between would
  // pair the old version with no replacement).
  std::pair<std::shared_ptr<IndexSlot>, std::shared_ptr<IndexSlot>> FindWithReplacement(std::string_view name) const {
    std::lock_guard lock(mu_);
    auto it = slots_.find(name);
    if (it == slots_.end()) return {};
    auto rt = replacements_.find(name);
    return {it->second, rt == replacements_.end() ? nullptr : rt->second.slot};
  }

  // Either version of `name` moved (a worker thread, no lock held). Query
  // waits hear the etag of the version that answers queries, never the
  // replacement's; the replacement's progress may make it ready to switch.
  void OnSlotProgress(const std::string& name) {
    std::shared_ptr<IndexSlot> current;
    bool replacing = false;
    {
      std::lock_guard lock(mu_);
      if (auto it = slots_.find(name); it != slots_.end()) current = it->second;
      replacing = replacements_.count(name) > 0;
    }
    if (current) NotifyProgress(name, current->indexed_etag());
    if (replacing) WakeSwitcher(name);
  }

  void WakeSwitcher(const std::string& name) {
    {
      std::lock_guard lock(switch_mu_);
      switch_pending_.insert(name);
    }
    switch_cv_.notify_all();  // the purger waits on it too
  }

  // The thread that switches names to their caught-up replacements: a
  // switch stops the old version's worker, which a worker thread cannot do
  // for itself, and takes admin_mu_, which a PUT may hold while it stops a
  // replacement's worker.
  void SwitchLoop() {
    std::unique_lock lock(switch_mu_);
    for (;;) {
      switch_cv_.wait(lock, [&] { return stop_switcher_ || !switch_pending_.empty(); });
      if (stop_switcher_) return;
      std::set<std::string, std::less<>> names;
      names.swap(switch_pending_);
      lock.unlock();
      for (const auto& name : names) {
        Status s = Status::Ok();
        try {
          s = TrySwitch(name);
        } catch (...) {
          s = Status::Internal(CurrentExceptionText());
        }
        if (!s.ok()) {
          RecordInternalError(FaultSite::kIndexWorker, "index " + name + ": switching to its new definition: " +
                                                            s.ToString());
        }
      }
      lock.lock();
    }
  }

  Status TrySwitch(const std::string& name) {
    std::lock_guard admin(admin_mu_);
    std::shared_ptr<IndexSlot> old, next;
    uint64_t min_etag = 0;
    {
      std::lock_guard lock(mu_);
      auto it = slots_.find(name);
      auto rt = replacements_.find(name);
      if (it == slots_.end() || rt == replacements_.end()) return Status::Ok();
      old = it->second;
      next = rt->second.slot;
      min_etag = rt->second.min_etag;
    }
    if (!next->ReadyToReplace(std::max(min_etag, old->indexed_etag()))) return Status::Ok();
    const fs::path top = dir_ / name;
    const uint64_t old_version = VersionOf(top, old->dir());
    const uint64_t new_version = VersionOf(top, next->dir());
    // The one step that switches, durably; a crash before it resumes the
    // replacement, after it opens the new version.
    if (Status s = SetCurrentVersion(top, new_version); !s.ok()) return s;
    {
      std::lock_guard lock(mu_);
      slots_[name] = next;
      replacements_.erase(name);
    }
    old->Stop();  // queries holding its reader finish on its files, which stay mapped
    RemoveVersion(top, old_version);
    logging::Info("index.replaced", "the new definition caught up and now answers queries",
                  {{"index", name}, {"version", new_version}, {"etag", next->indexed_etag()}});
    NotifyProgress(name, next->indexed_etag());
    return Status::Ok();
  }

  // Purges the store's tombstones that every index (replacements
  // included) has processed and that are older than the retention: every
  // second with a retention of 0, else every tenth of it (at most a
  // minute). Also samples the store's etag clock once a minute.
  void PurgeLoop() {
    MarkBackgroundThread();
    const auto retention = *options_.tombstone_retention;
    const auto interval = std::clamp<std::chrono::seconds>(retention / 10, std::chrono::seconds(1),
                                                           std::chrono::seconds(60));
    uint64_t last_sample = 0;
    std::unique_lock lock(switch_mu_);
    while (!stop_switcher_) {
      lock.unlock();
      try {
        PurgeOnce(retention, last_sample);
      } catch (...) {
        RecordInternalError(FaultSite::kIndexWorker, "purging tombstones: " + CurrentExceptionText());
      }
      lock.lock();
      switch_cv_.wait_for(lock, interval, [&] { return stop_switcher_; });
    }
  }

  void PurgeOnce(std::chrono::seconds retention, uint64_t& last_sample) {
    uint64_t through = store_.LastEtag();
    {
      std::lock_guard lock(mu_);
      for (const auto& [name, slot] : slots_) through = std::min(through, slot->indexed_etag());
      for (const auto& [name, r] : replacements_) through = std::min(through, r.slot->indexed_etag());
    }
    const auto now = uint64_t(std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
    if (retention.count() > 0) {
      auto old_enough = store_.EtagAtTime(now - std::min<uint64_t>(now, uint64_t(retention.count())));
      through = old_enough.ok() ? std::min(through, *old_enough) : 0;
    }
    const bool sample = now >= last_sample + 60;
    if (through == 0 && !sample) return;
    // The clock keeps what the retention needs: the newest sample older
    // than it, and the ones since.
    const uint64_t keep_from = now - std::min<uint64_t>(now, uint64_t(retention.count()));
    auto r = store_.PurgeTombstones(through, sample ? now : 0, 10000, sample ? keep_from : 0);
    if (!r.ok()) {
      if (r.status().code() != StatusCode::kShuttingDown)
        RecordInternalError(FaultSite::kIndexWorker, "purging tombstones: " + r.status().ToString());
      return;
    }
    if (sample) last_sample = now;
  }

  static uint64_t VersionOf(const fs::path& top, const fs::path& dir) {
    if (dir == top) return 0;
    return ParseVersion(dir.filename().string()).value_or(0);
  }

  // Stops and removes `name`'s replacement, if it has one. admin_mu_ held.
  void CancelReplacement(std::string_view name) {
    std::shared_ptr<IndexSlot> r;
    {
      std::lock_guard lock(mu_);
      auto it = replacements_.find(name);
      if (it == replacements_.end()) return;
      r = it->second.slot;
      replacements_.erase(it);
    }
    r->Stop();
    RemoveTree(r->dir());
  }

  void NotifyProgress(const std::string& name, uint64_t etag) { listeners_.Notify(name, etag); }

  const fs::path dir_;
  storage::DocumentStore& store_;
  const EngineOptions options_;

  std::mutex admin_mu_;  // serializes create/replace/delete and switches
  mutable std::mutex mu_;  // guards slots_ and replacements_
  std::map<std::string, std::shared_ptr<IndexSlot>, std::less<>> slots_;  // the versions that answer queries
  std::map<std::string, Replacement, std::less<>> replacements_;

  std::mutex switch_mu_;  // guards the two below
  std::condition_variable switch_cv_;
  std::set<std::string, std::less<>> switch_pending_;
  bool stop_switcher_ = false;  // also stops the purger
  std::thread switcher_;
  std::thread purger_;

  ListenerSet<const std::string&, uint64_t> listeners_;
};

IndexEngine::IndexEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
IndexEngine::~IndexEngine() = default;

Status IndexEngine::Verify(const std::string& dir, VerifyReport& report) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Status::Ok();  // no index was ever defined
  std::vector<fs::path> tops;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && !name.starts_with(".trash-") && ValidateIndexName(name).ok()) tops.push_back(entry.path());
  }
  if (ec) return Status::IOError("list " + dir + ": " + ec.message());
  std::sort(tops.begin(), tops.end());
  for (const fs::path& top : tops) {
    const std::string name = top.filename().string();
    // Every version with a definition: the current one and a replacement
    // building beside it (leftovers the server removes are checked too).
    std::vector<uint64_t> versions = Impl::Versions(top);
    const Impl::Current resolved = Impl::ResolveCurrent(top, versions);
    const std::optional<uint64_t> current = resolved.version;
    if (!resolved.damage.empty())
      report.damaged.push_back("index " + name + ": " + resolved.damage +
                               (current ? "; the server falls back to v" + std::to_string(*current)
                                        : "; no version has a definition: PUT the definition again"));
    if (!current && resolved.damage.empty()) {
      report.notes.push_back("index " + name + ": no definition (a create that never finished); the server removes it");
      continue;
    }
    for (const fs::path& t : Impl::Trash(top))
      report.notes.push_back("index " + name + ": " + t.string() +
                             " is what a removal left (interrupted); the server removes it at start");
    if (fs::exists(top / "definition.json", ec)) {
      if (current != 0 && resolved.damage.empty())
        report.notes.push_back("index " + name + ": files of version 0 (from before versions) beside current v" +
                               std::to_string(*current) + " are what a switch left (interrupted); the server removes them at start");
      else
        versions.insert(versions.begin(), 0);
    }
    for (uint64_t k : versions) {
      const fs::path vdir = Impl::VersionDir(top, k);
      std::string label = "index " + name;
      if (k != 0 && (versions.size() > 1 || current != k)) label += " (v" + std::to_string(k) + (current == k ? ", current)" : ")");
      auto loaded = ReadDefinition(vdir / "definition.json");
      if (!loaded.ok()) {
        report.damaged.push_back(label + ": " + (vdir / "definition.json").string() + " is missing or damaged (" +
                                 loaded.status().ToString() + "); PUT the definition again to rebuild the index");
        continue;
      }
      if (Status s = loaded->def.verify((vdir / "state").string(), label, report); !s.ok()) return s;
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<IndexEngine>> IndexEngine::Open(const std::string& dir, storage::DocumentStore& store,
                                                       EngineOptions options) {
  auto impl = std::make_unique<Impl>(fs::path(dir), store, options);
  if (Status s = impl->LoadAll(); !s.ok()) return s;
  return std::unique_ptr<IndexEngine>(new IndexEngine(std::move(impl)));
}

Result<PutOutcome> IndexEngine::PutIndex(std::string_view name, std::string_view definition_json) {
  if (Status s = ValidateIndexName(name); !s.ok()) return s;
  auto def = CompileDefinition(definition_json);
  if (!def.ok()) return def.status();
  std::lock_guard admin(impl_->admin_mu_);
  std::shared_ptr<IndexSlot> old = impl_->Find(name);
  std::shared_ptr<IndexSlot> replacing = impl_->FindReplacement(name);
  if (old && SameJson(old->definition_json(), definition_json)) {
    impl_->CancelReplacement(name);  // back to the definition that answers
    return PutOutcome::kUnchanged;
  }
  if (replacing && SameJson(replacing->definition_json(), definition_json)) return PutOutcome::kReplaced;
  impl_->CancelReplacement(name);  // a newer definition restarts the replacement
  const fs::path top = impl_->dir_ / std::string(name);
  std::error_code ec;
  if (!old) RemoveTree(top);  // leftovers of an index that failed to load
  fs::create_directories(top, ec);
  if (ec) return Status::IOError("create " + top.string() + ": " + ec.message());
  const std::vector<uint64_t> versions = Impl::Versions(top);
  const uint64_t k = versions.empty() ? 1 : versions.back() + 1;
  const fs::path dir = Impl::VersionDir(top, k);
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("create " + dir.string() + ": " + ec.message());
  std::string json(definition_json);
  if (!old) {
    // A new index starts building before its definition is durable, so
    // that its first batch overlaps the five fsyncs below (~1 ms, a fifth
    // of a 3,000-document build of large documents). Nothing answers for
    // it until they are done (it is not in slots_ yet), and a crash before
    // its definition landed leaves files the next start removes (LoadAll).
    auto slot = impl_->MakeSlot(std::string(name), json, std::move(*def), dir);
    if (!slot.ok()) {
      RemoveTree(top);
      return slot.status();
    }
    (*slot)->Start();
    Status s = WriteFileDurably(dir / "definition.json", json);
    if (s.ok()) s = Impl::SetCurrentVersion(top, k);
    if (s.ok()) s = FsyncDir(impl_->dir_.string());  // the index's directory itself
    if (!s.ok()) {
      (*slot)->Stop();
      RemoveTree(top);
      return s;
    }
    {
      std::lock_guard lock(impl_->mu_);
      impl_->slots_.emplace(std::string(name), *slot);
    }
    logging::Info("index.created", "index created; building from the store",
                  {{"index", name}, {"type", IndexTypeName((*slot)->type())}, {"collection", (*slot)->collection()}});
    return PutOutcome::kCreated;
  }
  if (Status s = WriteFileDurably(dir / "definition.json", json); !s.ok()) return s;
  const uint64_t min_etag = impl_->store_.LastEtag();
  auto slot = impl_->MakeSlot(std::string(name), json, std::move(*def), dir);
  if (!slot.ok()) {
    RemoveTree(dir);
    return slot.status();
  }
  // A paused index stays paused through a redefinition: its replacement
  // starts paused too (so it cannot switch) until Resume.
  if (old->paused()) (*slot)->SetPaused(true);
  {
    std::lock_guard lock(impl_->mu_);
    impl_->replacements_[std::string(name)] = Impl::Replacement{*slot, min_etag};
  }
  (*slot)->Start();
  logging::Info("index.replacing", "definition changed; the new one builds beside the current one, which answers until it has caught up",
                {{"index", name}, {"version", k}});
  impl_->WakeSwitcher(std::string(name));  // an empty collection switches at once
  return PutOutcome::kReplaced;
}

Status IndexEngine::DeleteIndex(std::string_view name) {
  std::lock_guard admin(impl_->admin_mu_);
  std::shared_ptr<IndexSlot> slot = impl_->Find(name);
  if (!slot) return Status::NotFound("no index named '" + std::string(name) + "'");
  impl_->CancelReplacement(name);
  {
    std::lock_guard lock(impl_->mu_);
    impl_->slots_.erase(slot->name());
  }
  slot->Stop();
  RemoveTree(impl_->dir_ / std::string(name));
  logging::Info("index.deleted", "index deleted with its files", {{"index", name}});
  // Queries waiting for this index's progress (minEtag) answer 404 now,
  // not when their wait runs out.
  impl_->NotifyProgress(std::string(name), 0);
  return Status::Ok();
}

std::vector<std::string> IndexEngine::Names() const {
  std::lock_guard lock(impl_->mu_);
  std::vector<std::string> names;
  for (const auto& [name, slot] : impl_->slots_) names.push_back(name);
  return names;
}

Result<std::string> IndexEngine::Definition(std::string_view name) const {
  auto slot = impl_->Find(name);
  if (!slot) return Status::NotFound("no index named '" + std::string(name) + "'");
  return slot->definition_json();
}

namespace {
IndexProgress WithReplacement(IndexProgress p, const std::shared_ptr<IndexSlot>& replacing) {
  if (replacing) {
    p.replacing = std::make_shared<IndexProgress>(replacing->Progress());
    p.replacing_definition = replacing->definition_json();
  }
  return p;
}
}  // namespace

Result<IndexProgress> IndexEngine::Progress(std::string_view name) const {
  auto [slot, replacing] = impl_->FindWithReplacement(name);
  if (!slot) return Status::NotFound("no index named '" + std::string(name) + "'");
  return WithReplacement(slot->Progress(), replacing);
}

std::vector<IndexProgress> IndexEngine::AllProgress() const {
  std::vector<std::pair<std::shared_ptr<IndexSlot>, std::shared_ptr<IndexSlot>>> slots;
  {
    std::lock_guard lock(impl_->mu_);
    for (const auto& [name, slot] : impl_->slots_) {
      auto it = impl_->replacements_.find(name);
      slots.emplace_back(slot, it == impl_->replacements_.end() ? nullptr : it->second.slot);
    }
  }
  std::vector<IndexProgress> out;
  for (const auto& [s, r] : slots) out.push_back(WithReplacement(s->Progress(), r));
  return out;
}

// Pausing an index pauses its replacement too: nothing of it moves.
Status IndexEngine::Pause(std::string_view name) {
  std::shared_ptr<IndexSlot> slot, replacement;
  {
    // A PUT's replacement is paused (or not) with the index; the batches
    // in progress are waited for after, so that a long one holds up no
    // PUT, DELETE or switch (nor a cluster's applier, which defines indexes).
    std::lock_guard admin(impl_->admin_mu_);
    slot = impl_->Find(name);
    if (!slot) return Status::NotFound("no index named '" + std::string(name) + "'");
    slot->SetPaused(true);
    replacement = impl_->FindReplacement(name);
    if (replacement) replacement->SetPaused(true);
  }
  slot->AwaitBatch();
  if (replacement) replacement->AwaitBatch();
  logging::Info("index.paused", "index paused", {{"index", name}, {"etag", slot->indexed_etag()}});
  return Status::Ok();
}

Status IndexEngine::Resume(std::string_view name) {
  std::lock_guard admin(impl_->admin_mu_);  // a PUT's replacement is paused (or not) with it
  auto slot = impl_->Find(name);
  if (!slot) return Status::NotFound("no index named '" + std::string(name) + "'");
  slot->SetPaused(false);
  logging::Info("index.resumed", "index resumed", {{"index", name}, {"etag", slot->indexed_etag()}});
  if (auto r = impl_->FindReplacement(name)) {
    r->SetPaused(false);
    impl_->WakeSwitcher(std::string(name));
  }
  return Status::Ok();
}

Status IndexEngine::Reset(std::string_view name) {
  auto slot = impl_->Find(name);
  if (!slot) return Status::NotFound("no index named '" + std::string(name) + "'");
  slot->RequestReset();
  logging::Info("index.reset", "index reset; rebuilding from the store", {{"index", name}});
  return Status::Ok();
}

Result<std::vector<IndexBackup>> IndexEngine::SnapshotIndexes() const {
  std::vector<std::shared_ptr<IndexSlot>> slots;
  {
    std::lock_guard lock(impl_->mu_);
    for (const auto& [name, slot] : impl_->slots_) slots.push_back(slot);
  }
  std::vector<IndexBackup> out;
  for (std::shared_ptr<IndexSlot> slot : slots) {
    auto files = slot->SnapshotFiles();
    // A redefinition that switched (or a delete) since the list was taken
    // removes the old version's directory: copy the version that answers
    // now, or leave out an index that no longer exists.
    while (!files.ok()) {
      std::shared_ptr<IndexSlot> now = impl_->Find(slot->name());
      if (now == slot) return Status::IOError("index " + slot->name() + ": " + files.status().message());
      if (!now) break;
      slot = std::move(now);
      files = slot->SnapshotFiles();
    }
    if (!files.ok()) continue;
    out.push_back(IndexBackup{slot->name(), slot->definition_json(), std::move(*files)});
  }
  return out;
}

Result<IndexReader> IndexEngine::Reader(std::string_view name) const {
  auto slot = impl_->Find(name);
  if (!slot) return Status::NotFound("no index named '" + std::string(name) + "'");
  return slot->Reader();
}

Result<uint64_t> IndexEngine::IndexedEtag(std::string_view name) const {
  auto slot = impl_->Find(name);
  if (!slot) return Status::NotFound("no index named '" + std::string(name) + "'");
  return slot->indexed_etag();
}

bool IndexEngine::ResetSince(const IndexReader& reader) const {
  auto slot = impl_->Find(reader.name);
  return !slot || slot->generation() != reader.generation;
}

uint64_t IndexEngine::AnswerEtag(const IndexReader& reader, uint64_t snapshot_etag) const {
  if (ResetSince(reader)) return snapshot_etag;
  return std::max(reader.indexed_etag, snapshot_etag);
}

bool IndexEngine::IsStale(const IndexReader& reader, uint64_t indexed_etag) const {
  auto n = impl_->store_.CountChangesSince(reader.collection, indexed_etag, 1);
  return !n.ok() || *n > 0;
}

uint64_t IndexEngine::AddProgressListener(ProgressListener listener) {
  return impl_->listeners_.Add(std::move(listener));
}

void IndexEngine::RemoveProgressListener(uint64_t handle) { impl_->listeners_.Remove(handle); }

}  // namespace corvid::indexing
