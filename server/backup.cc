// GET /admin/backup: one consistent snapshot of the whole server, streamed
// in the backup format (storage/backup_format.h) while writes and queries
// go on. The order makes it consistent: every index's state is taken
// first (each at an etag no later than the store's then), then the store's
// snapshot (its etag exactly, writers held off for the instant it is
// taken), so the store holds every change every index has seen, and an
// index restored from the file resumes from its own etag.
#include <string>
#include <thread>
#include <vector>

#include "common/faults.h"
#include "common/log.h"
#include "server/router_internal.h"
#include "storage/backup_format.h"

namespace corvid::server {

using detail::FromStatus;

namespace {

// The parts of one index: `current` names its one version, v1.
Status WriteIndex(storage::BackupWriter& w, const indexing::IndexBackup& index) {
  const std::string base = "indexes/" + index.name + "/";
  auto small = [&](const std::string& name, std::string_view bytes) {
    if (Status s = w.BeginPart(name); !s.ok()) return s;
    if (Status s = w.Write(bytes); !s.ok()) return s;
    return w.EndPart();
  };
  if (Status s = small(base + "current", "v1\n"); !s.ok()) return s;
  if (Status s = small(base + "v1/definition.json", index.definition_json); !s.ok()) return s;
  for (const auto& file : index.state.files) {
    if (Status s = w.BeginPart(base + "v1/state/" + file.name); !s.ok()) return s;
    if (Status s = file.write([&](std::string_view bytes) { return w.Write(bytes); }); !s.ok()) return s;
    if (Status s = w.EndPart(); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace

void Router::State::Backup(Reply& reply) {
  auto channel = std::make_shared<PieceChannel>();
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard lock(jobs_mu);
  if (jobs_stopping) return reply(ErrorResponse(503, "shutting_down", "the server is shutting down"));
  // Reap the threads of backups that have ended.
  std::erase_if(jobs, [](Job& j) {
    if (!j.done->load()) return false;
    j.thread.join();
    return true;
  });
  std::thread thread([this, channel, done, reply = std::move(reply)]() mutable {
    struct MarkDone {
      std::atomic<bool>& d;
      ~MarkDone() { d.store(true); }
    } mark{*done};
    try {
      std::vector<indexing::IndexBackup> indexes;
      if (engine) {
        auto snap = engine->SnapshotIndexes();
        if (!snap.ok()) return reply(FromStatus(snap.status()));
        indexes = std::move(*snap);
      }
      auto copy = store.BeginSnapshotCopy();
      if (!copy.ok()) return reply(FromStatus(copy.status()));
      const uint64_t etag = (*copy)->etag();
      Response head;
      head.content_type = "application/octet-stream";
      head.stream = channel;
      head.headers.emplace_back("Corvid-Backup-Etag", std::to_string(etag));
      head.headers.emplace_back("Content-Disposition",
                                "attachment; filename=\"corvid-" + std::to_string(etag) + ".backup\"");
      reply(std::move(head));

      storage::BackupWriter w([&](std::string&& piece) { return channel->Push(std::move(piece)); }, etag,
                                  (*copy)->log_applied());
      Status s = w.BeginPart("store/data.mdb");
      std::string buf(storage::BackupWriter::kPiece, '\0');
      while (s.ok()) {
        auto n = (*copy)->Read(buf.data(), buf.size());
        if (!n.ok()) s = n.status();
        else if (*n == 0) break;
        else s = w.Write(std::string_view(buf.data(), *n));
      }
      if (s.ok()) s = w.EndPart();
      copy->reset();  // the store's read snapshot goes before the indexes are written
      for (size_t i = 0; s.ok() && i < indexes.size(); ++i) s = WriteIndex(w, indexes[i]);
      if (s.ok()) s = w.Finish();
      if (!s.ok() && !channel->cancelled())
        logging::Error("backup.failed", "streaming a backup failed: " + s.ToString(), {{"etag", etag}});
      channel->Close(std::move(s));
    } catch (...) {
      RecordInternalError(FaultSite::kHttp, "backup: " + CurrentExceptionText());
      channel->Close(Status::Internal("internal error"));
    }
  });
  jobs.push_back(Job{std::move(thread), done, channel});
}

void Router::State::CancelJobs() {
  std::vector<std::shared_ptr<BodyStream>> streams;
  {
    std::lock_guard lock(jobs_mu);
    jobs_stopping = true;
    for (auto& j : jobs)
      if (auto s = j.stream.lock()) streams.push_back(std::move(s));
  }
  for (auto& s : streams) s->Cancel();
}

void Router::State::JoinJobs() {
  CancelJobs();
  std::vector<Job> all;
  {
    std::lock_guard lock(jobs_mu);
    all.swap(jobs);
  }
  for (auto& j : all) j.thread.join();
}

}  // namespace corvid::server
