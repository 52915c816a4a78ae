#!/usr/bin/env python3
"""W2 over HTTP: search indexing and query latency through the real server.

Starts corvid on an empty data directory, defines a search index (title
standard ^2, body english, tags keyword facet, score number), bulk-loads
--docs documents (title 5-10 words, ~1 KB Zipf-distributed body, 1-5 tags of
500, score) and times until the index is not stale; then runs --queries
queries of each type (term, 2-term AND, 2-term OR, phrase, prefix), top-10,
from one keep-alive client, and prints q/s, p50 and p99 per type. The
in-process engine and its peers (SQLite FTS5, Xapian) are measured by
bench/postings/postings_bench.

  python3 bench/w2_search_http.py --binary build/corvid [--docs 100000] [--queries 1000] [--settle 0]
                                  [--wrk SECONDS]

With --wrk, each type's queries are also sent by wrk (-t1 -c1, in order and
round again for that long): the same one client, written in C, so its
latency is the server's and the transport's without Python's own.
"""
import argparse
import bisect
import http.client
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse


def vocabulary(rng, n):
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    words = set()
    while len(words) < n:
        k = rng.randint(2, 9)
        words.add("".join(letters[min(int(rng.expovariate(0.25)), 25)] for _ in range(k)))
    return sorted(words, key=lambda w: (len(w), w))


def zipf_sampler(rng, words, s=1.07):
    weights = [1.0 / (i + 1) ** s for i in range(len(words))]
    cum, total = [], 0.0
    for w in weights:
        total += w
        cum.append(total)
    return lambda: words[bisect.bisect_left(cum, rng.random() * total)]


def make_docs(n, seed):
    rng = random.Random(seed)
    words = vocabulary(rng, 20000)
    pick = zipf_sampler(rng, words)
    tags = ["tag%03d" % i for i in range(500)]
    docs = []
    for i in range(n):
        body = []
        size = 0
        while size < 1000:
            w = pick()
            body.append(w)
            size += len(w) + 1
        docs.append({"id": "d%d" % i, "title": " ".join(pick() for _ in range(rng.randint(5, 10))),
                     "body": " ".join(body), "tags": rng.sample(tags, rng.randint(1, 5)),
                     "score": rng.randint(0, 1000)})
    return docs, words, pick


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/corvid")
    ap.add_argument("--docs", type=int, default=100000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--settle", type=float, default=0,
                    help="seconds to wait after the index is fresh, for background merges (default 0)")
    ap.add_argument("--wrk", type=float, default=0,
                    help="also run each type's queries for this many seconds from wrk (-t1 -c1, "
                         "bench/wrk/get_list.lua): one client without Python's own latency")
    args = ap.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("W2 search over HTTP: %d docs, %d queries per type; %s, %d cores, %s" %
          (args.docs, args.queries, cpu, os.cpu_count(), platform.release()))
    docs, words, pick = make_docs(args.docs, 1)
    data = tempfile.mkdtemp(prefix="corvid-w2-")
    proc = subprocess.Popen([args.binary, "serve", "--data", data, "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = int(proc.stdout.readline().strip().rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def call(method, path, body=None, ctype="application/json"):
        conn.request(method, path, body=body, headers={"Content-Type": ctype} if body is not None else {})
        r = conn.getresponse()
        payload = r.read()
        if r.status >= 300:
            raise RuntimeError("%s %s -> %d %s" % (method, path, r.status, payload[:300]))
        return json.loads(payload)

    try:
        call("PUT", "/indexes/w2", json.dumps({
            "type": "search", "collection": "articles",
            "fields": {"title": {"analyzer": "standard", "boost": 2.0}, "body": {"analyzer": "english"},
                       "tags": {"analyzer": "keyword", "facet": True}, "score": {"type": "number"}},
            "store": ["title", "score"]}))
        start = time.perf_counter()
        last = 0
        for i in range(0, len(docs), 10000):
            body = "".join(json.dumps(d, separators=(",", ":")) + "\n" for d in docs[i:i + 10000]).encode()
            last = call("POST", "/docs/articles/_bulk", body, "application/x-ndjson")["lastEtag"]
        loaded = time.perf_counter()
        while True:
            r = call("GET", "/indexes/w2/search?q=*&limit=0&minEtag=%d&waitMs=60000" % last)
            if not r["stale"] and r["indexEtag"] >= last:
                break
        indexed = time.perf_counter()
        mb = sum(len(d["body"]) + len(d["title"]) for d in docs) / 1e6
        print("  load (bulk, durable) %.2f s; load + index %.2f s: %.0f docs/s, %.1f MB/s of text"
              % (loaded - start, indexed - start, len(docs) / (indexed - start), mb / (indexed - start)))
        # Background merges go on after the index is fresh; with --settle the
        # queries wait for them (the steady state), without they share the
        # second core with the last merges.
        if args.settle > 0:
            print("  queries start %.0f s after the index is fresh (--settle)" % args.settle)
            time.sleep(args.settle)

        rng = random.Random(7)
        frequent = words[:2000]
        def phrase():
            d = rng.choice(docs)["body"].split()
            k = rng.randrange(len(d) - 1)
            return '"%s %s"' % (d[k], d[k + 1])
        kinds = {
            "term": lambda: pick(),
            "and": lambda: "%s AND %s" % (pick(), pick()),
            "or": lambda: "%s OR %s" % (pick(), pick()),
            "phrase": phrase,
            "prefix": lambda: rng.choice(frequent)[:3] + "*",
        }
        for name, gen in kinds.items():
            queries = [gen() for _ in range(args.queries)]
            lat, took = [], []
            t0 = time.perf_counter()
            for q in queries:
                s = time.perf_counter()
                r = call("GET", "/indexes/w2/search?limit=10&q=" + urllib.parse.quote(q))
                lat.append(time.perf_counter() - s)
                took.append(r["tookMs"])
            total = time.perf_counter() - t0
            lat.sort()
            took.sort()
            # tookMs: the server's own time for the request (engine and rendering), without
            # the client, the socket and the HTTP parsing.
            print("  %-7s %8.0f q/s   p50 %7.3f ms   p99 %7.3f ms   (server tookMs p50 %6.3f, p99 %6.3f)" %
                  (name, len(queries) / total, lat[len(lat) // 2] * 1e3, lat[int(len(lat) * 0.99)] * 1e3,
                   took[len(took) // 2], took[int(len(took) * 0.99)]))
            if args.wrk > 0:
                with tempfile.NamedTemporaryFile("w", suffix=".paths", delete=False) as f:
                    f.write("".join("/indexes/w2/search?limit=10&q=%s\n" % urllib.parse.quote(q) for q in queries))
                out = subprocess.run(
                    ["wrk", "-t1", "-c1", "-d%gs" % args.wrk, "-s",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)), "wrk", "get_list.lua"),
                     "http://127.0.0.1:%d" % port],
                    env=dict(os.environ, BENCH_PATHS=f.name), capture_output=True, text=True).stdout
                os.unlink(f.name)
                r = dict(kv.split("=") for kv in next(l for l in out.splitlines()
                                                      if l.startswith("WRK_RESULT")).split()[1:])
                print("  %-7s %8.0f q/s   p50 %7.3f ms   p99 %7.3f ms   (wrk -t1 -c1, %s requests, %s errors)" %
                      ("  wrk", float(r["req_per_s"]), int(r["p50_us"]) / 1e3, int(r["p99_us"]) / 1e3,
                       r["requests"], int(r["status_errors"]) + int(r["socket_errors"])))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
