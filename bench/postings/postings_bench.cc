// postings_bench: workload W2 of issue 5. Generates N documents (title of
// 5-10 words, a ~1 KB body from a Zipf-distributed English-like vocabulary,
// 1-5 tags of 500, a score), indexes them with SearchIndex::ApplyBatch
// (durable batches) and runs 1,000 queries each of term, 2-term AND, 2-term
// OR, phrase and prefix, top-10 by BM25; SQLite FTS5 and Xapian index the
// same documents and run the same queries in the same run, in-process.
//
//   postings_bench [--docs 100000] [--batch 5000] [--queries 1000] [--passes 3]
//                  [--peer-passes 1] [--peers 0|1] [--dir /tmp/postings_bench]
//                  [--store title,score]  (the definition's "store"; none by default)
//                  [--query-words mid|zipf]  (query words of Zipf rank 10..2,000, or drawn Zipf)
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench/machine.h"
#include "postings/search_index.h"
#include "postings/snapshot.h"  // WaitForMerges

#ifdef CORVID_BENCH_SQLITE
#include <sqlite3.h>
#endif
#ifdef CORVID_BENCH_XAPIAN
#include <xapian.h>
#endif

using Clock = std::chrono::steady_clock;
using namespace corvid;

namespace {

struct Doc {
  std::string id, title, body, json;
  std::vector<std::string> tags;
  int score;
};

struct Query {
  std::string corvid, fts5, xapian;
};

struct Workload {
  std::vector<std::string> vocab;
  std::vector<Doc> docs;
  std::vector<std::pair<std::string, std::vector<Query>>> queries;
};

std::string MakeWord(std::mt19937& rng) {
  static const char* kSyll[] = {"ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "der", "an", "el", "or", "ing", "ter", "st",
                                "ba", "ve", "qu", "th", "ion", "al", "ex", "pre", "con", "us", "it", "om", "ur", "ly", "ic"};
  std::uniform_int_distribution<int> n(1, 4), s(0, 29);
  std::string w;
  int k = n(rng);
  for (int i = 0; i < k; ++i) w += kSyll[s(rng)];
  return w;
}

// Query words: ranks 10..2,000 of the Zipf vocabulary (`mid`, neither stop
// words nor hapaxes), or drawn Zipf like the documents' words (`zipf`, as
// bench/w2_search_http.py draws them: the commonest words, in nearly every
// document, come up often).
Workload Generate(size_t ndocs, size_t nqueries, bool zipf_queries) {
  Workload w;
  std::mt19937 rng(42);
  std::set<std::string> seen;
  while (w.vocab.size() < 30000) {
    std::string x = MakeWord(rng);
    if (seen.insert(x).second) w.vocab.push_back(x);
  }
  std::vector<double> cdf(w.vocab.size());
  double acc = 0;
  for (size_t i = 0; i < cdf.size(); ++i) cdf[i] = acc += 1.0 / std::pow(i + 1.0, 1.0);
  std::uniform_real_distribution<double> u(0, acc);
  auto zipf = [&]() -> const std::string& {
    return w.vocab[std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin()];
  };
  std::uniform_int_distribution<int> tl(5, 10), nt(1, 5), tag(0, 499), sc(0, 1000);
  for (size_t i = 0; i < ndocs; ++i) {
    Doc d;
    d.id = "doc" + std::to_string(i);
    int n = tl(rng);
    for (int k = 0; k < n; ++k) d.title += (k ? " " : "") + zipf();
    while (d.body.size() < 1000) d.body += (d.body.empty() ? "" : " ") + zipf();
    int t = nt(rng);
    for (int k = 0; k < t; ++k) d.tags.push_back("tag" + std::to_string(tag(rng)));
    d.score = sc(rng);
    d.json = "{\"title\":\"" + d.title + "\",\"body\":\"" + d.body + "\",\"tags\":[";
    for (size_t k = 0; k < d.tags.size(); ++k) d.json += (k ? ",\"" : "\"") + d.tags[k] + "\"";
    d.json += "],\"score\":" + std::to_string(d.score) + "}";
    w.docs.push_back(std::move(d));
  }
  std::uniform_int_distribution<size_t> r(10, 1999), di(0, ndocs - 1);
  auto word = [&] { return zipf_queries ? zipf() : w.vocab[r(rng)]; };
  std::vector<Query> term, andq, orq, phrase, prefix;
  for (size_t i = 0; i < nqueries; ++i) {
    std::string a = word(), b = word();
    term.push_back({a, a, a});
    andq.push_back({a + " AND " + b, a + " AND " + b, a + " AND " + b});
    orq.push_back({a + " OR " + b, a + " OR " + b, a + " OR " + b});
    const std::string& body = w.docs[di(rng)].body;
    size_t sp = body.find(' ', body.size() / 3);
    size_t e1 = body.find(' ', sp + 1), e2 = body.find(' ', e1 + 1);
    std::string ph = body.substr(sp + 1, e2 - sp - 1);
    phrase.push_back({"\"" + ph + "\"", "\"" + ph + "\"", "\"" + ph + "\""});
    std::string p = a.substr(0, 3);
    prefix.push_back({p + "*", p + "*", p + "*"});
  }
  w.queries = {{"term", term}, {"and", andq}, {"or", orq}, {"phrase", phrase}, {"prefix", prefix}};
  return w;
}

struct Stats {
  double qps = 0, p50_us = 0, p99_us = 0;
  double total_hits = 0;
};

// Runs `run` over the queries `passes` times; returns the median pass.
Stats Measure(const std::vector<Query>& qs, int passes, const std::function<size_t(const Query&)>& run) {
  std::vector<Stats> all;
  for (int p = 0; p < passes; ++p) {
    std::vector<double> lat;
    lat.reserve(qs.size());
    double hits = 0;
    auto t0 = Clock::now();
    for (const auto& q : qs) {
      auto a = Clock::now();
      hits += run(q);
      lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
    }
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::sort(lat.begin(), lat.end());
    all.push_back(Stats{qs.size() / secs, lat[lat.size() / 2], lat[std::min(lat.size() - 1, lat.size() * 99 / 100)], hits});
  }
  std::sort(all.begin(), all.end(), [](const Stats& a, const Stats& b) { return a.qps < b.qps; });
  return all[all.size() / 2];
}


}  // namespace

int main(int argc, char** argv) {
  size_t ndocs = 100000, batch = 5000, nq = 1000;
  int passes = 3, peer_passes = 1;
  bool peers = true;
  std::string dir = "/tmp/postings_bench";
  std::string store;       // --store "title,score": the definition's "store" (what w2_search_http.py's keeps)
  std::string only, dump;  // --only TYPE: one query type; --dump FILE: every query's total and hits (to diff runs)
  std::string query_words = "mid";  // --query-words mid|zipf (Generate)
  for (int i = 1; i < argc; i += 2) {
    std::string k = argv[i];
    if (i + 1 == argc) k = "--help";  // a flag without its value: refuse it, not run the defaults
    if (k == "--docs") ndocs = std::stoul(argv[i + 1]);
    else if (k == "--batch") batch = std::stoul(argv[i + 1]);
    else if (k == "--queries") nq = std::stoul(argv[i + 1]);
    else if (k == "--passes") passes = std::stoi(argv[i + 1]);
    else if (k == "--peer-passes") peer_passes = std::stoi(argv[i + 1]);
    else if (k == "--dir") dir = argv[i + 1];
    else if (k == "--peers") peers = std::string(argv[i + 1]) != "0";
    else if (k == "--only") only = argv[i + 1];
    else if (k == "--dump") dump = argv[i + 1];
    else if (k == "--store") store = argv[i + 1];
    else if (k == "--query-words" && (std::string(argv[i + 1]) == "mid" || std::string(argv[i + 1]) == "zipf"))
      query_words = argv[i + 1];
    else {
      fprintf(stderr,
              "usage: postings_bench [--docs 100000] [--batch 5000] [--queries 1000] [--passes 3] [--peer-passes 1]\n"
              "                      [--peers 0|1] [--only term|and|or|phrase|prefix] [--dump FILE] [--dir DIR]\n"
              "                      [--store PATH,PATH...] [--query-words mid|zipf]\n");
      return 2;
    }
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  printf("machine: %s\n", bench::MachineDescription().c_str());
  printf("W2: %zu docs, batches of %zu, %zu queries per type, median of %d passes (peers: %d), query words %s\n", ndocs,
         batch, nq, passes, peer_passes, query_words.c_str());
  auto t0 = Clock::now();
  Workload w = Generate(ndocs, nq, query_words == "zipf");
  double mb = 0;
  for (auto& d : w.docs) mb += d.json.size();
  printf("generated in %.1f s, %.1f MB of JSON\n", std::chrono::duration<double>(Clock::now() - t0).count(), mb / 1e6);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  // --- Corvid ---
  std::string store_json;
  for (size_t from = 0; from < store.size();) {
    const size_t comma = std::min(store.find(',', from), store.size());
    store_json += (store_json.empty() ? "\"" : ",\"") + store.substr(from, comma - from) + "\"";
    from = comma + 1;
  }
  auto def = postings::SearchDefinition::Compile(
      R"({"type":"search","collection":"w2","fields":{"title":{"analyzer":"standard","boost":2},)"
      R"("body":{"analyzer":"standard"},"tags":{"analyzer":"keyword","facet":true},"score":{"type":"number"}},)"
      R"("store":[)" +
      store_json + "]}");
  if (!def.ok()) {
    fprintf(stderr, "%s\n", def.status().ToString().c_str());
    return 1;
  }
  auto idx = postings::SearchIndex::Open(dir + "/corvid", *def);
  if (!idx.ok()) {
    fprintf(stderr, "%s\n", idx.status().ToString().c_str());
    return 1;
  }
  auto& index = **idx;
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
  };
  auto thread_cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
  };
  const double cpu0 = cpu_now();
  const double worker_cpu0 = thread_cpu_now();
  t0 = Clock::now();
  std::vector<DocChange> changes;
  std::vector<IndexError> errors;
  for (size_t i = 0; i < w.docs.size(); i += batch) {
    changes.clear();
    for (size_t j = i; j < std::min(w.docs.size(), i + batch); ++j)
      changes.push_back(DocChange{j + 1, w.docs[j].id, false, w.docs[j].json});
    Status st = index.ApplyBatch(changes, changes.back().etag, errors);
    if (!st.ok()) {
      fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
  }
  double corvid_secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double corvid_cpu = cpu_now() - cpu0;
  // The worker's own CPU time: the figure least disturbed by other load on the machine.
  const double worker_cpu = thread_cpu_now() - worker_cpu0;
  // Merges run on the index's background thread; queries start once they are done.
  postings::WaitForMerges(index);
  const double merged_secs = std::chrono::duration<double>(Clock::now() - t0).count();
  printf("\nindexing (one worker thread, durable batches; merges in the background)\n");
  printf("  corvid   %9.0f docs/s  %6.1f MB/s  (%.2f s, worker cpu %.2f s, process cpu %.2f s; merges done at %.2f s, disk %.1f MB)\n",
         ndocs / corvid_secs, mb / 1e6 / corvid_secs, corvid_secs, worker_cpu, corvid_cpu, merged_secs, index.DiskBytes() / 1e6);
  double best_peer_index = 0;

#ifdef CORVID_BENCH_SQLITE
  sqlite3* db = nullptr;
  sqlite3_stmt* sel = nullptr;
  if (peers) {
  sqlite3_open((dir + "/fts5.db").c_str(), &db);
  sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;", nullptr, nullptr, nullptr);
  sqlite3_exec(db, "CREATE VIRTUAL TABLE docs USING fts5(id UNINDEXED, title, body, tags)", nullptr, nullptr, nullptr);
  t0 = Clock::now();
  sqlite3_stmt* ins = nullptr;
  sqlite3_prepare_v2(db, "INSERT INTO docs(id,title,body,tags) VALUES(?,?,?,?)", -1, &ins, nullptr);
  for (size_t i = 0; i < w.docs.size(); i += batch) {
    sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
    for (size_t j = i; j < std::min(w.docs.size(), i + batch); ++j) {
      const Doc& d = w.docs[j];
      std::string tags;
      for (auto& t : d.tags) tags += t + " ";
      sqlite3_bind_text(ins, 1, d.id.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(ins, 2, d.title.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(ins, 3, d.body.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(ins, 4, tags.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_step(ins);
      sqlite3_reset(ins);
    }
    sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  }
  sqlite3_finalize(ins);
  double fts_secs = std::chrono::duration<double>(Clock::now() - t0).count();
  printf("  fts5     %9.0f docs/s  %6.1f MB/s  (%.2f s)\n", ndocs / fts_secs, mb / 1e6 / fts_secs, fts_secs);
  best_peer_index = std::max(best_peer_index, ndocs / fts_secs);
  sqlite3_prepare_v2(db, "SELECT id FROM docs WHERE docs MATCH ? ORDER BY bm25(docs, 0.0, 2.0, 1.0, 1.0) LIMIT 10", -1, &sel, nullptr);
  }
#endif
#ifdef CORVID_BENCH_XAPIAN
  double xap_secs = 0;
  std::unique_ptr<Xapian::WritableDatabase> xdb;
  if (peers) try {
    xdb = std::make_unique<Xapian::WritableDatabase>(dir + "/xapian", Xapian::DB_CREATE_OR_OVERWRITE);
    Xapian::TermGenerator tg;
    t0 = Clock::now();
    for (size_t i = 0; i < w.docs.size(); ++i) {
      const Doc& d = w.docs[i];
      Xapian::Document xd;
      tg.set_document(xd);
      tg.index_text(d.title, 2);
      tg.increase_termpos();
      tg.index_text(d.body);
      for (auto& t : d.tags) xd.add_boolean_term("XT" + t);
      xd.set_data(d.id);
      xdb->add_document(xd);
      if ((i + 1) % batch == 0) xdb->commit();
    }
    xdb->commit();
    xap_secs = std::chrono::duration<double>(Clock::now() - t0).count();
    printf("  xapian   %9.0f docs/s  %6.1f MB/s  (%.2f s)\n", ndocs / xap_secs, mb / 1e6 / xap_secs, xap_secs);
    best_peer_index = std::max(best_peer_index, ndocs / xap_secs);
  } catch (const Xapian::Error& e) {
    printf("  xapian   error: %s\n", e.get_msg().c_str());
  }
#endif
  if (best_peer_index > 0) printf("  corvid / faster peer: %.1fx\n", (ndocs / corvid_secs) / best_peer_index);

  printf("\nqueries, top-10 by BM25 (q/s, p50 us, p99 us; avg hits returned)\n");
  FILE* dump_file = dump.empty() ? nullptr : fopen(dump.c_str(), "w");
  for (const auto& [name, qs] : w.queries) {
    if (!only.empty() && name != only) continue;
    postings::SearchRequest req;
    req.limit = 10;
    if (dump_file != nullptr) {
      for (const Query& q : qs) {
        req.q = q.corvid;
        auto r = index.Search(req);
        if (r.ok()) fprintf(dump_file, "%s\t%llu\t%s\n", q.corvid.c_str(), static_cast<unsigned long long>(r->total), r->hits_json.c_str());
        else fprintf(dump_file, "%s\terror %s\n", q.corvid.c_str(), r.status().ToString().c_str());
      }
    }
    // Queries run on their own thread, as the server's HTTP threads are
    // not the index worker (whose allocations would otherwise share the
    // queries' malloc arena).
    Stats c;
    std::thread([&] {
      c = Measure(qs, passes, [&](const Query& q) -> size_t {
        req.q = q.corvid;
        auto r = index.Search(req);
        if (!r.ok()) {
          fprintf(stderr, "query %s: %s\n", q.corvid.c_str(), r.status().ToString().c_str());
          return 0;
        }
        return r->total;
      });
    }).join();
    printf("  %-7s corvid %9.0f q/s  p50 %8.1f  p99 %8.1f  (avg total %.0f)\n", name.c_str(), c.qps, c.p50_us, c.p99_us,
           c.total_hits / qs.size());
    double best_peer = 0;
#ifdef CORVID_BENCH_SQLITE
    if (sel != nullptr) {
    Stats s = Measure(qs, peer_passes, [&](const Query& q) -> size_t {
      sqlite3_bind_text(sel, 1, q.fts5.c_str(), -1, SQLITE_TRANSIENT);
      size_t n = 0;
      while (sqlite3_step(sel) == SQLITE_ROW) ++n;
      sqlite3_reset(sel);
      return n;
    });
    printf("  %-7s fts5   %9.0f q/s  p50 %8.1f  p99 %8.1f\n", name.c_str(), s.qps, s.p50_us, s.p99_us);
    best_peer = std::max(best_peer, s.qps);
    }
#endif
#ifdef CORVID_BENCH_XAPIAN
    if (xdb) {
      Xapian::Enquire enq(*xdb);
      Xapian::QueryParser qp;
      qp.set_database(*xdb);
      qp.set_default_op(Xapian::Query::OP_OR);
      Stats x = Measure(qs, peer_passes, [&](const Query& q) -> size_t {
        Xapian::Query xq = qp.parse_query(q.xapian, Xapian::QueryParser::FLAG_DEFAULT | Xapian::QueryParser::FLAG_WILDCARD);
        enq.set_query(xq);
        Xapian::MSet m = enq.get_mset(0, 10);
        size_t n = 0;
        for (auto it = m.begin(); it != m.end(); ++it) n += it.get_document().get_data().size() > 0;
        return n;
      });
      printf("  %-7s xapian %9.0f q/s  p50 %8.1f  p99 %8.1f\n", name.c_str(), x.qps, x.p50_us, x.p99_us);
      best_peer = std::max(best_peer, x.qps);
    }
#endif
    if (best_peer > 0) printf("  %-7s corvid / faster peer: %.1fx\n", name.c_str(), c.qps / best_peer);
  }
#ifdef CORVID_BENCH_SQLITE
  if (sel != nullptr) sqlite3_finalize(sel);
  if (db != nullptr) sqlite3_close(db);
#endif
  if (dump_file != nullptr) fclose(dump_file);
  return 0;
}
