"""Cluster benchmark (issue 28; docs/cluster.md): three nats-servers (R=3)
and three Corvid nodes on this machine, beside a single node without
--nats measured in the same run.

Phases (`--phases`, default all):
  put       durable PUTs (~200 B, unique ids) with 64 wrk connections: the
            single node, then the cluster with the 64 spread over its three
            nodes; --runs alternated runs, medians printed.
  latency   one PUT at a time on an idle server (300 each): p50/p90/p99,
            single node and cluster.
  bulk      MB/s of NDJSON bulk requests (4 MB each, 1 KB documents) through
            one node: single node and cluster.
  lag       replication lag: a steady background load of PUTs through node
            A (wrk, --lag-connections, each pausing --lag-delay-ms before
            each request: by default about the bar's 5,000 writes/s, the
            rate reached is printed) while a probe PUTs through A every
            20 ms and waits on node B (GET /changes?since=E-1&waitMs=...) for
            its etag; p50/p99 of the wait, with the load's rate.
  catchup   node C stopped, PUTs through A for --seconds (then, again,
            --catchup-docs documents in bulks), C restarted: documents per
            second until C's lastEtag matches.
  bootstrap a fourth node with an empty data directory joins: MB/s of the
            snapshot it copies (from its own log line).

Run: python3 bench/cluster.py [--binary build/corvid] [--phases put,lag]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import ROOT, Client, Server, free_port, percentile, say, wrk, wrk_result  # noqa: E402

class Cluster:
    def __init__(self, binary, work, nodes=3, timeout_ms=5000):
        self.binary, self.work, self.timeout_ms = binary, work, timeout_ms
        self.nats, self.nats_ports, self.nodes = [], [], []
        route_ports = [free_port() for _ in range(3)]
        self.nats_ports = [free_port() for _ in range(3)]
        for i in range(3):
            routes = ",".join("nats://127.0.0.1:%d" % p for j, p in enumerate(route_ports) if j != i)
            log = open(os.path.join(work, "nats%d.log" % i), "ab")
            self.nats.append(subprocess.Popen(
                ["nats-server", "-a", "127.0.0.1", "-p", str(self.nats_ports[i]), "-js",
                 "-sd", os.path.join(work, "js%d" % i), "-n", "s%d" % i, "--cluster_name", "bench",
                 "--cluster", "nats://127.0.0.1:%d" % route_ports[i], "--routes", routes],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        for i in range(nodes):
            self.add_node()

    def add_node(self):
        i = len(self.nodes)
        port = free_port()
        urls = ",".join("nats://127.0.0.1:%d" % p for p in
                        [self.nats_ports[i % 3]] + [q for q in self.nats_ports if q != self.nats_ports[i % 3]])
        s = Server(self.binary, os.path.join(self.work, "node%d" % i), os.path.join(self.work, "node%d.log" % i),
                   extra_args=["--nats", urls, "--node-id", "n%d" % i,
                               "--advertise", "http://127.0.0.1:%d" % port,
                               "--nats-timeout-ms", str(self.timeout_ms)])
        s.start(port=port)
        self.nodes.append(s)
        if s.wait_healthy(90) is None:
            raise RuntimeError("node %d did not start:\n%s" % (i, s.log_tail()))
        return s

    def stop(self):
        for s in self.nodes:
            s.stop(30)
        for p in self.nats:
            p.send_signal(signal.SIGTERM)
        for p in self.nats:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def last_etag(port):
    return Client(port, 10).json("GET", "/collections")["lastEtag"]


def wait_etag(port, etag, timeout=600):
    c = Client(port, 10)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if c.json("GET", "/collections")["lastEtag"] >= etag:
            return time.perf_counter() - t0
        time.sleep(0.005)
    raise RuntimeError("etag %d not reached on port %d" % (etag, port))


def bulk_body(start, count, size=1000):
    pad = "x" * (size - 60)
    return "".join(json.dumps({"id": "d%09d" % i, "n": i, "text": pad}) + "\n"
                   for i in range(start, start + count)).encode()


def load_bulk(port, docs, per_request=4000, start=0):
    c = Client(port, 600)
    sent = 0
    t0 = time.perf_counter()
    for s in range(start, start + docs, per_request):
        body = bulk_body(s, min(per_request, start + docs - s))
        c.json("POST", "/docs/bench/_bulk", body, "application/x-ndjson")
        sent += len(body)
    return sent, time.perf_counter() - t0


def phase_put(args, single, cluster):
    rows = {"single": [], "cluster": []}
    for r in range(args.runs):
        p = wrk(single.port, 64, args.seconds, "s%d" % r)
        rows["single"].append(wrk_result(p)["req_per_s"])
        procs = [wrk(n.port, c, args.seconds, "c%d-%d" % (r, i))
                 for i, (n, c) in enumerate(zip(cluster.nodes[:3], (22, 21, 21)))]
        res = [wrk_result(p) for p in procs]
        errors = sum(x["status_errors"] + x["socket_errors"] for x in res)
        rows["cluster"].append(sum(x["req_per_s"] for x in res))
        say("  run %d: single %.0f PUT/s, cluster %.0f PUT/s (errors %d; p99 %.1f ms)"
            % (r + 1, rows["single"][-1], rows["cluster"][-1], errors, max(x["p99_us"] for x in res) / 1000))
    s, c = sorted(rows["single"])[len(rows["single"]) // 2], sorted(rows["cluster"])[len(rows["cluster"]) // 2]
    say("put: single node median %.0f PUT/s, cluster median %.0f PUT/s (%.0f%% of the single node)"
        % (s, c, 100 * c / s))


def phase_latency(single, cluster):
    for name, port in (("single", single.port), ("cluster", cluster.nodes[0].port)):
        c = Client(port, 30)
        lat = [c.request("PUT", "/docs/latency/p%d" % i, b'{"a":1}')[2] * 1000 for i in range(300)]
        say("latency %s: one PUT at a time, p50 %.2f ms, p90 %.2f ms, p99 %.2f ms"
            % (name, percentile(lat, 50), percentile(lat, 90), percentile(lat, 99)))


def phase_bulk(args, single, cluster):
    for name, port in (("single", single.port), ("cluster", cluster.nodes[0].port)):
        sent, secs = load_bulk(port, args.bulk_docs, start=10_000_000)
        say("bulk %s: %.1f MB in %.2f s = %.1f MB/s" % (name, sent / 1e6, secs, sent / 1e6 / secs))


def phase_lag(args, cluster):
    a, b = cluster.nodes[0], cluster.nodes[1]
    env = {"BENCH_DELAY_MS": str(args.lag_delay_ms)} if args.lag_delay_ms > 0 else None
    load = wrk(a.port, args.lag_connections, args.seconds, "lag", env=env)
    ca, cb = Client(a.port, 30), Client(b.port, 30)
    waits = []
    t_end = time.perf_counter() + args.seconds - 1
    time.sleep(0.5)
    i = 0
    while time.perf_counter() < t_end:
        i += 1
        e = ca.json("PUT", "/docs/probe/p%d" % i, b'{"probe":1}')["etag"]
        t0 = time.perf_counter()
        while True:
            ch = cb.json("GET", "/changes?since=%d&limit=1&waitMs=2000" % (e - 1))
            if ch.get("lastEtag", 0) >= e:
                break
        waits.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.02)
    res = wrk_result(load)
    say("lag: %d probes at %.0f writes/s through node A: visible on node B after p50 %.1f ms, p99 %.1f ms, max %.1f ms"
        % (len(waits), res["req_per_s"], percentile(waits, 50), percentile(waits, 99), max(waits)))


def phase_catchup(args, cluster):
    """Twice: entries of single PUTs (wrk through A for --seconds), then
    entries of 4,000-document bulks."""
    c = cluster.nodes[2]
    for kind in ("single PUTs", "bulks"):
        c.stop(30)
        before = last_etag(cluster.nodes[0].port)
        if kind == "bulks":
            load_bulk(cluster.nodes[0].port, args.catchup_docs, start=20_000_000)
        else:
            wrk_result(wrk(cluster.nodes[0].port, 64, args.seconds, "catchup"))
        target = last_etag(cluster.nodes[0].port)
        c.start(port=c.port)
        t0 = time.perf_counter()
        if c.wait_healthy(120) is None:
            raise RuntimeError("node C did not restart:\n" + c.log_tail())
        wait_etag(c.port, target)
        secs = time.perf_counter() - t0
        say("catchup (%s): %d documents applied by the restarted node in %.2f s (from its start) = %.0f docs/s"
            % (kind, target - before, secs, (target - before) / secs))


def phase_bootstrap(args, cluster):
    n = cluster.add_node()
    with open(n.log_path, errors="replace") as f:
        lines = [l.strip() for l in f if "bootstrapped" in l or "bootstrapping" in l]
    say("bootstrap: " + " | ".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "corvid"))
    ap.add_argument("--phases", default="put,latency,bulk,lag,catchup,bootstrap")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--bulk-docs", type=int, default=100_000)
    ap.add_argument("--lag-connections", type=int, default=64)
    ap.add_argument("--lag-delay-ms", type=int, default=7,
                    help="pause before each of the lag load's requests per connection (0: as fast as it goes)")
    ap.add_argument("--catchup-docs", type=int, default=300_000)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if not shutil.which("nats-server") or not shutil.which("wrk"):
        sys.exit("needs nats-server and wrk (scripts/setup.sh)")
    phases = args.phases.split(",")
    work = tempfile.mkdtemp(prefix="corvid-cluster-bench-")
    binary = os.path.join(work, "corvid")
    shutil.copy(args.binary, binary)
    single = Server(binary, os.path.join(work, "single"), os.path.join(work, "single.log"))
    cluster = None
    try:
        single.start()
        single.wait_healthy(30)
        cluster = Cluster(binary, work)
        say("cluster: nodes on %s; single node on %d; work dir %s"
            % ([n.port for n in cluster.nodes], single.port, work))
        if "put" in phases:
            phase_put(args, single, cluster)
        if "latency" in phases:
            phase_latency(single, cluster)
        if "bulk" in phases:
            phase_bulk(args, single, cluster)
        if "lag" in phases:
            phase_lag(args, cluster)
        if "catchup" in phases:
            phase_catchup(args, cluster)
        if "bootstrap" in phases:
            phase_bootstrap(args, cluster)
    finally:
        single.stop(30)
        if cluster:
            cluster.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
