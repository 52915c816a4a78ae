// Crash safety: a child process indexes batches (its background merge
// thread merging meanwhile, so kills land mid-merge too) and reports
// each acknowledged etag through a pipe; the parent kills it with SIGKILL at
// a random moment, reopens the index, and checks that nothing acknowledged
// is missing and that results equal a fresh rebuild through the recovered
// etag. Repeated, continuing from the recovered state each time.
//
// The child is this test binary again (fork, then exec of the hidden test
// case below): the parent has threads by then (index workers' merge
// threads, the searcher's helpers), and a forked copy of a multi-threaded
// process may only exec.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

extern char** environ;

#include "postings/search_index.h"
#include "tests/postings/test_util.h"

namespace corvid::postings {
namespace {

using testing::TempDir;

constexpr const char* kDef = R"({"type":"search","collection":"c","fields":{"t":{"analyzer":"english"},"n":{"type":"number"}}})";
constexpr size_t kBatch = 40;

// The change with etag e: deterministic.
DocChange ChangeFor(uint64_t e, std::string& id, std::string& json) {
  std::mt19937 rng(static_cast<uint32_t>(e));
  id = std::string("d").append(std::to_string(rng() % 300));
  json = "{\"t\": \"";
  for (int i = 0, n = 3 + rng() % 8; i < n; ++i) json += (i ? " w" : "w") + std::to_string(rng() % 40);
  json += "\", \"n\": " + std::to_string(rng() % 100) + "}";
  DocChange c;
  c.etag = e;
  c.id = id;
  c.deleted = e % 7 == 0;
  if (!c.deleted) c.json = json;
  return c;
}

Status ApplyRange(SearchIndex& idx, uint64_t from, uint64_t to, int ack_fd) {
  std::vector<std::string> ids(kBatch), jsons(kBatch);
  std::vector<DocChange> batch;
  std::vector<IndexError> errors;
  for (uint64_t e = from; e <= to;) {
    batch.clear();
    for (size_t i = 0; i < kBatch && e <= to; ++i, ++e) batch.push_back(ChangeFor(e, ids[i], jsons[i]));
    Status st = idx.ApplyBatch(batch, batch.back().etag, errors);
    if (!st.ok()) return st;
    if (ack_fd >= 0) {
      uint64_t acked = batch.back().etag;
      if (write(ack_fd, &acked, sizeof acked) != sizeof acked) return Status::IOError("pipe");
    }
  }
  return Status::Ok();
}

std::string Results(SearchIndex& idx) {
  std::string out;
  for (const char* q : {"*", "w1", "w2 OR w3 OR w17", "\"w1 w2\"~3", "n:[10 TO 50] AND w5", "w1*"}) {
    SearchRequest r;
    r.q = q;
    r.limit = 1000;
    auto res = idx.Search(r);
    REQUIRE(res.ok());
    out += std::to_string(res->total) + res->hits_json + "\n";
  }
  return out;
}

TEST_CASE("kill -9 during indexing and merging loses nothing acknowledged", "[postings]") {
  auto def = std::move(SearchDefinition::Compile(kDef)).value();
  TempDir dir;
  std::mt19937 rng(7);
  uint64_t acked = 0;
  for (int round = 0; round < 6; ++round) {
    uint64_t start;
    {
      auto idx = std::move(SearchIndex::Open(dir.path(), def)).value();
      start = idx->LastAppliedEtag();
    }
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    // Everything the child needs is built before fork: after it, only exec.
    std::vector<std::string> env_strings = {std::string("CORVID_CRASH_CHILD_DIR=") + dir.path(),
                                            "CORVID_CRASH_CHILD_START=" + std::to_string(start),
                                            "CORVID_CRASH_CHILD_FD=" + std::to_string(fds[1])};
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    char arg0[] = "postings_tests", arg1[] = "crash child (run by the kill -9 test)";
    char* argv[] = {arg0, arg1, nullptr};
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      execve("/proc/self/exe", argv, envp.data());
      _exit(4);
    }
    close(fds[1]);
    // Kill only after the child acknowledged a batch (on a loaded machine
    // a fixed delay may end it before its first commit), then at a random
    // point of what follows.
    uint64_t e;
    if (read(fds[0], &e, sizeof e) == sizeof e) acked = std::max(acked, e);
    usleep(rng() % 300000);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    while (read(fds[0], &e, sizeof e) == sizeof e) acked = std::max(acked, e);
    close(fds[0]);
    auto idx = std::move(SearchIndex::Open(dir.path(), def)).value();
    uint64_t recovered = idx->LastAppliedEtag();
    INFO("round " << round << " acked " << acked << " recovered " << recovered);
    CHECK(recovered >= acked);
    CHECK(recovered > start);  // the child made progress
    TempDir fresh_dir;
    auto fresh = std::move(SearchIndex::Open(fresh_dir.path(), def)).value();
    REQUIRE(ApplyRange(*fresh, 1, recovered, -1).ok());
    CHECK(fresh->LiveDocuments() == idx->LiveDocuments());
    CHECK(Results(*idx) == Results(*fresh));
  }
}

// The child of the test above: indexes from the given etag on, reporting
// each acknowledged batch on the given pipe, until it is killed. Hidden
// ("[.]"); without its environment it does nothing.
TEST_CASE("crash child (run by the kill -9 test)", "[.]") {
  const char* dir = std::getenv("CORVID_CRASH_CHILD_DIR");
  const char* start = std::getenv("CORVID_CRASH_CHILD_START");
  const char* fd = std::getenv("CORVID_CRASH_CHILD_FD");
  if (dir == nullptr || start == nullptr || fd == nullptr) return;
  auto def = std::move(SearchDefinition::Compile(kDef)).value();
  auto idx = SearchIndex::Open(dir, def);
  if (!idx.ok()) _exit(2);
  const uint64_t from = std::stoull(start) + 1;
  Status st = ApplyRange(**idx, from, from + 99999, std::atoi(fd));
  _exit(st.ok() ? 0 : 3);
}

}  // namespace
}  // namespace corvid::postings
