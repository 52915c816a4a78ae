// W1 (DESIGN.md) in process: MapReduceIndex::ApplyBatch docs/s over 100k and
// 1M generated score documents, a 10% re-index, and the aggregation query
// latency, beside SQLite in the same run (insert the same rows in one
// transaction, then GROUP BY). Medians of repeated runs.
//   mapreduce_bench [--runs N] [--skip-1m] [--dir DIR]
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/machine.h"
#include "mapreduce/mapreduce_index.h"

using namespace corvid;
using namespace corvid::mapreduce;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kBatch = 4096;

const char* kDefinition = R"J({"type":"mapreduce","collection":"scores",
  "map":{"month":"substr(metadata.createdAt, 0, 7)","score":"score"},
  "groupBy":["month"],
  "reduce":{"total":"sum(score)","count":"count()"}})J";

struct Row {
  std::string id, json, date, username;
  int score;
};

// Dates over the 365 days before 2025-01-01 (a fixed "today": reproducible).
std::vector<Row> Generate(size_t n, uint64_t seed, size_t id_offset = 0) {
  std::mt19937_64 rng(seed);
  std::vector<Row> rows(n);
  static constexpr int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};  // 2024
  for (size_t i = 0; i < n; ++i) {
    Row& r = rows[i];
    int doy = int(rng() % 366), m = 0;
    while (doy >= kDays[m]) doy -= kDays[m++];
    char date[16];
    std::snprintf(date, sizeof date, "2024-%02d-%02d", m + 1, doy + 1);
    r.date = date;
    for (int k = 0; k < 6; ++k) r.username.push_back(char('a' + rng() % 26));
    r.score = int(rng() % 5001);
    char id[32];
    std::snprintf(id, sizeof id, "score/%08zu", i + id_offset);
    r.id = id;
    r.json = std::string(R"({"metadata":{"docType":"score","createdAt":")") + r.date + R"("},"username":")" +
             r.username + R"(","score":)" + std::to_string(r.score) + "}";
  }
  return rows;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Indexes `rows` from scratch (or on top of `idx` when given); returns seconds.
double IndexRows(MapReduceIndex& idx, const std::vector<Row>& rows, uint64_t* etag) {
  std::vector<DocChange> batch;
  batch.reserve(kBatch);
  std::vector<IndexError> errors;
  auto t0 = Clock::now();
  for (size_t i = 0; i < rows.size(); i += kBatch) {
    batch.clear();
    for (size_t k = i; k < std::min(rows.size(), i + kBatch); ++k)
      batch.push_back(DocChange{++*etag, rows[k].id, false, rows[k].json});
    Status st = idx.ApplyBatch(batch, *etag, errors);
    if (!st.ok()) {
      std::fprintf(stderr, "ApplyBatch: %s\n", st.ToString().c_str());
      std::exit(1);
    }
  }
  auto t1 = Clock::now();
  if (!errors.empty()) {
    std::fprintf(stderr, "unexpected index errors: %s\n", errors[0].message.c_str());
    std::exit(1);
  }
  return Seconds(t0, t1);
}

std::unique_ptr<MapReduceIndex> Fresh(const std::string& dir) {
  std::filesystem::remove_all(dir);
  auto def = Definition::Compile(kDefinition);
  auto idx = MapReduceIndex::Open(dir, *def);
  if (!idx.ok()) {
    std::fprintf(stderr, "Open: %s\n", idx.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(idx).value();
}

// SQLite peer: one transaction inserting (id, username, month-source date,
// score) rows, then SELECT substr(date,1,7), sum, count GROUP BY 1. On disk
// with synchronous=FULL (durable, as the index is).
double SqlitePeer(const std::vector<Row>& rows, const std::string& path, std::string* result_head) {
  std::filesystem::remove(path);
  std::filesystem::remove(path + "-journal");
  sqlite3* db;
  sqlite3_open(path.c_str(), &db);
  sqlite3_exec(db, "PRAGMA synchronous=FULL; CREATE TABLE scores(id TEXT PRIMARY KEY, username TEXT, createdAt TEXT, score INT)",
               nullptr, nullptr, nullptr);
  auto t0 = Clock::now();
  sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
  sqlite3_stmt* st;
  sqlite3_prepare_v2(db, "INSERT INTO scores VALUES(?,?,?,?)", -1, &st, nullptr);
  for (const Row& r : rows) {
    sqlite3_bind_text(st, 1, r.id.data(), int(r.id.size()), SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r.username.data(), int(r.username.size()), SQLITE_STATIC);
    sqlite3_bind_text(st, 3, r.date.data(), int(r.date.size()), SQLITE_STATIC);
    sqlite3_bind_int(st, 4, r.score);
    sqlite3_step(st);
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_prepare_v2(db, "SELECT substr(createdAt,1,7), sum(score), count(*) FROM scores GROUP BY 1 ORDER BY 1", -1, &st,
                     nullptr);
  std::string head;
  while (sqlite3_step(st) == SQLITE_ROW) {
    if (head.empty())
      head = std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))) + " total=" +
             std::to_string(sqlite3_column_int64(st, 1)) + " count=" + std::to_string(sqlite3_column_int64(st, 2));
  }
  sqlite3_finalize(st);
  auto t1 = Clock::now();
  sqlite3_close(db);
  *result_head = head;
  return Seconds(t0, t1);
}


}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  bool skip_1m = false;
  std::string dir = "/tmp/corvid_mapreduce_bench";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--skip-1m")) skip_1m = true;
    else if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
  }
  std::filesystem::create_directories(dir);
  std::printf("machine: %s; sqlite %s\n", corvid::bench::MachineDescription().c_str(), sqlite3_libversion());
  std::printf("W1: map {month: substr(metadata.createdAt, 0, 7), score}, groupBy [month], reduce {sum, count};"
              " ApplyBatch of %zu docs, durable commit per batch; median of %d runs\n\n", kBatch, runs);

  for (size_t n : {size_t(100000), size_t(1000000)}) {
    if (n == 1000000 && skip_1m) continue;
    int r = n == 1000000 ? std::max(1, runs / 2 + 1) : runs;
    auto rows = Generate(n, 42);
    std::vector<double> idx_rate, sql_rate, reindex_rate, query_us;
    std::string sql_head, idx_head;
    for (int run = 0; run < r; ++run) {
      auto idx = Fresh(dir + "/idx");
      uint64_t etag = 0;
      double s = IndexRows(*idx, rows, &etag);
      idx_rate.push_back(double(n) / s);
      // Query latency: the whole result (12 rows), 2000 times, before the updates
      // (so the first row must equal SQLite's).
      std::vector<double> lat;
      for (int q = 0; q < 2000; ++q) {
        auto t0 = Clock::now();
        auto res = idx->Query({});
        auto t1 = Clock::now();
        if (!res.ok()) return 1;
        lat.push_back(Seconds(t0, t1) * 1e6);
        if (q == 0) idx_head = res->rows_json.substr(0, res->rows_json.find('}') + 1);
      }
      std::sort(lat.begin(), lat.end());
      query_us.push_back(lat[lat.size() * 99 / 100]);
      // 10% of the documents updated (new scores and dates), re-indexed.
      auto upd = Generate(n / 10, 1000 + uint64_t(run));
      for (size_t k = 0; k < upd.size(); ++k) upd[k].id = rows[(k * 7919) % n].id;
      for (auto& u : upd)
        u.json = std::string(R"({"metadata":{"docType":"score","createdAt":")") + u.date + R"("},"username":")" +
                 u.username + R"(","score":)" + std::to_string(u.score) + "}";
      double su = IndexRows(*idx, upd, &etag);
      reindex_rate.push_back(double(upd.size()) / su);
      double sq = SqlitePeer(rows, dir + "/peer.sqlite", &sql_head);
      sql_rate.push_back(double(n) / sq);
      std::printf("  n=%zu run %d: index %.0f docs/s, re-index 10%% %.0f docs/s, query p99 %.1f us, sqlite %.0f docs/s\n",
                  n, run + 1, idx_rate.back(), reindex_rate.back(), query_us.back(), sql_rate.back());
      std::fflush(stdout);
    }
    std::printf("n=%zu: index %.0f docs/s | re-index of 10%% %.0f docs/s | results query p99 %.1f us | "
                "SQLite insert+GROUP BY %.0f docs/s | index/SQLite %.2fx\n",
                n, Median(idx_rate), Median(reindex_rate), Median(query_us), Median(sql_rate),
                Median(idx_rate) / Median(sql_rate));
    std::printf("  first row: index %s ; sqlite %s\n\n", idx_head.c_str(), sql_head.c_str());
  }
  std::filesystem::remove_all(dir);
  return 0;
}
