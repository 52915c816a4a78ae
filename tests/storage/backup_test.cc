// The backup file (backup_format.h): written, verified, restored, and
// refused whole when any byte is wrong or missing; the store's snapshot
// copy (exactly its etag, under concurrent writes); tombstone purging.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "storage/backup_format.h"
#include "store_test_util.h"

namespace corvid::storage {
namespace {

using testing::Bulk;
using testing::Del;
using testing::OpenStore;
using testing::Put;
using testing::Single;
using testing::TempDir;
namespace fs = std::filesystem;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "prefix" + number (GCC 12 warns, wrongly, about operator+ on a literal).
std::string Name(std::string prefix, long n) { return prefix.append(std::to_string(n)); }

void WriteAll(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// Parts of every interesting size: empty, one byte, a chunk and a bit
// more, several chunks.
std::map<std::string, std::string> SampleParts() {
  std::mt19937_64 rng(7);
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = char(rng());
    return s;
  };
  return {{"store/data.mdb", random_bytes(3 * BackupWriter::kPiece + 12345)},
          {"indexes/a/current", "v1\n"},
          {"indexes/a/v1/definition.json", "{\"type\":\"search\"}"},
          {"indexes/a/v1/state/empty", ""},
          {"indexes/a/v1/state/one", "x"},
          {"indexes/b.c-d_e/v1/state/MANIFEST", random_bytes(BackupWriter::kPiece - 16)}};
}

std::string WriteBackup(const std::map<std::string, std::string>& parts, uint64_t etag, size_t write_piece = 100000) {
  std::string file;
  size_t pieces = 0;
  BackupWriter w(
      [&](std::string&& piece) {
        CHECK(piece.size() <= BackupWriter::kPiece + 64);
        ++pieces;
        file.append(piece);
        return Status::Ok();
      },
      etag, 0);
  for (const auto& [name, bytes] : parts) {
    REQUIRE(w.BeginPart(name).ok());
    for (size_t at = 0; at < bytes.size(); at += write_piece)
      REQUIRE(w.Write(std::string_view(bytes).substr(at, write_piece)).ok());
    REQUIRE(w.EndPart().ok());
  }
  REQUIRE(w.Finish().ok());
  CHECK(w.bytes_written() == file.size());
  CHECK(pieces > 1);
  return file;
}

TEST_CASE("a backup verifies and restores every part exactly", "[backup]") {
  TempDir dir;
  fs::create_directories(dir.path);
  const auto parts = SampleParts();
  const fs::path file = dir.path / "b.backup";
  WriteAll(file, WriteBackup(parts, 4242));
  auto info = VerifyBackup(file.string());
  INFO(info.status().ToString());
  REQUIRE(info.ok());
  CHECK(info->etag == 4242);
  CHECK(info->version == kBackupVersion);
  REQUIRE(info->parts.size() == parts.size());
  auto restored = RestoreBackup(file.string(), (dir.path / "data").string());
  INFO(restored.status().ToString());
  REQUIRE(restored.ok());
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.path / "data"))
    if (e.is_regular_file()) ++files;
  CHECK(files == parts.size());
  for (const auto& [name, bytes] : parts) CHECK(ReadAll(dir.path / "data" / name) == bytes);
  // Into an existing empty directory too; never into a non-empty one.
  fs::create_directories(dir.path / "empty");
  CHECK(RestoreBackup(file.string(), (dir.path / "empty").string()).ok());
  auto again = RestoreBackup(file.string(), (dir.path / "data").string());
  REQUIRE_FALSE(again.ok());
  CHECK(again.status().code() == StatusCode::kInvalidArgument);
  CHECK(ReadAll(dir.path / "data" / "indexes/a/current") == "v1\n");
}

TEST_CASE("any flipped, missing or extra byte fails the whole backup, and nothing is written", "[backup][heavy]") {
  TempDir dir;
  fs::create_directories(dir.path);
  const std::string good = WriteBackup(SampleParts(), 9);
  const fs::path file = dir.path / "bad.backup";
  std::vector<size_t> offsets;
  for (size_t i = 0; i < 96; ++i) offsets.push_back(i);
  for (size_t i = good.size() - 96; i < good.size(); ++i) offsets.push_back(i);
  for (size_t i = 96; i < good.size() - 96; i += 4099) offsets.push_back(i);
  for (size_t off : offsets) {
    std::string bad = good;
    bad[off] = char(bad[off] ^ 0x10);
    WriteAll(file, bad);
    INFO("byte " << off << " of " << good.size() << " flipped");
    CHECK_FALSE(VerifyBackup(file.string()).ok());
  }
  for (size_t len : {size_t{0}, size_t{7}, size_t{27}, size_t{28}, good.size() / 3, good.size() / 2, good.size() - 17,
                     good.size() - 8, good.size() - 1}) {
    WriteAll(file, std::string_view(good).substr(0, len));
    INFO("cut to " << len << " bytes");
    auto r = RestoreBackup(file.string(), (dir.path / "out").string());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kCorruption);
    CHECK_FALSE(fs::exists(dir.path / "out"));
  }
  WriteAll(file, good + "x");
  CHECK_FALSE(VerifyBackup(file.string()).ok());
  WriteAll(file, good);
  CHECK(VerifyBackup(file.string()).ok());
}

TEST_CASE("part names cannot leave the data directory", "[backup]") {
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "a/", ".", "a/./b", "a b", "a\\b"}) {
    INFO(bad);
    CHECK_FALSE(ValidBackupPartName(bad));
    BackupWriter w([](std::string&&) { return Status::Ok(); }, 1, 0);
    CHECK_FALSE(w.BeginPart(bad).ok());
  }
  CHECK(ValidBackupPartName("indexes/x.y-z_1/v1/state/seg-0001.cvs"));
}

TEST_CASE("a store's snapshot copy holds exactly its etag while writes go on", "[backup]") {
  TempDir dir;
  auto store = OpenStore(dir.path / "src");
  for (int i = 0; i < 2000; ++i) REQUIRE(Single(*store, Put("c", Name("seed", i), "{\"n\":1}")).status.ok());
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<uint64_t, std::pair<std::string, std::string>> acked;  // etag -> (id, body or "" for a delete)
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      const std::string id = Name("w", i % 500);
      const bool del = i % 7 == 3;
      const std::string body = "{\"i\":" + std::to_string(i) + "}";
      WriteResult r = Bulk(*store, {del ? Del("c", id) : Put("c", id, body)});
      if (!r.status.ok()) continue;
      std::lock_guard lock(mu);
      acked[r.last_etag] = {id, del ? "" : body};
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto copy = store->BeginSnapshotCopy();
  REQUIRE(copy.ok());
  const uint64_t etag = (*copy)->etag();
  fs::create_directories(dir.path / "copy");
  {
    std::ofstream out(dir.path / "copy" / "data.mdb", std::ios::binary);
    std::string buf(1 << 16, '\0');
    for (;;) {
      auto n = (*copy)->Read(buf.data(), buf.size());
      REQUIRE(n.ok());
      if (*n == 0) break;
      out.write(buf.data(), std::streamsize(*n));
    }
  }
  copy->reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  stop = true;
  writer.join();
  REQUIRE(store->LastEtag() > etag);  // writes went on past the snapshot
  auto copied = OpenStore(dir.path / "copy");
  CHECK(copied->LastEtag() == etag);
  // Every acknowledged write up to the etag, and none after it.
  std::map<std::string, std::pair<uint64_t, std::string>> expected;
  for (const auto& [e, w] : acked)
    if (e <= etag) expected[w.first] = {e, w.second};
  for (const auto& [id, want] : expected) {
    auto got = copied->Get("c", id);
    INFO(id << " at etag " << want.first);
    if (want.second.empty()) {
      CHECK_FALSE(got.ok());
    } else {
      REQUIRE(got.ok());
      CHECK(got->etag == want.first);
      CHECK(got->body == want.second);
    }
  }
  // Dropping a copy half read ends its thread (the copy fails with EPIPE).
  auto half = store->BeginSnapshotCopy();
  REQUIRE(half.ok());
  std::string buf(4096, '\0');
  CHECK((*half)->Read(buf.data(), buf.size()).ok());
  half->reset();
}

TEST_CASE("tombstones are purged through an etag, resumably, and the counts follow", "[backup][purge]") {
  TempDir dir;
  auto store = OpenStore(dir.path);
  std::vector<WriteOp> puts;
  for (int i = 0; i < 100; ++i) puts.push_back(Put("c", Name("d", i), "{\"i\":" + std::to_string(i) + "}"));
  REQUIRE(Bulk(*store, std::move(puts)).status.ok());
  std::map<std::string, uint64_t> deleted;  // id -> tombstone etag
  for (int i = 0; i < 100; i += 2) {
    WriteResult r = Single(*store, Del("c", Name("d", i)));
    REQUIRE(r.status.ok());
    deleted[Name("d", i)] = r.last_etag;
  }
  REQUIRE(Bulk(*store, {Del("c", "never-seen")}).status.ok());  // a tombstone of an id never written
  CHECK(store->Collection("c")->tombstones == 51);
  CHECK(store->PurgedMax() == 0);
  const uint64_t mid = deleted["d50"];
  auto r = store->PurgeTombstones(mid, 0, /*batch=*/7);  // several transactions
  REQUIRE(r.ok());
  CHECK(r->purged == 26);  // d0, d2, ... d50
  CHECK(r->purged_max == mid);
  CHECK(store->PurgedMax() == mid);
  CHECK(store->Collection("c")->tombstones == 25);
  CHECK(store->Collection("c")->count == 50);
  auto changes = store->ChangesSince(0, 1000);
  REQUIRE(changes.ok());
  size_t tombstones = 0;
  for (const auto& c : *changes) {
    if (c.deleted) {
      ++tombstones;
      CHECK(c.etag > mid);
    }
  }
  CHECK(tombstones == 25);
  CHECK(changes->size() == 75);
  CHECK_FALSE(store->Get("c", "d0").ok());
  CHECK(store->Get("c", "d1").ok());
  // A later delete of an older document is newer than the scan: purged next time.
  const uint64_t late = Single(*store, Del("c", "d1")).last_etag;
  r = store->PurgeTombstones(store->LastEtag(), 1000);
  REQUIRE(r.ok());
  CHECK(r->purged == 26);
  CHECK(store->Collection("c")->tombstones == 0);
  CHECK(store->PurgedMax() == late);
  // A deleted id written again is a live document like any other.
  REQUIRE(Single(*store, Put("c", "d0", "{\"back\":true}")).status.ok());
  CHECK(store->Get("c", "d0")->body == "{\"back\":true}");
  // The etag clock: the purge at time 1000 sampled the last etag then.
  CHECK(*store->EtagAtTime(999) == 0);
  CHECK(*store->EtagAtTime(1000) == late);
  CHECK(*store->EtagAtTime(5000) == late);
  // The clock keeps the newest sample before the retention, and those since.
  const uint64_t now_etag = store->LastEtag();  // d0 came back after `late`
  REQUIRE(store->PurgeTombstones(0, 2000).ok());
  REQUIRE(store->PurgeTombstones(0, 3000).ok());
  REQUIRE(store->PurgeTombstones(0, 4000, 10000, /*clock_keep_from=*/3500).ok());
  CHECK(*store->EtagAtTime(3600) == now_etag);  // the 3000 sample, kept
  CHECK(*store->EtagAtTime(2500) == 0);     // 1000 and 2000 are gone
  CHECK(*store->EtagAtTime(1500) == 0);
  CHECK(*store->EtagAtTime(4000) == now_etag);
  // All of it survives a restart.
  const uint64_t last = store->LastEtag();
  store.reset();
  store = OpenStore(dir.path);
  CHECK(store->PurgedMax() == late);
  CHECK(store->LastEtag() == last);
  CHECK(store->Collection("c")->tombstones == 0);
  CHECK(store->Collection("c")->count == 50);
  CHECK(*store->EtagAtTime(3000) == now_etag);
  CHECK(*store->EtagAtTime(2999) == 0);
}

}  // namespace
}  // namespace corvid::storage
