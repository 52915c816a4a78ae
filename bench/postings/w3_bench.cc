// w3_bench: workload W3 of issue 5 — large documents. Two sets, generated
// deterministically batch by batch (never all in memory: 10k × 300 KB is
// 3 GB of text):
//   one:  N documents with one ~300 KB text field `body`;
//   many: N documents with 50-100 text fields f0..f{K-1} (the definition
//         has f0..f99) totalling 90-900 KB per document.
// Text is words drawn Zipf(s=1) from the 30,000-word English-like
// vocabulary postings_bench uses. Corvid indexes them in-process with
// SearchIndex::ApplyBatch (one thread, durable batches, merges included),
// in batches bounded as the index engine bounds them (EngineOptions:
// ≤ 8192 documents, and documents are added while the batch holds < 64 MiB
// of JSON; the defaults come from indexing::EngineOptions). SQLite FTS5 indexes the same text in the same run, one
// transaction per batch. Figures: documents/s and MB/s of field text (the
// W3 bar: ≥ 50 MB/s of text per worker thread); JSON MB/s beside it.
// docs/s and MB/s are over the time spent in ApplyBatch — the index
// worker thread; merges run on the index's background thread (waited for
// at the end) — or in the FTS5 inserts and commits. "cpu" is the process
// CPU time of indexing, merges included, generation excluded: MB per
// CPU-second is the figure that does not depend on other load.
//
//   w3_bench [--docs 10000] [--set one|many|both] [--runs 3] [--peer-runs 1]
//            [--peers 0|1] [--batch-bytes 67108864] [--batch-docs 8192]
//            [--dir /tmp/w3_bench]
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench/machine.h"
#include "indexing/index_engine.h"  // EngineOptions: the batch bounds
#include "postings/search_index.h"
#include "postings/snapshot.h"  // WaitForMerges

#ifdef CORVID_BENCH_SQLITE
#include <sqlite3.h>
#endif

using Clock = std::chrono::steady_clock;
using namespace corvid;

namespace {

constexpr int kManyFields = 100;
constexpr uint32_t kTableBits = 22;

std::string MakeWord(std::mt19937& rng) {
  static const char* kSyll[] = {"ka", "lo", "mi",  "ne",  "ru", "ta", "shi", "po", "der", "an",
                                "el", "or", "ing", "ter", "st", "ba", "ve",  "qu", "th",  "ion",
                                "al", "ex", "pre", "con", "us", "it", "om",  "ur", "ly",  "ic"};
  std::uniform_int_distribution<int> n(1, 4), s(0, 29);
  std::string w;
  int k = n(rng);
  for (int i = 0; i < k; ++i) w += kSyll[s(rng)];
  return w;
}

// The vocabulary of postings_bench (same seed and generator) and a
// 2^22-slot inverse-CDF table of its Zipf(1) distribution, so a word costs
// one random number (even the rarest word gets >= 10 slots).
struct Vocabulary {
  std::vector<std::string> words;
  std::vector<uint16_t> table;
  Vocabulary() {
    std::mt19937 rng(42);
    std::set<std::string> seen;
    while (words.size() < 30000) {
      std::string x = MakeWord(rng);
      if (seen.insert(x).second) words.push_back(x);
    }
    double total = 0;
    for (size_t i = 0; i < words.size(); ++i) total += 1.0 / (i + 1.0);
    table.resize(size_t{1} << kTableBits);
    double acc = 0;
    size_t slot = 0;
    for (size_t i = 0; i < words.size(); ++i) {
      acc += 1.0 / (i + 1.0);
      size_t end = i + 1 == words.size() ? table.size() : static_cast<size_t>(acc / total * table.size());
      for (; slot < end; ++slot) table[slot] = static_cast<uint16_t>(i);
    }
  }
  // Appends space-separated words to `out` until it has grown by >= bytes.
  void Text(std::mt19937_64& rng, size_t bytes, std::string& out) const {
    const size_t target = out.size() + bytes;
    bool first = true;
    while (out.size() < target) {
      if (!first) out += ' ';
      first = false;
      out += words[table[rng() >> (64 - kTableBits)]];
    }
  }
};

enum class Set { kOne, kMany };

struct GenDoc {
  std::string id, json;
  std::vector<std::pair<uint32_t, uint32_t>> fields;  // (offset, length) of each field's text in json
  size_t text_bytes = 0;
};

// Document i of a set; depends only on (set, i).
void MakeDoc(const Vocabulary& v, Set set, size_t i, GenDoc& d) {
  std::mt19937_64 rng((set == Set::kOne ? 0x3001ULL : 0x3002ULL) << 32 | i);
  d.id = "doc" + std::to_string(i);
  d.json.clear();
  d.fields.clear();
  d.text_bytes = 0;
  auto field = [&](std::string_view name, size_t bytes) {
    d.json += d.fields.empty() ? "{\"" : ",\"";
    d.json += name;
    d.json += "\":\"";
    const size_t start = d.json.size();
    v.Text(rng, bytes, d.json);
    d.fields.emplace_back(static_cast<uint32_t>(start), static_cast<uint32_t>(d.json.size() - start));
    d.text_bytes += d.json.size() - start;
    d.json += '"';
  };
  if (set == Set::kOne) {
    field("body", 300000);
  } else {
    const size_t k = 50 + rng() % 51;             // 50..100 fields
    const size_t total = 90000 + rng() % 810001;  // 90..900 KB
    char name[16];
    for (size_t f = 0; f < k; ++f) {
      snprintf(name, sizeof name, "f%zu", f);
      field(name, total / k);
    }
  }
  d.json += '}';
}

// Fills `batch` with the next documents from `next` as the engine's change
// reader would: while fewer than max_docs and fewer than max_bytes of JSON.
size_t NextBatch(const Vocabulary& v, Set set, size_t& next, size_t ndocs, size_t max_docs, size_t max_bytes,
                 std::vector<GenDoc>& batch) {
  size_t n = 0, bytes = 0;
  while (next < ndocs && n < max_docs && bytes < max_bytes) {
    if (batch.size() <= n) batch.emplace_back();
    MakeDoc(v, set, next++, batch[n]);
    bytes += batch[n].json.size();
    ++n;
  }
  return n;
}

// secs: time in ApplyBatch (Corvid's worker thread; merges run on the
// index's background thread) or in the FTS5 inserts and commits.
// cpu: process CPU time of indexing, merges included, generation excluded.
// merged_secs: wall time from the first batch until merges are done,
// generation included (it overlaps background merges).
struct Run {
  double secs = 0, cpu = 0, merged_secs = 0, text_mb = 0, json_mb = 0, disk_mb = 0;
  double worker_cpu = 0;  // the worker thread's CPU time in ApplyBatch (secs minus waiting, e.g. for fsync)
  size_t docs = 0, batches = 0;
};

double CpuNow(clockid_t clock = CLOCK_PROCESS_CPUTIME_ID) {
  timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

std::string Definition(Set set) {
  if (set == Set::kOne) return R"({"type":"search","collection":"w3one","fields":{"body":{"analyzer":"standard"}}})";
  std::string d = R"({"type":"search","collection":"w3many","fields":{)";
  for (int f = 0; f < kManyFields; ++f) {
    d += f ? ",\"f" : "\"f";
    d += std::to_string(f);
    d += R"(":{"analyzer":"standard"})";
  }
  return d + "}}";
}

bool RunCorvid(const Vocabulary& v, Set set, size_t ndocs, size_t max_docs, size_t max_bytes, const std::string& dir,
               Run& r) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto def = postings::SearchDefinition::Compile(Definition(set));
  if (!def.ok()) {
    fprintf(stderr, "%s\n", def.status().ToString().c_str());
    return false;
  }
  auto idx = postings::SearchIndex::Open(dir, *def);
  if (!idx.ok()) {
    fprintf(stderr, "%s\n", idx.status().ToString().c_str());
    return false;
  }
  std::vector<GenDoc> batch;
  std::vector<DocChange> changes;
  std::vector<IndexError> errors;
  size_t next = 0;
  const double cpu0 = CpuNow();
  const auto start = Clock::now();
  double gen_cpu = 0;
  for (;;) {
    const double g0 = CpuNow(CLOCK_THREAD_CPUTIME_ID);
    const size_t n = NextBatch(v, set, next, ndocs, max_docs, max_bytes, batch);
    gen_cpu += CpuNow(CLOCK_THREAD_CPUTIME_ID) - g0;
    if (n == 0) break;
    changes.clear();
    for (size_t j = 0; j < n; ++j) {
      changes.push_back(DocChange{next - n + j + 1, batch[j].id, false, batch[j].json});
      r.text_mb += batch[j].text_bytes / 1e6;
      r.json_mb += batch[j].json.size() / 1e6;
    }
    const auto t0 = Clock::now();
    const double c0 = CpuNow(CLOCK_THREAD_CPUTIME_ID);
    Status st = (*idx)->ApplyBatch(changes, changes.back().etag, errors);
    r.worker_cpu += CpuNow(CLOCK_THREAD_CPUTIME_ID) - c0;
    r.secs += std::chrono::duration<double>(Clock::now() - t0).count();
    if (!st.ok()) {
      fprintf(stderr, "%s\n", st.ToString().c_str());
      return false;
    }
    r.docs += n;
    ++r.batches;
  }
  postings::WaitForMerges(**idx);
  r.merged_secs = std::chrono::duration<double>(Clock::now() - start).count();
  r.cpu = CpuNow() - cpu0 - gen_cpu;
  if (!errors.empty()) fprintf(stderr, "%zu index errors, first: %s\n", errors.size(), errors[0].message.c_str());
  r.disk_mb = (*idx)->DiskBytes() / 1e6;
  return true;
}

#ifdef CORVID_BENCH_SQLITE
bool RunFts5(const Vocabulary& v, Set set, size_t ndocs, size_t max_docs, size_t max_bytes, const std::string& dir,
             Run& r) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  sqlite3* db = nullptr;
  if (sqlite3_open((dir + "/fts5.db").c_str(), &db) != SQLITE_OK) return false;
  sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;", nullptr, nullptr, nullptr);
  const int ncols = set == Set::kOne ? 1 : kManyFields;
  std::string create = "CREATE VIRTUAL TABLE docs USING fts5(id UNINDEXED", insert = "INSERT INTO docs VALUES(?";
  for (int f = 0; f < ncols; ++f) {
    create += set == Set::kOne ? ", body" : ", f";
    if (set == Set::kMany) create += std::to_string(f);
    insert += ",?";
  }
  create += ")";
  insert += ")";
  if (sqlite3_exec(db, create.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    fprintf(stderr, "fts5: %s\n", sqlite3_errmsg(db));
    sqlite3_close(db);
    return false;
  }
  sqlite3_stmt* ins = nullptr;
  sqlite3_prepare_v2(db, insert.c_str(), -1, &ins, nullptr);
  std::vector<GenDoc> batch;
  size_t next = 0;
  bool ok = true;
  while (size_t n = NextBatch(v, set, next, ndocs, max_docs, max_bytes, batch)) {
    const double c0 = CpuNow();
    const auto t0 = Clock::now();
    sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
    for (size_t j = 0; j < n; ++j) {
      const GenDoc& d = batch[j];
      sqlite3_bind_text(ins, 1, d.id.data(), static_cast<int>(d.id.size()), SQLITE_STATIC);
      for (int f = 0; f < ncols; ++f) {
        if (static_cast<size_t>(f) < d.fields.size())
          sqlite3_bind_text(ins, f + 2, d.json.data() + d.fields[f].first, static_cast<int>(d.fields[f].second),
                            SQLITE_STATIC);
        else
          sqlite3_bind_null(ins, f + 2);
      }
      if (sqlite3_step(ins) != SQLITE_DONE) {
        fprintf(stderr, "fts5: %s\n", sqlite3_errmsg(db));
        ok = false;
      }
      sqlite3_reset(ins);
      r.text_mb += d.text_bytes / 1e6;
      r.json_mb += d.json.size() / 1e6;
    }
    sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
    r.secs += std::chrono::duration<double>(Clock::now() - t0).count();
    r.cpu += CpuNow() - c0;
    r.docs += n;
    ++r.batches;
    if (!ok) break;
  }
  sqlite3_finalize(ins);
  sqlite3_close(db);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) r.disk_mb += e.file_size() / 1e6;
  return ok;
}
#endif

void Print(const char* who, const Run& r) {
  printf("  %-7s %8.0f docs/s  %6.1f MB/s text  %6.1f MB/s JSON  (%.2f s; cpu %.2f s = %.1f MB text/cpu-s", who,
         r.docs / r.secs, r.text_mb / r.secs, r.json_mb / r.secs, r.secs, r.cpu, r.text_mb / r.cpu);
  if (r.worker_cpu > 0) printf("; worker cpu %.2f s", r.worker_cpu);
  if (r.merged_secs > 0) printf("; merges done at %.2f s", r.merged_secs);
  printf("; %zu batches, disk %.0f MB)\n", r.batches, r.disk_mb);
}


}  // namespace

int main(int argc, char** argv) {
  size_t ndocs = 10000, max_docs = corvid::indexing::EngineOptions{}.batch_max_docs,
         max_bytes = corvid::indexing::EngineOptions{}.batch_max_bytes;
  int runs = 3, peer_runs = 1;
  bool peers = true;
  std::string which = "both", dir = "/tmp/w3_bench";
  for (int i = 1; i < argc; i += 2) {
    std::string k = argv[i];
    if (i + 1 == argc) k = "--help";  // a flag without its value: refuse it, not run the defaults
    if (k == "--docs")
      ndocs = std::stoul(argv[i + 1]);
    else if (k == "--set")
      which = argv[i + 1];
    else if (k == "--runs")
      runs = std::stoi(argv[i + 1]);
    else if (k == "--peer-runs")
      peer_runs = std::stoi(argv[i + 1]);
    else if (k == "--peers")
      peers = std::string(argv[i + 1]) != "0";
    else if (k == "--batch-bytes")
      max_bytes = std::stoul(argv[i + 1]);
    else if (k == "--batch-docs")
      max_docs = std::stoul(argv[i + 1]);
    else if (k == "--dir")
      dir = argv[i + 1];
    else {
      fprintf(stderr,
              "usage: w3_bench [--docs 10000] [--set one|many|both] [--runs 3] [--peer-runs 1] [--peers 0|1]\n"
              "                [--batch-bytes 67108864] [--batch-docs 8192] [--dir /tmp/w3_bench]\n");
      return 2;
    }
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  printf("machine: %s\n", bench::MachineDescription().c_str());
  printf("W3: %zu docs per set, batches of <= %zu docs / < %zu bytes of JSON, corvid median of %d runs, peers %d\n",
         ndocs, max_docs, max_bytes, runs, peers ? peer_runs : 0);
  const Vocabulary vocab;
  for (Set set : {Set::kOne, Set::kMany}) {
    if (which != "both" && which != (set == Set::kOne ? "one" : "many")) continue;
    printf("\nset %s: %s\n", set == Set::kOne ? "one" : "many",
           set == Set::kOne ? "one ~300 KB text field per document"
                            : "50-100 text fields per document totalling 90-900 KB");
    std::vector<Run> all;
    for (int k = 0; k < runs; ++k) {
      Run r;
      if (!RunCorvid(vocab, set, ndocs, max_docs, max_bytes, dir + "/corvid", r)) return 1;
      Print("corvid", r);
      all.push_back(r);
    }
    std::sort(all.begin(), all.end(), [](const Run& a, const Run& b) { return a.secs < b.secs; });
    const Run med = all[all.size() / 2];
    printf("  median:\n");
    Print("corvid", med);
    printf(
        "  text %.1f MB, JSON %.1f MB; W3 bar >= 50 MB/s of text per worker thread: %s (per CPU-second, merges "
        "included: %s)\n",
        med.text_mb, med.json_mb, med.text_mb / med.secs >= 50 ? "met" : "MISSED",
        med.text_mb / med.cpu >= 50 ? "met" : "MISSED");
    std::filesystem::remove_all(dir + "/corvid");
#ifdef CORVID_BENCH_SQLITE
    if (peers && peer_runs > 0) {
      std::vector<Run> prs;
      for (int k = 0; k < peer_runs; ++k) {
        Run r;
        if (!RunFts5(vocab, set, ndocs, max_docs, max_bytes, dir + "/fts5", r)) break;
        Print("fts5", r);
        prs.push_back(r);
      }
      std::filesystem::remove_all(dir + "/fts5");
      if (!prs.empty()) {
        std::sort(prs.begin(), prs.end(), [](const Run& a, const Run& b) { return a.secs < b.secs; });
        const Run& p = prs[prs.size() / 2];
        printf("  corvid / fts5: %.1fx\n", p.secs / med.secs);
      }
    }
#endif
  }
  return 0;
}
