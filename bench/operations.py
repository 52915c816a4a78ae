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
replace: a search index over --docs documents redefined while queried:
  answers below the old definition's total, 5xx, time to the switch.
  python3 bench/operations.py --phases replace --docs 100000
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


def phase_replace(run):
    """A search index over --docs documents redefined (a field added) while
    a client queries it: every answer's total must be the old definition's
    until the switch, then the new one's; no 5xx."""
    args = run.args
    client = Client(run.server.port, 600)
    figures, _ = bulk_load(run, "load", client, "rep",
                           (b[:3] for b in ndjson_batches(lambda n: document(n, 0), args.docs, 4 << 20)))
    old_def = {"type": "search", "collection": "rep", "fields": {"title": {"type": "text"}}}
    new_def = {"type": "search", "collection": "rep",
               "fields": {"title": {"type": "text"}, "body": {"type": "text"}}}
    client.json("PUT", "/indexes/rep_search", json.dumps(old_def))
    run.wait_idle(client, figures["last_etag"])
    query = "/indexes/rep_search/search?q=alpha&limit=1"
    old_total = client.json("GET", query)["total"]
    stop = threading.Event()
    seen = {"answers": 0, "old": 0, "new": 0, "below_old": 0, "5xx": 0, "other": 0, "latencies": []}
    new_total = [None]

    def querier():
        c = Client(run.server.port, 60)
        while not stop.is_set():
            status, payload, secs = c.request("GET", query)
            seen["answers"] += 1
            seen["latencies"].append(secs)
            if status >= 500:
                seen["5xx"] += 1
                continue
            total = json.loads(payload)["total"]
            if total == old_total:
                seen["old"] += 1
            elif total < old_total:
                seen["below_old"] += 1
            else:
                seen["new"] += 1
                new_total[0] = total

    th = threading.Thread(target=querier)
    th.start()
    t0 = time.perf_counter()
    client.json("PUT", "/indexes/rep_search", json.dumps(new_def))
    while True:
        body = client.json("GET", "/indexes/rep_search")
        if body["definition"] == new_def and "replacing" not in body:
            break
        time.sleep(0.05)
    switched = time.perf_counter() - t0
    time.sleep(0.5)
    stop.set()
    th.join()
    lat = sorted(seen["latencies"])
    say("  %d docs; redefined (body added): switched after %.1f s; %d answers during it: %d old (total %d), "
        "%d new (total %s), %d below the old total, %d 5xx; query p50 %.2f ms, p99 %.2f ms" % (
            args.docs, switched, seen["answers"], seen["old"], old_total, seen["new"], new_total[0],
            seen["below_old"], seen["5xx"], 1000 * lat[len(lat) // 2], 1000 * lat[int(len(lat) * 0.99)]))
    return {"switch_s": switched, "below_old": seen["below_old"], "5xx": seen["5xx"], "answers": seen["answers"]}


def big_document(n):
    """~1.3 KB that zstd shrinks less than 2x (hex tokens), so that the
    store's size is near the JSON's."""
    rng = random.Random(n)
    return {"id": "b%08d" % n, "title": " ".join(rng.choice(WORDS) for _ in range(6)),
            "tokens": " ".join("%016x" % rng.getrandbits(64) for _ in range(60)), "score": rng.randint(0, 100)}


def phase_backup(run, tmp):
    args = run.args
    client = Client(run.server.port, 600)
    docs, json_bytes = 0, 0
    while True:  # load until the store holds --backup-mb
        step = 100000
        figures, _ = bulk_load(run, "load", client, "big", (b[:3] for b in ndjson_batches(
            lambda n: big_document(docs + n), step, 8 << 20)))
        docs += step
        json_bytes += figures["json_bytes"]
        store, _ = du_bytes(os.path.join(run.data, "store"))
        if store >= args.backup_mb * 1e6:
            break
    say("  loaded %d docs (%.0f MB of JSON); store %s" % (docs, json_bytes / 1e6, mib(store)))
    subprocess.run(["sync"])
    before = proc_memory(run.server.pid)
    rss_before, anon_before = before.get("VmRSS", 0), before.get("RssAnon", 0)
    peak, peak_anon = [rss_before], [anon_before]
    stop = threading.Event()
    writes = [0]
    write_latency = []

    def writer(k):
        c = Client(run.server.port, 60)
        n = k * 100000000
        while not stop.is_set():
            t = time.perf_counter()
            for _ in range(max(1, args.writes_per_s // 40)):
                _, _, secs = c.request("PUT", "/docs/live/w%d" % n, json.dumps(document(n, 1)))
                write_latency.append(secs)
                n += 1
                writes[0] += 1
            time.sleep(max(0.0, 0.1 - (time.perf_counter() - t)))

    def sampler():
        while not stop.is_set():
            m = proc_memory(run.server.pid)
            peak[0] = max(peak[0], m.get("VmRSS", 0))
            peak_anon[0] = max(peak_anon[0], m.get("RssAnon", 0))
            time.sleep(0.05)

    # Four writers, each a tenth of a second at a time: a durable PUT takes
    # about a millisecond, so one client alone falls short of 1,000 a second.
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)] + [threading.Thread(target=sampler)]
    for t in threads:
        t.start()
    out = os.path.join(tmp, "ops.backup")
    # The server's rate: the HTTP download alone (curl to a file).
    t0 = time.perf_counter()
    w0 = writes[0]
    subprocess.run(["curl", "-sS", "-o", out, "http://127.0.0.1:%d/admin/backup" % run.server.port], check=True)
    secs = time.perf_counter() - t0
    during = (writes[0] - w0) / secs
    size = os.path.getsize(out)
    os.unlink(out)
    # The command line: download, then read the file again to verify it.
    t0 = time.perf_counter()
    subprocess.run([args.binary, "backup", "--url", "http://127.0.0.1:%d" % run.server.port, "-o", out],
                   check=True, stderr=subprocess.DEVNULL)
    cli_secs = time.perf_counter() - t0
    stop.set()
    for t in threads:
        t.join()
    say("  backup: %s in %.2f s = %.0f MB/s (curl) with %.0f writes/s going on; `corvid backup` (download and "
        "verify) %.2f s = %.0f MB/s; server VmRSS %s -> peak %s (+%s), RssAnon +%s" % (
            mib(size), secs, size / 1e6 / secs, during, cli_secs, size / 1e6 / cli_secs, mib(rss_before),
            mib(peak[0]), mib(peak[0] - rss_before), mib(peak_anon[0] - anon_before)))
    lat = sorted(write_latency)
    say("  durable PUTs during the backups: %d, p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (
        len(lat), 1000 * lat[len(lat) // 2], 1000 * lat[int(len(lat) * 0.99)], 1000 * lat[-1]))
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
            "anon_growth": peak_anon[0] - anon_before,
            "restore_mb_per_s": size / 1e6 / rsecs}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phases", default="rewrites,replace,backup")
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
                if phase == "rewrites":
                    results[phase] = phase_rewrites(run)
                elif phase == "replace":
                    results[phase] = phase_replace(run)
                else:
                    results[phase] = phase_backup(run, tmp)
            finally:
                run.server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(json.dumps(results))


if __name__ == "__main__":
    main()
