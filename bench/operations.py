#!/usr/bin/env python3
"""The operations benchmark (issue 27): what rewrites leave on disk, and
backup and restore throughput.

rewrites: loads --docs documents of ~1 KB with a search index and a
  map/reduce index, then rewrites every document --rewrites times (bulk),
  waiting for both indexes after each pass; prints the store's size (du of
  DATA/store) and each index's diskBytes after each pass, over their size
  after the first load (the bar: <= 2x after 5 rewrites).
backup: loads --backup-mb of documents, then takes GET /admin/backup while
  a writer PUTs --writes-per-s documents a second; prints MB/s, the
  server's VmRSS growth, then `corvid restore` MB/s and its peak RSS.

  python3 bench/operations.py --phases rewrites --docs 100000 --rewrites 5
  python3 bench/operations.py --phases backup --backup-mb 2000
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (Client, Server, ServerSteps, bulk_load, du_bytes, machine_facts,  # noqa: E402
                          mib, ndjson_batches, proc_memory, say)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("alpha beta gamma delta epsilon zeta theta lambda sigma omega index query search store "
         "merge segment etag bulk cluster node shard replica backup restore tombstone").split()


def document(n, rev, rng_seed=27):
    rng = random.Random(n * 1000003 + rev * 7919 + rng_seed)
    body = " ".join(rng.choice(WORDS) for _ in range(120))
    return {"id": "d%07d" % n, "title": " ".join(rng.choice(WORDS) for _ in range(6)), "body": body,
            "score": rng.randint(0, 100), "month": "2024-%02d" % rng.randint(1, 12), "rev": rev}


class Run(ServerSteps):
    def __init__(self, args, data):
        self.args, self.data = args, data
        self.server = Server(args.binary, data, os.path.join(os.path.dirname(data), "server.log"))

    def wait_idle(self, client, target, timeout=3600):
        t0 = time.perf_counter()
        while True:
            body = client.json("GET", "/admin/indexes")
            if all(i["lastIndexedEtag"] >= target and i["backlog"] == 0 for i in body["indexes"]):
                return body, time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError("indexes not caught up after %d s" % timeout)
            self.check_alive("waiting for the indexes")
            time.sleep(0.2)


def phase_rewrites(run):
    args = run.args
    client = Client(run.server.port, 600)
    client.json("PUT", "/indexes/ops_search", json.dumps({
        "type": "search", "collection": "ops",
        "fields": {"title": {"type": "text"}, "body": {"type": "text"}, "score": {"type": "number"}}}))
    client.json("PUT", "/indexes/ops_months", json.dumps({
        "type": "mapreduce", "collection": "ops", "map": {"month": "month", "score": "score"},
        "groupBy": ["month"], "reduce": {"n": "count()", "total": "sum(score)"}}))
    first = None
    for rev in range(args.rewrites + 1):
        figures, _ = bulk_load(run, "load" if rev == 0 else "rewrite %d" % rev, client, "ops",
                               (b[:3] for b in ndjson_batches(lambda n: document(n, rev), args.docs, 4 << 20)))
        admin, waited = run.wait_idle(client, figures["last_etag"])
        store, _ = du_bytes(os.path.join(run.data, "store"))
        disk = {i["name"]: i["diskBytes"] for i in admin["indexes"]}
        now = {"store": store, **disk}
        if first is None:
            first = now
        say("  %-10s %d docs at %.0f MB/s, indexes caught up %.1f s later: store %s (%.2fx)  %s" % (
            "load" if rev == 0 else "rewrite %d" % rev, figures["docs"], figures["mb_per_s"], waited,
            mib(store), store / first["store"],
            "  ".join("%s %s (%.2fx)" % (k, mib(v), v / max(1, first[k])) for k, v in disk.items())))
    colls = client.json("GET", "/collections")
    say("  collections: %s" % colls["collections"])
    return {k: now[k] / max(1, first[k]) for k in now}


def phase_backup(run, tmp):
    args = run.args
    client = Client(run.server.port, 600)
    docs = int(args.backup_mb * 1e6 / 1100)
    figures, _ = bulk_load(run, "load", client, "big",
                           (b[:3] for b in ndjson_batches(lambda n: document(n, 0), docs, 8 << 20)))
    store, _ = du_bytes(os.path.join(run.data, "store"))
    say("  loaded %d docs (%.0f MB of JSON) at %.0f MB/s; store %s" % (
        docs, figures["json_bytes"] / 1e6, figures["mb_per_s"], mib(store)))
    rss_before = proc_memory(run.server.pid).get("VmRSS", 0)
    peak = [rss_before]
    stop = threading.Event()
    writes = [0]

    def writer():
        c = Client(run.server.port, 60)
        n = 0
        while not stop.is_set():
            t = time.perf_counter()
            for _ in range(max(1, args.writes_per_s // 10)):
                c.request("PUT", "/docs/live/w%d" % n, json.dumps(document(n, 1)))
                n += 1
                writes[0] += 1
            time.sleep(max(0.0, 0.1 - (time.perf_counter() - t)))

    def sampler():
        while not stop.is_set():
            peak[0] = max(peak[0], proc_memory(run.server.pid).get("VmRSS", 0))
            time.sleep(0.05)

    threads = [threading.Thread(target=writer), threading.Thread(target=sampler)]
    for t in threads:
        t.start()
    out = os.path.join(tmp, "ops.backup")
    t0 = time.perf_counter()
    subprocess.run([args.binary, "backup", "--url", "http://127.0.0.1:%d" % run.server.port, "-o", out],
                   check=True, stderr=subprocess.DEVNULL)
    secs = time.perf_counter() - t0
    stop.set()
    for t in threads:
        t.join()
    size = os.path.getsize(out)
    say("  backup: %s in %.2f s = %.0f MB/s with %.0f writes/s going on; server VmRSS %s -> peak %s (+%s)" % (
        mib(size), secs, size / 1e6 / secs, writes[0] / secs, mib(rss_before), mib(peak[0]),
        mib(peak[0] - rss_before)))
    target = os.path.join(tmp, "restored")
    subprocess.run(["sync"])
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", args.binary, "restore", "--from", out, "--data", target],
                          check=True, stderr=subprocess.PIPE, text=True)
    rsecs = time.perf_counter() - t0
    max_kib = int(proc.stderr.strip().splitlines()[-1])
    say("  restore: %.2f s = %.0f MB/s (reads the file twice: verify, then write), peak RSS %s" % (
        rsecs, size / 1e6 / rsecs, mib(max_kib * 1024)))
    return {"backup_mb_per_s": size / 1e6 / secs, "rss_growth": peak[0] - rss_before,
            "restore_mb_per_s": size / 1e6 / rsecs}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phases", default="rewrites,backup")
    ap.add_argument("--docs", type=int, default=100000)
    ap.add_argument("--rewrites", type=int, default=5)
    ap.add_argument("--backup-mb", type=float, default=2000)
    ap.add_argument("--writes-per-s", type=int, default=1000)
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "corvid"))
    args = ap.parse_args()
    say("== Corvid operations benchmark  %s" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    cpu, ram, build_type = machine_facts(args.binary)
    say("machine: %d cores, %s, %.1f GiB RAM; binary %s (%s build)" % (os.cpu_count(), cpu, ram / 2**30, args.binary, build_type))
    tmp = tempfile.mkdtemp(prefix="corvid-ops-")
    private = os.path.join(tmp, "corvid")
    shutil.copy2(args.binary, private)
    args.binary = private
    results = {}
    try:
        for phase in args.phases.split(","):
            data = os.path.join(tmp, phase, "data")
            os.makedirs(os.path.dirname(data))
            run = Run(args, data)
            run.server.start()
            if run.server.wait_healthy(20) is None:
                raise RuntimeError("the server did not start: " + run.server.log_tail())
            try:
                say("%s:" % phase)
                results[phase] = phase_rewrites(run) if phase == "rewrites" else phase_backup(run, tmp)
            finally:
                run.server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(json.dumps(results))


if __name__ == "__main__":
    main()
