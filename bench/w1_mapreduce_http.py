#!/usr/bin/env python3
"""W1 over HTTP: the CouchDB/RavenDB map/reduce indexing benchmark.

Starts corvid on an empty data directory, defines the index (sum(score) and
count() grouped by year-month) before loading, then times from the first
bulk write until the index is no longer stale: documents/s indexed end to
end. Also a 10% update re-index, one-client aggregation-query latency, and
SQLite (one transaction of the same rows + GROUP BY) in the same run as
the reference. Prints medians of --runs runs.

  python3 bench/w1_mapreduce_http.py --binary build/corvid [--docs 100000] [--runs 5]
"""
import argparse
import datetime
import http.client
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

DEFINITION = {
    "type": "mapreduce",
    "collection": "scores",
    "map": {"month": "substr(metadata.createdAt, 0, 7)", "score": "score"},
    "groupBy": ["month"],
    "reduce": {"total": "sum(score)", "count": "count()"},
}


def make_docs(n, seed):
    rng = random.Random(seed)
    today = datetime.date(2026, 11, 30)
    letters = "abcdefghijklmnopqrstuvwxyz"
    docs = []
    for i in range(n):
        day = today - datetime.timedelta(days=rng.randrange(365))
        docs.append({
            "id": "u%d" % i,
            "metadata": {"docType": "score", "createdAt": day.isoformat()},
            "username": "".join(rng.choice(letters) for _ in range(6)),
            "score": rng.randrange(5001),
        })
    return docs


def ndjson_chunks(docs, per_request):
    for i in range(0, len(docs), per_request):
        yield "".join(json.dumps(d, separators=(",", ":")) + "\n" for d in docs[i:i + per_request]).encode()


class Server:
    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="corvid-w1-")
        self.proc = subprocess.Popen([binary, "serve", "--data", self.dir, "--listen", "127.0.0.1:0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        self.port = int(line.strip().rsplit(":", 1)[1])
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def call(self, method, path, body=None, ctype="application/json"):
        headers = {"Content-Type": ctype} if body is not None else {}
        self.conn.request(method, path, body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError("%s %s -> %d %s" % (method, path, r.status, data[:200]))
        return json.loads(data)

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_not_stale(server, name, min_etag):
    while True:
        r = server.call("GET", "/indexes/%s/results?minEtag=%d&waitMs=60000&limit=1" % (name, min_etag))
        if not r["stale"] and r["indexEtag"] >= min_etag:
            return


def run_once(binary, docs, chunks, update_chunks):
    server = Server(binary)
    try:
        server.call("PUT", "/indexes/w1", json.dumps(DEFINITION))
        start = time.perf_counter()
        last = 0
        for body in chunks:
            last = server.call("POST", "/docs/scores/_bulk", body, "application/x-ndjson")["lastEtag"]
        loaded = time.perf_counter()
        wait_not_stale(server, "w1", last)
        indexed = time.perf_counter()

        # One client, keep-alive: the aggregation query's latency.
        lat = []
        for _ in range(1000):
            t0 = time.perf_counter()
            server.call("GET", "/indexes/w1/results")
            lat.append(time.perf_counter() - t0)
        lat.sort()

        # Re-index after updating 10% of the documents.
        t0 = time.perf_counter()
        for body in update_chunks:
            last = server.call("POST", "/docs/scores/_bulk", body, "application/x-ndjson")["lastEtag"]
        wait_not_stale(server, "w1", last)
        reindex = time.perf_counter() - t0
        rows = server.call("GET", "/indexes/w1/results")["rows"]
    finally:
        server.close()
    n = len(docs)
    return {
        "docs_per_s": n / (indexed - start),
        "load_s": loaded - start,
        "total_s": indexed - start,
        "query_p50_ms": lat[len(lat) // 2] * 1e3,
        "query_p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
        "reindex_docs_per_s": (n // 10) / reindex,
        "rows": rows,
    }


def sqlite_once(docs):
    path = tempfile.mktemp(prefix="w1-", suffix=".sqlite")
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE scores(id TEXT PRIMARY KEY, created TEXT, username TEXT, score INTEGER)")
    rows = [(d["id"], d["metadata"]["createdAt"], d["username"], d["score"]) for d in docs]
    t0 = time.perf_counter()
    with db:
        db.executemany("INSERT INTO scores VALUES (?,?,?,?)", rows)
    result = db.execute("SELECT substr(created,1,7) m, sum(score), count(*) FROM scores GROUP BY m ORDER BY m").fetchall()
    elapsed = time.perf_counter() - t0
    db.close()
    os.remove(path)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return len(docs) / elapsed, result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/corvid")
    ap.add_argument("--docs", type=int, default=100000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--per-request", type=int, default=20000)
    args = ap.parse_args()

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("W1 map/reduce over HTTP: %d docs, %d runs; %s, %d cores, %s" %
          (args.docs, args.runs, cpu, os.cpu_count(), platform.release()))
    docs = make_docs(args.docs, 1)
    chunks = list(ndjson_chunks(docs, args.per_request))
    rng = random.Random(2)
    updated = [dict(d, score=rng.randrange(5001)) for d in rng.sample(docs, args.docs // 10)]
    update_chunks = list(ndjson_chunks(updated, args.per_request))

    results, sqlite_rates = [], []
    for _ in range(args.runs):
        results.append(run_once(args.binary, docs, chunks, update_chunks))
        rate, expected = sqlite_once(docs)
        sqlite_rates.append(rate)
    # Check the answer against SQLite's (for the original load + updates).
    final = {d["id"]: d for d in docs}
    for d in updated:
        final[d["id"]] = d
    check = {}
    for d in final.values():
        m = d["metadata"]["createdAt"][:7]
        t, c = check.get(m, (0, 0))
        check[m] = (t + d["score"], c + 1)
    got = {r["month"]: (r["total"], r["count"]) for r in results[-1]["rows"]}
    print("answer matches a recomputation: %s" % (got == check))

    def med(key):
        vals = [r[key] for r in results]
        return statistics.median(vals), min(vals), max(vals)

    for key, label in [("docs_per_s", "indexed docs/s (first bulk write -> not stale)"),
                       ("total_s", "seconds to load + index"),
                       ("load_s", "seconds to load (bulk, durable)"),
                       ("reindex_docs_per_s", "10%% update re-index docs/s"),
                       ("query_p50_ms", "results query p50 ms (1 client, keep-alive)"),
                       ("query_p99_ms", "results query p99 ms")]:
        m, lo, hi = med(key)
        print("  %-52s median %12.3f   [min %.3f, max %.3f]" % (label, m, lo, hi))
    print("  %-52s median %12.3f   [min %.3f, max %.3f]" % (
        "SQLite same rows, one txn + GROUP BY, rows/s", statistics.median(sqlite_rates), min(sqlite_rates),
        max(sqlite_rates)))


if __name__ == "__main__":
    sys.exit(main())
