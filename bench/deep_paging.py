#!/usr/bin/env python3
"""Deep paging over HTTP: what a field-sorted searchAfter walk costs, with
and without writes between its pages (docs/http-choices.md, "Deep
paging"; postings/walks.h).

Starts corvid on an empty data directory, loads --docs documents
{"t": "word", "n": <0..999999>, "k": <one of 50>} into a search index and
waits for it; then, each --runs times:
  walk        q=t:word sort=n, --limit hits a page, every page (no writes)
  walk+writes the same with a bulk of --rewrites documents rewritten with
              new n between pages (pages then read a pinned snapshot and
              leave out the documents deleted since)
  first pages --queries field-sorted first pages, each a different q
              (k:<value> AND n:[x TO *]), limit 10: each one pins
and prints pages/s (queries/s), hits returned and the server's CPU for
each. Compare builds by running it for each, alternated:

  python3 bench/deep_paging.py --binary build/corvid [--docs 200000] [--limit 1000]
                               [--rewrites 200] [--queries 2000] [--runs 3]
"""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import Client, CpuMeter, Server, ndjson_batches, say  # noqa: E402

HTTP_TIMEOUT = 600


def document(n, rng_seed=0):
    rng = random.Random(n * 7919 + rng_seed)
    return {"id": "d%07d" % n, "t": "word", "n": rng.randint(0, 999999), "k": "k%02d" % rng.randint(0, 49)}


def walk(client, limit, rewrite, rng):
    """One walk; returns (pages, hits, seconds in search requests)."""
    key, pages, hits, seconds = None, 0, 0, 0.0
    while True:
        params = {"q": "t:word", "sort": "n", "limit": limit}
        if key is not None:
            params["searchAfter"] = json.dumps(key)
        status, payload, took = client.request("GET", "/indexes/dp/search?" + urllib.parse.urlencode(params))
        if status != 200:
            raise RuntimeError("search -> %d %s" % (status, payload[:300]))
        seconds += took
        page = json.loads(payload)["hits"]
        if not page:
            return pages, hits, seconds
        pages += 1
        hits += len(page)
        key = page[-1]["sort"]
        if rewrite:
            lines = []
            for n in rng.sample(range(rewrite[0]), rewrite[1]):
                d = document(n)
                d["n"] = rng.randint(0, 999999)
                lines.append(json.dumps(d))
            status, payload, _ = client.request("POST", "/docs/dp/_bulk", "\n".join(lines) + "\n",
                                                "application/x-ndjson")
            if status != 200:
                raise RuntimeError("bulk -> %d %s" % (status, payload[:300]))


def first_pages(client, count, rng):
    t0 = time.perf_counter()
    for _ in range(count):
        params = {"q": "k:k%02d AND n:[%d TO *]" % (rng.randint(0, 49), rng.randint(0, 999999)),
                  "sort": "n", "limit": 10}
        status, payload, _ = client.request("GET", "/indexes/dp/search?" + urllib.parse.urlencode(params))
        if status != 200:
            raise RuntimeError("search -> %d %s" % (status, payload[:300]))
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--limit", type=int, default=1000)
    ap.add_argument("--rewrites", type=int, default=200)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="corvid-deep-paging-")
    server = Server(os.path.abspath(args.binary), os.path.join(work, "data"), os.path.join(work, "server.log"))
    try:
        server.start()
        if server.wait_healthy(30) is None:
            raise RuntimeError("server did not start: " + server.log_tail())
        client = Client(server.port, HTTP_TIMEOUT)
        client.json("PUT", "/indexes/dp", json.dumps({"type": "search", "collection": "dp", "fields": {
            "t": {"analyzer": "standard"}, "n": {"type": "number"}, "k": {"analyzer": "keyword"}}}), ok=(200, 201))
        last = 0
        for body, _, _, _ in ndjson_batches(document, args.docs, 4 << 20):
            last = client.json("POST", "/docs/dp/_bulk", body, "application/x-ndjson")["lastEtag"]
        client.json("GET", "/indexes/dp/search?q=t:word&limit=0&minEtag=%d&waitMs=600000" % last)
        say("== deep paging: %s, %d documents, limit %d" % (args.binary, args.docs, args.limit))
        rng = random.Random(1)
        for run in range(args.runs):
            for name, rewrite in (("walk", None), ("walk+writes", (args.docs, args.rewrites))):
                cpu = CpuMeter(server.pid)
                pages, hits, seconds = walk(client, args.limit, rewrite, rng)
                say("  run %d %-12s %5d pages, %8d hits, %7.1f pages/s in search requests (%.2f s), server CPU %.2f s"
                    % (run + 1, name, pages, hits, pages / seconds, seconds, cpu.server_seconds()))
            cpu = CpuMeter(server.pid)
            seconds = first_pages(client, args.queries, rng)
            say("  run %d %-12s %5d queries, %7.1f q/s, server CPU %.2f s"
                % (run + 1, "first pages", args.queries, args.queries / seconds, cpu.server_seconds()))
        client.close()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
