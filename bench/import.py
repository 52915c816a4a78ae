"""`corvid import` against the raw bulk endpoint (issue 30: "corvid import of
1 GB of NDJSON through one connection >= 90% of the raw bulk endpoint's
MB/s in the same run").

One NDJSON file of --mb MB (StackOverflow-question-like documents of
~1 KB with ids, made once and kept in --file) is loaded into a fresh
`corvid serve` each time, in alternating order:
- raw: this script POSTs the file to /docs/bench/_bulk over one keep-alive
  connection, cut at line ends into --batch-bytes bodies, one after the
  other (the file is mapped; the client does nothing else);
- cli: `corvid import FILE -c bench --batch-bytes N` (its start-up, the
  file's hash and every line's check included).
MB/s is the file's size over the wall time of the whole load. Prints each
round and the medians; the ratio is cli / raw.

  python3 bench/import.py [--binary build/corvid] [--mb 1024] [--rounds 3]
"""
import argparse
import http.client
import json
import mmap
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import ROOT, Server, say  # noqa: E402

WORDS = ("index query store merge segment posting bitmap token score cluster replica snapshot commit "
         "etag change feed reduce group level facet highlight analyzer stemmer phrase fuzzy prefix").split()


def make_file(path, mb):
    if os.path.exists(path) and abs(os.path.getsize(path) - mb * 1e6) < 2e6:
        return
    rng = random.Random(7)
    target = int(mb * 1e6)
    written = 0
    with open(path + ".tmp", "w") as f:
        i = 0
        while written < target:
            doc = {"id": "q%d" % i,
                   "title": " ".join(rng.choice(WORDS) for _ in range(8)),
                   "body": " ".join(rng.choice(WORDS) for _ in range(120)),
                   "tags": [rng.choice(WORDS) for _ in range(3)],
                   "score": rng.randrange(-5, 500),
                   "createdAt": "2024-%02d-%02dT12:00:00Z" % (1 + i % 12, 1 + i % 28),
                   "owner": {"id": rng.randrange(100000), "name": rng.choice(WORDS)}}
            line = json.dumps(doc) + "\n"
            f.write(line)
            written += len(line)
            i += 1
    os.rename(path + ".tmp", path)


def start(args, work, name):
    data = os.path.join(work, name)
    shutil.rmtree(data, ignore_errors=True)
    server = Server(args.binary, data, os.path.join(work, name + ".log"))
    server.start()
    if server.wait_healthy(60) is None:
        raise RuntimeError("the server did not come up: " + server.exit_text())
    return server, data


def raw_load(port, path, batch_bytes):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        size = len(m)
        t0 = time.monotonic()
        pos = 0
        while pos < size:
            end = min(size, pos + batch_bytes)
            if end < size:
                end = m.find(b"\n", end) + 1 or size
            conn.request("POST", "/docs/bench/_bulk", body=m[pos:end],
                         headers={"Content-Type": "application/x-ndjson"})
            r = conn.getresponse()
            body = r.read()
            if r.status != 200:
                raise RuntimeError("bulk answered %d: %s" % (r.status, body[:300]))
            pos = end
        secs = time.monotonic() - t0
    conn.close()
    return size / 1e6 / secs


def cli_load(binary, port, path, batch_bytes):
    size = os.path.getsize(path)
    t0 = time.monotonic()
    proc = subprocess.run([binary, "import", path, "-c", "bench", "--batch-bytes", str(batch_bytes),
                           "--url", "http://127.0.0.1:%d" % port], capture_output=True, text=True)
    secs = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError("corvid import failed: " + proc.stderr[-2000:])
    return size / 1e6 / secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "corvid"))
    ap.add_argument("--mb", type=float, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-bytes", type=int, default=4 << 20)
    ap.add_argument("--file", default=os.path.join(tempfile.gettempdir(), "corvid-import-bench.ndjson"))
    args = ap.parse_args()
    make_file(args.file, args.mb)
    say("file: %s, %.0f MB" % (args.file, os.path.getsize(args.file) / 1e6))
    work = tempfile.mkdtemp(prefix="corvid-import-bench-")
    results = {"raw": [], "cli": []}
    try:
        for rnd in range(args.rounds):
            order = ["raw", "cli"] if rnd % 2 == 0 else ["cli", "raw"]
            for kind in order:
                server, data = start(args, work, kind)
                try:
                    if kind == "raw":
                        mbps = raw_load(server.port, args.file, args.batch_bytes)
                    else:
                        mbps = cli_load(args.binary, server.port, args.file, args.batch_bytes)
                finally:
                    server.stop()
                shutil.rmtree(data, ignore_errors=True)
                results[kind].append(mbps)
                say("round %d %-3s %.1f MB/s" % (rnd + 1, kind, mbps))
        raw, cli = statistics.median(results["raw"]), statistics.median(results["cli"])
        say("median: raw bulk %.1f MB/s, corvid import %.1f MB/s: %.0f%%" % (raw, cli, 100 * cli / raw))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
