// SearchIndexImpl: the index worker's side of a search index — turning
// batches into segment files (each document through AddDocument,
// document_writer.h), deletes into per-segment bitmaps, committing
// the manifest (manifest.h), running merges (picked by merge_policy.h,
// written by segment_merger.h) on a background thread — and publication
// of reader snapshots. Queries run in searcher.cc.
//
// Threads: the index worker (ApplyBatch, Clear), one merge thread per index
// (MergeLoop), and any number of readers (Search, the accessors). Both
// writers build their segment files without locks and then commit under
// commit_mu_: derive the next snapshot from the current one, write the
// manifest, publish. Readers only copy the snapshot pointer. No index of
// ids is kept in memory: the previous version of a document is found
// through the segments' id filters and id orders (Segment::FindId).
//
// The manifest (manifest.h) names the segment files; segment i lives in
// "seg-<id as 16 hex digits>.cvs" (format: segment.cc).
// Files the manifest does not name (a crash between writing a segment and
// the manifest, or after a merge) are deleted on Open. Any invalid file
// makes Open wipe the directory and start from etag 0.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/background_thread.h"
#include "common/resident_pages.h"
#include "common/faults.h"
#include "common/hash.h"
#include "common/memory_budget.h"
#include "postings/document_writer.h"
#include "postings/manifest.h"
#include "postings/merge_policy.h"
#include "postings/segment_merger.h"
#include "postings/snapshot.h"
#include "postings/walks.h"

namespace corvid::postings {
namespace {

// The batch builder keeps its dictionary and arrays between batches
// (SegmentBuilder::Reset) unless they grew beyond kBacklogBuilderBytes;
// once the index has caught up (Idle) it keeps at most kIdleBuilderBytes.
// Dropping it costs the next batch its dictionary (a probe miss and a
// sort per term); what it keeps is mostly the batch's token logs and
// sort buffers (8 bytes per token each), released first (TrimBuilder).
// Both shrink with the memory budget (common/memory_budget.h).
size_t BacklogBuilderBytes() { return BudgetShare(8, size_t{16} << 20, size_t{256} << 20); }
size_t IdleBuilderBytes() { return BudgetShare(16, size_t{8} << 20, size_t{64} << 20); }

std::string SegmentName(uint64_t id) {
  char b[40];
  snprintf(b, sizeof b, "seg-%016llx.cvs", static_cast<unsigned long long>(id));
  return b;
}

std::mutex merge_hook_mu;
std::function<void()> merge_hook;  // guarded by merge_hook_mu; SetMergeCommitHookForTesting

bool AnySegmentFile(const std::string& dir);  // any seg-* file in `dir`

class SearchIndexImpl final : public SearchIndex {
 public:
  SearchIndexImpl(std::string dir, std::shared_ptr<const SearchDefinitionImpl> def) : dir_(std::move(dir)), def_(std::move(def)) {}
  // Cancels a merge in flight (its output file is removed) and joins the thread.
  ~SearchIndexImpl() override { StopMerges(); }

  Status Init();
  uint64_t LastAppliedEtag() const override { return Current()->etag; }
  Status ApplyBatch(std::span<const DocChange> batch, uint64_t through_etag, std::vector<IndexError>& errors) override;
  void Idle() override;
  void SetBeforeCommit(BeforeCommit hook) override { before_commit_ = std::move(hook); }
  Status Clear() override;
  std::string DamageFoundAtOpen() const override { return damage_; }
  uint64_t LiveDocuments() const override { return Current()->live_docs; }
  uint64_t DiskBytes() const override { return disk_bytes_.load(); }
  uint64_t MemoryBytes() const override { return memory_bytes_.load() + builder_bytes_.load() + merge_bytes_.load(); }
  Result<SearchResult> Search(const SearchRequest& request) const override;
  Result<StateSnapshot> SnapshotFiles() const override;
  // Blocks until the merge thread finds nothing to merge (or is stopped).
  void WaitForMerges();
  std::shared_ptr<const Snapshot> Current() const {
    std::lock_guard<std::mutex> l(snap_mu_);
    return snap_;
  }

 private:
  // Requires commit_mu_, or no merge thread yet.
  void Publish(std::shared_ptr<const Snapshot> s) {
    uint64_t disk = 0, mem = 0;
    for (const auto& seg : s->segments) {
      disk += seg.segment->file_bytes();
      mem += roaring_bitmap_size_in_bytes(seg.deleted.get()) + seg.segment->memory_bytes();
    }
    uint64_t held_disk = 0, held_mem = 0;  // what pinned walks keep of older snapshots (walks.h)
    walks_.Held(*s, held_disk, held_mem);
    disk_bytes_ = disk + held_disk;
    memory_bytes_ = mem + held_mem;
    std::lock_guard<std::mutex> l(snap_mu_);
    snap_ = std::move(s);
  }
  std::shared_ptr<Snapshot> EmptySnapshot() const {
    auto s = std::make_shared<Snapshot>();
    s->def = def_;
    s->sum_len.assign(def_->text_fields().size(), 0);
    s->with_tokens.assign(def_->text_fields().size(), 0);
    return s;
  }
  static void Recount(Snapshot& s);
  SegmentState MakeState(uint64_t id, std::shared_ptr<const Segment> seg, Bitmap deleted) const;
  Status WriteManifest(const Snapshot& s) const;
  Status LoadManifest();
  void WipeFiles();
  void RemoveUnreferenced(const Snapshot& s);
  bool HasSegmentFiles() const;  // any seg-* file in the directory
  void Unlink(uint64_t segment_id) const { ::unlink((dir_ + "/" + SegmentName(segment_id)).c_str()); }
  void TrimBuilder(size_t cap);
  // Encodes `b` into `image` (a reusable buffer) and writes it crash-safely.
  Result<std::shared_ptr<const Segment>> WriteSegment(SegmentBuilder& b, uint64_t id, std::string& image);

  // The merge thread: StartMerges/StopMerges run on the worker (Init,
  // Clear, the destructor); RequestMerge after every batch.
  void StartMerges();
  void StopMerges();
  void RequestMerge();
  void MergeLoop();
  Status MergeUntilBalanced();
  Status Merge(const std::shared_ptr<const Snapshot>& base, const std::vector<size_t>& which);

  const std::string dir_;
  const std::shared_ptr<const SearchDefinitionImpl> def_;
  mutable std::mutex snap_mu_;
  std::shared_ptr<const Snapshot> snap_;  // guarded by snap_mu_
  mutable WalkPins walks_;  // field-sorted walks' pinned snapshots
  // Serializes commits (ApplyBatch, a merge, Clear): each derives the next
  // snapshot from the current one and writes the manifest while holding
  // it, so manifests land in commit order. It is held across that one
  // small file write and fsync — never across building or writing a
  // segment; readers never take it. Order: commit_mu_, then snap_mu_.
  std::mutex commit_mu_;
  std::atomic<uint64_t> next_segment_id_{1};
  std::string damage_;  // Init: why it started over from etag 0, if the files were damaged
  std::atomic<uint64_t> disk_bytes_{0}, memory_bytes_{0};
  std::atomic<uint64_t> merge_bytes_{0};  // what a merge in flight holds (an estimate from its inputs)
  // Worker-only (ApplyBatch, Idle, Clear): the batch builder and its segment
  // image buffer, reused (fresh ones per batch cost page faults).
  std::unique_ptr<SegmentBuilder> builder_;
  std::string image_;
  BeforeCommit before_commit_;  // worker-only
  std::atomic<uint64_t> builder_bytes_{0};  // its RetainedBytes after the last batch
  // One merge runs at a time, on merge_thread_, so a segment being merged
  // is never picked by another merge.
  std::mutex merge_mu_;
  std::condition_variable merge_cv_;
  bool merge_wanted_ = false;             // guarded by merge_mu_: a batch arrived since the last pick
  bool merging_ = false;                  // guarded by merge_mu_: the thread is picking or merging
  std::atomic<bool> stop_merges_{false};  // written under merge_mu_; polled by a running merge to cancel
  std::thread merge_thread_;
};

void SearchIndexImpl::Recount(Snapshot& s) {
  std::fill(s.sum_len.begin(), s.sum_len.end(), 0);
  std::fill(s.with_tokens.begin(), s.with_tokens.end(), 0);
  s.live_docs = 0;
  for (const auto& seg : s.segments) {
    s.live_docs += seg.live();
    for (size_t f = 0; f < s.sum_len.size(); ++f) {
      s.sum_len[f] += seg.live_sum_len[f];
      s.with_tokens[f] += seg.live_with_tokens[f];
    }
  }
}

SegmentState SearchIndexImpl::MakeState(uint64_t id, std::shared_ptr<const Segment> seg, Bitmap deleted) const {
  SegmentState st;
  st.id = id;
  st.segment = std::move(seg);
  const uint32_t n = st.segment->doc_count();
  roaring_bitmap_remove_range(deleted.get(), n, uint64_t{1} << 32);  // ignore nonsense beyond doc_count
  st.deleted_count = roaring_bitmap_get_cardinality(deleted.get());
  const size_t nf = def_->text_fields().size();
  st.live_sum_len.assign(nf, 0);
  st.live_with_tokens.assign(nf, 0);
  for (size_t f = 0; f < nf; ++f) {
    const uint32_t* len = st.segment->lengths(static_cast<uint32_t>(f));
    for (uint32_t d = 0; d < n; ++d) {
      st.live_sum_len[f] += len[d];
      st.live_with_tokens[f] += len[d] > 0;
    }
  }
  roaring_uint32_iterator_t it;
  roaring_init_iterator(deleted.get(), &it);
  for (; it.has_value; roaring_advance_uint32_iterator(&it)) {
    for (size_t f = 0; f < nf; ++f) {
      uint32_t l = st.segment->lengths(static_cast<uint32_t>(f))[it.current_value];
      st.live_sum_len[f] -= l;
      st.live_with_tokens[f] -= l > 0;
    }
  }
  st.deleted = std::shared_ptr<const roaring_bitmap_t>(deleted.release(), RoaringDeleter());
  return st;
}

Status SearchIndexImpl::WriteManifest(const Snapshot& s) const {
  std::vector<ManifestEntry> entries;
  for (const auto& seg : s.segments) entries.push_back(ManifestEntry{seg.id, seg.segment->doc_count(), seg.deleted.get()});
  return WriteFileAtomic(dir_, kManifestName, EncodeManifest(def_->Fingerprint(), s.etag, next_segment_id_, entries));
}

Result<StateSnapshot> SearchIndexImpl::SnapshotFiles() const {
  // The current snapshot's manifest, encoded now, and its segments read
  // from their mappings, which the snapshot keeps alive even if a merge
  // removes their files meanwhile.
  std::shared_ptr<const Snapshot> snap = Current();
  std::vector<ManifestEntry> entries;
  for (const auto& seg : snap->segments) entries.push_back(ManifestEntry{seg.id, seg.segment->doc_count(), seg.deleted.get()});
  auto manifest = std::make_shared<const std::string>(
      EncodeManifest(def_->Fingerprint(), snap->etag, next_segment_id_.load(), entries));
  StateSnapshot out;
  out.etag = snap->etag;
  out.files.push_back(SnapshotFile{kManifestName, [manifest](const ByteSink& sink) { return sink(*manifest); }});
  for (size_t i = 0; i < snap->segments.size(); ++i) {
    out.files.push_back(SnapshotFile{SegmentName(snap->segments[i].id), [snap, i](const ByteSink& sink) -> Status {
                                       const std::string_view file = snap->segments[i].segment->file();
                                       constexpr size_t kPiece = size_t{1} << 20;
                                       for (size_t at = 0; at < file.size(); at += kPiece) {
                                         // The mapping reads a page per fault (queries'
                                         // advice): ask for this piece and the next at once.
                                         WillNeed(file.data() + at, std::min(2 * kPiece, file.size() - at));
                                         if (Status s = sink(file.substr(at, kPiece)); !s.ok()) return s;
                                       }
                                       // Out of the resident set again (as the store's copy):
                                       // the pages stay cached for queries.
                                       DropResidentPages(file.data(), file.size());
                                       return Status::Ok();
                                     }});
  }
  return out;
}

void SearchIndexImpl::WipeFiles() {
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    std::string_view n(e->d_name);
    if (n.starts_with("seg-") || n.starts_with("MANIFEST")) ::unlink((dir_ + "/" + std::string(n)).c_str());
  }
  ::closedir(d);
  (void)FsyncDir(dir_);
}

bool SearchIndexImpl::HasSegmentFiles() const { return AnySegmentFile(dir_); }

bool AnySegmentFile(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = ::readdir(d)) found = found || std::string_view(e->d_name).starts_with("seg-");
  ::closedir(d);
  return found;
}

void SearchIndexImpl::RemoveUnreferenced(const Snapshot& s) {
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return;
  std::vector<std::string> doomed;
  while (dirent* e = ::readdir(d)) {
    std::string n(e->d_name);
    bool keep = n == kManifestName;
    for (const auto& seg : s.segments) keep = keep || n == SegmentName(seg.id);
    if (!keep && (n.starts_with("seg-") || n.starts_with("MANIFEST"))) doomed.push_back(n);
  }
  ::closedir(d);
  for (const auto& n : doomed) ::unlink((dir_ + "/" + n).c_str());
}

Status SearchIndexImpl::LoadManifest() {
  std::string bytes;
  Status st = ReadWholeFile(dir_ + "/" + kManifestName, &bytes);
  if (!st.ok()) return st;
  auto m = DecodeManifest(bytes);
  if (!m.ok()) return m.status();
  if (m->fingerprint != def_->Fingerprint())
    return Status::Corruption("MANIFEST: " + std::string(kOutdatedDefinition));
  auto snap = EmptySnapshot();
  snap->etag = m->etag;
  next_segment_id_ = m->next_segment_id;
  const auto nt = static_cast<uint32_t>(def_->text_fields().size());
  const auto nn = static_cast<uint32_t>(def_->numeric_fields().size());
  for (auto& entry : m->segments) {
    auto seg = Segment::Open(dir_ + "/" + SegmentName(entry.id), def_->Fingerprint(), nt, nn);
    if (!seg.ok()) return seg.status();
    if ((*seg)->doc_count() != entry.doc_count) return Status::Corruption("MANIFEST: segment doc count differs");
    snap->segments.push_back(MakeState(entry.id, std::move(seg).value(), std::move(entry.deleted)));
    next_segment_id_ = std::max(next_segment_id_.load(), entry.id + 1);
  }
  Recount(*snap);
  RemoveUnreferenced(*snap);
  Publish(std::move(snap));
  return Status::Ok();
}

Status SearchIndexImpl::Init() {
  ::mkdir(dir_.c_str(), 0755);
  struct stat sb;
  if (::stat(dir_.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) return Status::IOError("cannot create directory " + dir_);
  Status st = LoadManifest();
  if (!st.ok()) {
    // Missing, unknown, corrupt or for another definition: rebuild from 0.
    // Only damage is reported (IndexKind::DamageFoundAtOpen): a new index
    // has no MANIFEST and no segment, and files of an older format or of
    // another definition are outdated, not damaged.
    if (st.code() == StatusCode::kNotFound && st.message() == dir_ + "/" + kManifestName) {
      if (HasSegmentFiles()) damage_ = "MANIFEST is missing beside segment files";
    } else if (!IsOutdated(st)) {
      damage_ = st.ToString();
    }
    next_segment_id_ = 1;
    WipeFiles();
    auto empty = EmptySnapshot();
    Status w = WriteManifest(*empty);
    if (!w.ok()) return w;
    Publish(std::move(empty));
  }
  StartMerges();  // the loaded segments may already call for a merge
  return Status::Ok();
}

Result<std::shared_ptr<const Segment>> SearchIndexImpl::WriteSegment(SegmentBuilder& b, uint64_t id,
                                                                     std::string& image) {
  b.Encode(def_->Fingerprint(), image);
  std::string name = SegmentName(id);
  Status st = WriteFileAtomic(dir_, name, image);
  if (!st.ok()) return st;
  return Segment::Open(dir_ + "/" + name, def_->Fingerprint(), static_cast<uint32_t>(def_->text_fields().size()),
                       static_cast<uint32_t>(def_->numeric_fields().size()), Segment::Checksum::kWrittenByUs);
}

Status SearchIndexImpl::ApplyBatch(std::span<const DocChange> batch, uint64_t through_etag,
                                   std::vector<IndexError>& errors) {
  // The last change of each id wins; earlier ones in the batch are moot.
  std::unordered_map<std::string_view, size_t> last;
  last.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) last[batch[i].id] = i;
  if (builder_)
    builder_->Reset();
  else
    builder_ = std::make_unique<SegmentBuilder>(static_cast<uint32_t>(def_->text_fields().size()),
                                                static_cast<uint32_t>(def_->numeric_fields().size()));
  SegmentBuilder& b = *builder_;
  const size_t errors_before = errors.size();
  for (size_t i = 0; i < batch.size(); ++i) {
    if (last[batch[i].id] != i || batch[i].deleted) continue;
    Status st = AddDocument(b, *def_, batch[i], errors);
    if (!st.ok()) return st;
  }
  if (before_commit_ && errors.size() > errors_before)
    before_commit_(std::span<const IndexError>(errors).subspan(errors_before));
  uint64_t new_id = 0;
  std::shared_ptr<const Segment> seg;
  if (b.doc_count() > 0) {
    new_id = next_segment_id_++;
    auto written = WriteSegment(b, new_id, image_);
    if (!written.ok()) return written.status();
    seg = std::move(written).value();
  }
  TrimBuilder(BacklogBuilderBytes());
  std::vector<uint64_t> dropped;
  {
    std::lock_guard<std::mutex> l(commit_mu_);
    auto cur = Current();
    // Deletes: the previous version of every id in the batch, wherever the
    // merges have moved it by now.
    std::unordered_map<uint64_t, std::vector<uint32_t>> dels;
    for (const auto& [id, i] : last) {
      // At most one segment has it live; the newest segments first.
      for (size_t k = cur->segments.size(); k-- > 0;) {
        const SegmentState& s = cur->segments[k];
        const std::optional<uint32_t> doc = s.segment->FindId(id);
        if (doc && !roaring_bitmap_contains(s.deleted.get(), *doc)) {
          dels[s.id].push_back(*doc);
          break;
        }
      }
    }
    auto next = std::make_shared<Snapshot>(*cur);
    next->etag = std::max(cur->etag, through_etag);
    for (auto& s : next->segments) {
      auto it = dels.find(s.id);
      if (it == dels.end()) continue;
      Bitmap del(roaring_bitmap_copy(s.deleted.get()));
      roaring_bitmap_add_many(del.get(), it->second.size(), it->second.data());
      s = MakeState(s.id, s.segment, std::move(del));
    }
    if (seg) next->segments.push_back(MakeState(new_id, seg, NewBitmap()));
    // Fully deleted segments leave the manifest.
    for (const auto& s : next->segments)
      if (s.live() == 0) dropped.push_back(s.id);
    std::erase_if(next->segments, [](const SegmentState& s) { return s.live() == 0; });
    Recount(*next);
    Status st = WriteManifest(*next);
    if (!st.ok()) {
      if (seg) Unlink(new_id);
      return st;
    }
    Publish(std::move(next));
  }
  for (uint64_t id : dropped) Unlink(id);  // mapped readers (and a merge reading it) keep their pages
  RequestMerge();
  return Status::Ok();
}

void SearchIndexImpl::StartMerges() {
  {
    std::lock_guard<std::mutex> l(merge_mu_);
    stop_merges_ = false;
    merge_wanted_ = true;
  }
  merge_thread_ = std::thread([this] { MergeLoop(); });
}

void SearchIndexImpl::StopMerges() {
  {
    std::lock_guard<std::mutex> l(merge_mu_);
    stop_merges_ = true;
  }
  merge_cv_.notify_all();
  if (merge_thread_.joinable()) merge_thread_.join();
}

void SearchIndexImpl::RequestMerge() {
  {
    std::lock_guard<std::mutex> l(merge_mu_);
    merge_wanted_ = true;
  }
  merge_cv_.notify_all();
}

void SearchIndexImpl::WaitForMerges() {
  std::unique_lock<std::mutex> l(merge_mu_);
  merge_cv_.wait(l, [&] { return stop_merges_ || (!merge_wanted_ && !merging_); });
}

void SearchIndexImpl::MergeLoop() {
  MarkBackgroundThread();
  std::unique_lock<std::mutex> l(merge_mu_);
  for (;;) {
    merge_cv_.wait(l, [&] { return merge_wanted_ || stop_merges_; });
    if (stop_merges_) return;
    merge_wanted_ = false;
    merging_ = true;
    l.unlock();
    try {
      (void)MergeUntilBalanced();  // a failed or cancelled merge only leaves more segments
    } catch (...) {
      RecordInternalError(FaultSite::kSegmentMerge, CurrentExceptionText());
    }
    l.lock();
    merging_ = false;
    merge_cv_.notify_all();
  }
}

Status SearchIndexImpl::MergeUntilBalanced() {
  for (int round = 0; round < 64 && !stop_merges_; ++round) {
    auto cur = Current();
    const auto& segs = cur->segments;
    std::vector<SegmentSize> sizes;
    for (const auto& s : segs) sizes.push_back(SegmentSize{s.segment->doc_count(), s.deleted_count});
    const std::vector<size_t> pick = PickMerge(sizes);
    if (pick.empty()) return Status::Ok();
    Status st = Merge(cur, pick);
    if (!st.ok()) return st;
  }
  // 64 merges and still unbalanced (batches came faster than merges, as in
  // a slow build): go round again rather than leave the rest undone.
  if (!stop_merges_) RequestMerge();
  return Status::Ok();
}

// Merges base->segments[which] (their live documents as of `base`) into
// one segment without locks, then commits it against the then-current
// snapshot: documents deleted or updated in the sources meanwhile are
// deleted in the merged segment too.
Status SearchIndexImpl::Merge(const std::shared_ptr<const Snapshot>& base, const std::vector<size_t>& which) {
  const auto nt = static_cast<uint32_t>(def_->text_fields().size());
  const auto nn = static_cast<uint32_t>(def_->numeric_fields().size());
  const Status cancelled = Status::ShuttingDown("merge cancelled");
  std::vector<MergeInput> inputs;
  uint64_t live = 0;
  // The merger's buffers (segment_merger.h): two 1 MiB write buffers, the
  // id filter, the remaps of inputs with deletes, a long list's bitmap.
  uint64_t held = uint64_t{3} << 20;
  // The merge reads its inputs through mappings of its own, read ahead:
  // the queries' mappings read a page per fault (Segment::Open), which
  // would make a pass over a cold input a read per 4 KiB. An input whose
  // file is already gone (the worker drops a segment once every document
  // of it is deleted) is read through the queries' mapping.
  std::vector<std::shared_ptr<const Segment>> streamed;
  for (size_t k : which) {
    const SegmentState& s = base->segments[k];
    auto own = s.segment->MapAgain(dir_ + "/" + SegmentName(s.id), ReadAdvice::kSequential);
    const Segment* read = s.segment.get();
    if (own.ok()) {
      streamed.push_back(std::move(own).value());
      read = streamed.back().get();
      held += read->memory_bytes();
    }
    inputs.push_back(MergeInput{read, s.deleted.get()});
    live += s.live();
    if (s.deleted_count > 0) held += uint64_t{s.segment->doc_count()} * 3 / 16 + 64;
  }
  const uint64_t new_id = next_segment_id_++;
  std::shared_ptr<const Segment> merged;
  std::vector<DocRemap> remap;  // where each source's documents went (for the deletes made meanwhile)
  if (live > 0) {
    merge_bytes_ = held + live * 10 / 8 + live / 8;
    struct Done {
      std::atomic<uint64_t>& bytes;
      ~Done() { bytes = 0; }
    } done{merge_bytes_};
    auto written =
        MergeSegments(inputs, dir_, SegmentName(new_id), def_->Fingerprint(), nt, nn, stop_merges_, &remap);
    if (!written.ok()) return written.status();
    auto seg = Segment::Open(dir_ + "/" + SegmentName(new_id), def_->Fingerprint(), nt, nn, Segment::Checksum::kWrittenByUs);
    if (!seg.ok()) {
      Unlink(new_id);
      return seg.status();
    }
    merged = std::move(seg).value();
  }
  {
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> l(merge_hook_mu);
      hook = merge_hook;
    }
    if (hook) hook();
  }
  if (stop_merges_) {
    if (merged) Unlink(new_id);
    return cancelled;
  }
  std::vector<uint64_t> removed;
  bool kept = false;
  {
    std::lock_guard<std::mutex> l(commit_mu_);
    auto now = Current();
    auto next = std::make_shared<Snapshot>(*now);
    Bitmap del = NewBitmap();
    for (size_t k = 0; k < which.size(); ++k) {
      const SegmentState& was = base->segments[which[k]];
      auto it = std::find_if(next->segments.begin(), next->segments.end(),
                             [&](const SegmentState& s) { return s.id == was.id; });
      if (!merged) {  // nothing of the sources was live: they just go
        if (it != next->segments.end()) {
          removed.push_back(was.id);
          next->segments.erase(it);
        }
        continue;
      }
      if (it == next->segments.end()) {
        // Every document of it was deleted since `base` (fully deleted
        // segments leave the snapshot); its merged documents are consecutive.
        const uint64_t was_live = remap[k].live_count();
        if (was_live > 0) roaring_bitmap_add_range(del.get(), remap[k].base(), remap[k].base() + was_live);
        continue;
      }
      // Its deleted bitmap only grows: map every delete that is not yet
      // purged (those made while this merge ran) to the merged numbering.
      roaring_uint32_iterator_t di;
      roaring_init_iterator(it->deleted.get(), &di);
      for (; di.has_value; roaring_advance_uint32_iterator(&di))
        if (di.current_value < was.segment->doc_count() && remap[k].live(di.current_value))
          roaring_bitmap_add(del.get(), remap[k](di.current_value));
      removed.push_back(was.id);
      next->segments.erase(it);
    }
    if (merged) {
      SegmentState st = MakeState(new_id, merged, std::move(del));
      kept = st.live() > 0;
      if (kept) next->segments.push_back(std::move(st));
    }
    Recount(*next);
    Status st = WriteManifest(*next);
    if (!st.ok()) {
      if (merged) Unlink(new_id);
      return st;
    }
    Publish(std::move(next));
  }
  if (merged && !kept) Unlink(new_id);     // everything in it was deleted meanwhile
  for (uint64_t id : removed) Unlink(id);  // mapped readers keep their pages
  return Status::Ok();
}

// Keeps the builder and image buffer for the next batch unless they grew
// beyond `cap`: the image goes first, then the builder's per-batch buffers
// (token logs, scratch), and only then its dictionary, whose loss costs
// the next batch a sort of every term.
void SearchIndexImpl::TrimBuilder(size_t cap) {
  if (!builder_) return;
  size_t retained = builder_->RetainedBytes() + image_.capacity();
  if (retained > cap) {
    image_ = std::string();
    retained = builder_->RetainedBytes();
  }
  if (retained > cap) {
    builder_->ReleaseBuffers();
    retained = builder_->RetainedBytes();
  }
  if (retained > cap) builder_.reset();
  builder_bytes_ = builder_ ? retained : 0;
}

void SearchIndexImpl::Idle() { TrimBuilder(IdleBuilderBytes()); }

// A field-sorted walk's page reads the snapshot its walk pinned (walks.h).
Result<SearchResult> SearchIndexImpl::Search(const SearchRequest& request) const {
  const uint64_t generation = walks_.generation();  // before the snapshot: a Clear after it refuses the pin
  const std::shared_ptr<const Snapshot> now = Current();
  std::shared_ptr<const Snapshot> snap = now;
  std::string from;
  if (request.search_after) {
    from = WalkFrom(*now, request);
    std::shared_ptr<const Snapshot> pinned = from.empty() ? nullptr : walks_.Find(from);
    if (pinned) snap = std::move(pinned);
    else from.clear();
  }
  SearchWalk walk;
  if (snap != now) walk.now = now.get();
  auto result = RunSearch(*snap, request, &walk);
  if (result.ok() && !walk.next.empty())
    walks_.Pin(walk.next, snap, generation, request.search_after.has_value(), from);
  return result;
}

Status SearchIndexImpl::Clear() {
  StopMerges();  // a merge in flight is cancelled; it must not commit into the empty index
  Status st;
  {
    std::lock_guard<std::mutex> l(commit_mu_);
    auto empty = EmptySnapshot();
    st = WriteManifest(*empty);
    if (st.ok()) {
      builder_.reset();
      image_ = std::string();
      builder_bytes_ = 0;
      Publish(empty);
      RemoveUnreferenced(*empty);
    }
  }
  walks_.Clear();  // no walk goes on over what was cleared
  StartMerges();
  return st;
}

}  // namespace

void WaitForMerges(SearchIndex& index) { static_cast<SearchIndexImpl&>(index).WaitForMerges(); }

std::shared_ptr<const Snapshot> CurrentSnapshot(const SearchIndex& index) {
  return static_cast<const SearchIndexImpl&>(index).Current();
}

void SetMergeCommitHookForTesting(std::function<void()> hook) {
  std::lock_guard<std::mutex> l(merge_hook_mu);
  merge_hook = std::move(hook);
}

Status SearchIndex::Verify(const std::string& dir, const SearchDefinition& definition, const std::string& label,
                           VerifyReport& report) {
  const auto* def = dynamic_cast<const SearchDefinitionImpl*>(&definition);
  if (!def) return Status::InvalidArgument("not a search definition compiled by SearchDefinition::Compile");
  std::string bytes;
  Status st = ReadWholeFile(dir + "/" + kManifestName, &bytes);
  if (st.code() == StatusCode::kNotFound) {
    if (AnySegmentFile(dir)) report.damaged.push_back(label + ": MANIFEST is missing beside segment files");
    else report.sound.push_back(label + ": empty (nothing indexed yet)");
    return Status::Ok();
  }
  auto m = st.ok() ? DecodeManifest(bytes) : Result<DecodedManifest>(st);
  if (m.ok() && m->fingerprint != def->Fingerprint()) m = Status::Corruption("MANIFEST: " + std::string(kOutdatedDefinition));
  if (!m.ok()) {
    if (IsOutdated(m.status())) report.notes.push_back(label + ": " + m.status().message() + "; the server rebuilds it");
    else report.damaged.push_back(label + ": " + m.status().ToString());
    return Status::Ok();
  }
  const auto nt = static_cast<uint32_t>(def->text_fields().size());
  const auto nn = static_cast<uint32_t>(def->numeric_fields().size());
  uint64_t docs = 0, bytes_checked = bytes.size();
  bool damaged = false;
  for (const auto& entry : m->segments) {
    auto seg = Segment::Open(dir + "/" + SegmentName(entry.id), def->Fingerprint(), nt, nn, Segment::Checksum::kVerify);
    if (!seg.ok()) {
      // A segment of another definition than its MANIFEST's (which matched
      // the definition above) is not outdated: a MANIFEST names only
      // segments written for it.
      if (seg.status().message().ends_with(kOutdatedDefinition))
        report.damaged.push_back(label + ": " + SegmentName(entry.id) +
                                 " was written for another definition than its MANIFEST's");
      else if (IsOutdated(seg.status()))
        report.notes.push_back(label + ": " + seg.status().message() + "; the server rebuilds it");
      else
        report.damaged.push_back(label + ": " + seg.status().ToString());
      damaged = true;
      continue;
    }
    if ((*seg)->doc_count() != entry.doc_count) {
      report.damaged.push_back(label + ": " + SegmentName(entry.id) + " holds " + std::to_string((*seg)->doc_count()) +
                               " documents, the MANIFEST says " + std::to_string(entry.doc_count));
      damaged = true;
    }
    docs += entry.doc_count;
    bytes_checked += (*seg)->file_bytes();
  }
  if (!damaged)
    report.sound.push_back(label + ": MANIFEST and " + std::to_string(m->segments.size()) + " segments (" +
                           std::to_string(docs) + " documents, " + std::to_string(bytes_checked) +
                           " bytes) pass their checksums, through etag " + std::to_string(m->etag));
  return Status::Ok();
}

Result<std::unique_ptr<SearchIndex>> SearchIndex::Open(const std::string& dir, std::shared_ptr<const SearchDefinition> definition) {
  auto def = std::dynamic_pointer_cast<const SearchDefinitionImpl>(definition);
  if (!def) return Status::InvalidArgument("not a search definition compiled by SearchDefinition::Compile");
  auto idx = std::make_unique<SearchIndexImpl>(dir, std::move(def));
  Status st = idx->Init();
  if (!st.ok()) return st;
  return std::unique_ptr<SearchIndex>(std::move(idx));
}

}  // namespace corvid::postings
