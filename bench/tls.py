"""HTTPS against plain HTTP (issue 29: "HTTPS GET by id >= 50% of plain
HTTP's req/s with keep-alive in the same run").

One data directory with --docs small documents (~200 B, ids g0..), served
in turn by `corvid serve` over plain HTTP and over HTTPS (a self-signed
P-256 certificate made here with the openssl command), each round both
ways in alternating order; wrk (--connections keep-alive connections,
2 threads) GETs documents by random id for --seconds. Prints each round and
the medians; the ratio is HTTPS / HTTP.

  python3 bench/tls.py [--binary build/corvid] [--rounds 5] [--seconds 10]
"""
import argparse
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import ROOT, Client, Server, say, wrk, wrk_result  # noqa: E402


def make_certificate(directory):
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def serve(args, work, tls):
    extra = ["--tls-cert", tls[0], "--tls-key", tls[1]] if tls else []
    context = None
    if tls:
        context = ssl.create_default_context(cafile=tls[0])
    server = Server(args.binary, os.path.join(work, "data"), os.path.join(work, "server.log"),
                    extra_args=extra, tls_context=context)
    server.start()
    if server.wait_healthy(60) is None:
        raise RuntimeError("the server did not come up: " + server.exit_text())
    return server


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "corvid"))
    ap.add_argument("--docs", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="corvid-tls-bench-")
    try:
        tls = make_certificate(work)
        server = serve(args, work, None)
        client = Client(server.port, 30)
        lines = "".join(json.dumps({"id": "g%d" % i, "title": "document %d" % i, "n": i,
                                    "body": "x" * 150}) + "\n" for i in range(args.docs))
        client.json("POST", "/docs/bench/_bulk", lines.encode(), "application/x-ndjson")
        client.close()
        server.stop()
        rows = {"http": [], "https": []}
        for r in range(args.rounds):
            order = ["http", "https"] if r % 2 == 0 else ["https", "http"]
            for scheme in order:
                server = serve(args, work, tls if scheme == "https" else None)
                try:
                    p = wrk(server.port, args.connections, args.seconds, "tls%d" % r, "get_random.lua", scheme,
                            {"BENCH_IDS": str(args.docs)})
                    res = wrk_result(p)
                finally:
                    server.stop()
                if res["status_errors"] or res["socket_errors"]:
                    raise RuntimeError("%s round %d: errors %s" % (scheme, r + 1, res))
                rows[scheme].append(res["req_per_s"])
                say("round %d %-5s %8.0f req/s  p50 %.2f ms  p99 %.2f ms" % (
                    r + 1, scheme, res["req_per_s"], res["p50_us"] / 1000, res["p99_us"] / 1000))
        med = {k: sorted(v)[len(v) // 2] for k, v in rows.items()}
        say("median: http %.0f req/s, https %.0f req/s: https/http = %.0f%%" % (
            med["http"], med["https"], 100.0 * med["https"] / med["http"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
