"""What the benchmark scripts in bench/ share: output helpers, a keep-alive
HTTP(S) client, wrk runs, the corvid server process, a memory sampler, a
meter of the CPU other processes take, the bulk load loop, du and the
machine description. Python 3 stdlib only.

The scripts import it from their own directory (bench/), so it works when
they are run as `python3 bench/<script>.py` from anywhere.
"""
import http.client
import json
import math
import os
import re
import signal
import socket
import subprocess
import threading
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
STOP_TIMEOUT = 120             # seconds between SIGTERM and SIGKILL


def say(*parts):
    print(*parts, flush=True)


def mib(n):
    return "n/a" if n is None else "%.1f MiB" % (n / MiB)


def percentile(values, p):
    """Nearest-rank percentile of a list (None when empty)."""
    if not values:
        return None
    v = sorted(values)
    return v[max(0, min(len(v) - 1, math.ceil(p / 100 * len(v)) - 1))]


def sigterm_as_interrupt():
    """A SIGTERM to the script unwinds like Ctrl-C, through its cleanup."""
    def interrupt(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupt)


# ---------------------------------------------------------------- http

class Client:
    """One keep-alive HTTP connection with a timeout; reconnects after an
    error. With tls_context (an ssl.SSLContext), HTTPS."""

    def __init__(self, port, timeout, tls_context=None):
        self.port, self.timeout, self.conn = port, timeout, None
        self.tls_context = tls_context

    def request(self, method, path, body=None, ctype="application/json"):
        """Returns (status, body bytes, seconds); raises OSError/HTTPException
        after closing the connection if the call failed."""
        if self.conn is None and self.tls_context is not None:
            self.conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=self.timeout,
                                                    context=self.tls_context)
        elif self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        headers = {"Content-Type": ctype} if body is not None else {}
        t0 = time.perf_counter()
        try:
            self.conn.request(method, path, body=body, headers=headers)
            r = self.conn.getresponse()
            payload = r.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        return r.status, payload, time.perf_counter() - t0

    def json(self, method, path, body=None, ctype="application/json", ok=None):
        """The decoded JSON answer; RuntimeError unless the status is in `ok`
        (None: any status below 300)."""
        status, payload, _ = self.request(method, path, body, ctype)
        if (status >= 300) if ok is None else (status not in ok):
            raise RuntimeError("%s %s -> %d %s" % (method, path, status, payload[:300]))
        return json.loads(payload)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


WRK_DIR = os.path.join(ROOT, "bench", "wrk")


def wrk(port, connections, seconds, run_id, script="put_unique.lua", scheme="http", env=None):
    """Starts wrk (at most 2 threads) with a script from bench/wrk; its
    result comes from wrk_result."""
    env = dict(os.environ, BENCH_COLLECTION="bench", BENCH_RUN=run_id, **(env or {}))
    threads = max(1, min(2, connections))
    return subprocess.Popen(["wrk", "-t%d" % threads, "-c%d" % connections, "-d%ds" % seconds,
                             "-s", os.path.join(WRK_DIR, script), "%s://127.0.0.1:%d" % (scheme, port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)


def wrk_result(proc):
    """The WRK_RESULT line's figures (bench/wrk/report.lua) as floats."""
    out = proc.communicate()[0]
    m = re.search(r"WRK_RESULT (.*)", out)
    if not m:
        raise RuntimeError("wrk printed no result:\n" + out)
    return {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- server

class ServerDied(Exception):
    pass


class Server:
    """corvid serve on a free port with its own data dir. With a cgroup
    (an object with a .path), it starts inside it through a small sh
    wrapper that puts itself into cgroup.procs and then execs the server
    (so Popen.pid is the server's pid, and our client is not in the cgroup)."""

    def __init__(self, binary, data, log_path, cgroup=None, extra_args=(), tls_context=None):
        self.binary, self.data, self.log_path = binary, data, log_path
        self.cgroup, self.extra_args = cgroup, list(extra_args)
        self.tls_context = tls_context  # an HTTPS server (--tls-cert in extra_args): how to reach it
        self.proc, self.port = None, None

    def start(self, port=None):
        """Starts the process (it does not wait for it: see wait_healthy) on
        `port`, or on a free one."""
        self.port = port or free_port()
        cmd = [self.binary, "serve", "--data", self.data, "--listen", "127.0.0.1:%d" % self.port] \
            + self.extra_args
        if self.cgroup is not None:
            cmd = ["sh", "-c", 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"', "sh",
                   self.cgroup.path] + cmd
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def exit_text(self):
        rc = self.proc.returncode if self.proc else None
        if rc is None:
            return "running"
        return "killed by signal %d (%s)" % (-rc, signal.Signals(-rc).name) if rc < 0 else "exit status %d" % rc

    def wait_until(self, check, timeout):
        """Seconds from now until check() is true (polled every 10 ms), or
        None if the server exited or the time ran out."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            if not self.alive():
                return None
            try:
                if check():
                    return time.perf_counter() - t0
            except (OSError, http.client.HTTPException, ValueError):
                pass
            time.sleep(0.01)
        return None

    def wait_healthy(self, timeout):
        """Seconds until GET /health answers 200 (on a fresh connection with a
        2-s timeout), or None if the server exited or the time ran out."""
        client = Client(self.port, 2, self.tls_context)
        try:
            return self.wait_until(lambda: client.request("GET", "/health")[0] == 200, timeout)
        finally:
            client.close()

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM, then SIGKILL after timeout. Returns (seconds until exit,
        killed?) or (None, False) if it was not running."""
        if not self.alive():
            return None, False
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
            return time.perf_counter() - t0, False
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
            return time.perf_counter() - t0, True

    def log_tail(self, lines=15):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


class ServerSteps:
    """For a run's state object holding the server as self.server: a death
    check, and HTTP steps whose failure while the server is gone is its death."""

    def check_alive(self, phase):
        if not self.server.alive():
            raise ServerDied(phase)

    def call(self, phase, fn):
        """Runs an HTTP step; a failure while the server is gone is its death."""
        try:
            return fn()
        except (OSError, http.client.HTTPException):
            for _ in range(20):           # a killed server may take a moment to be reaped
                self.check_alive(phase)
                time.sleep(0.1)
            raise


# ---------------------------------------------------------------- measuring

def proc_memory(pid):
    """VmRSS, RssAnon and RssFile of a process, in bytes, from /proc/PID/status
    (raises OSError or ValueError)."""
    figures = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "RssAnon", "RssFile"):
                figures[key] = int(line.split()[1]) * 1024
    return figures


class MemorySampler(threading.Thread):
    """Every `interval` seconds, the figures read() returns (a dict, or None
    to skip that sample); keeps their peaks per phase and overall ("all"),
    and with count_samples how many samples each scope took ("samples")."""

    def __init__(self, interval, count_samples=False):
        super().__init__(daemon=True)
        self.interval, self.count_samples = interval, count_samples
        self.phase = "start"
        self.peaks = {}          # phase -> {figure: peak}
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def read(self):
        raise NotImplementedError

    def run(self):
        while not self.stopping.wait(self.interval):
            self.sample()

    def sample(self):
        figures = self.read()
        if figures is None:
            return {}
        with self.lock:
            for scope in (self.phase, "all"):
                peaks = self.peaks.setdefault(scope, {"samples": 0} if self.count_samples else {})
                if self.count_samples:
                    peaks["samples"] += 1
                for k, v in figures.items():
                    peaks[k] = max(peaks.get(k, 0), v)
        return figures

    def begin(self, phase):
        """Starts a phase; returns the figures at its start."""
        with self.lock:
            self.phase = phase
        return self.sample()

    def phase_peaks(self, phase):
        with self.lock:
            return dict(self.peaks.get(phase, {}))


class CpuMeter:
    """The share of the machine's CPU time used by anything but the server
    and this client (its threads and its waited-for children, e.g. wrk)
    between construction and others_percent(), as bench/run.sh's `measure`:
    on 2 cores any other process skews every figure."""

    def __init__(self, server_pid):
        self.pid = server_pid
        self.start = self._now()

    def _now(self):
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:9]]
        try:
            with open("/proc/%d/stat" % self.pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            server = int(fields[11]) + int(fields[12])     # utime + stime
        except (OSError, IndexError, ValueError):
            server = 0
        t = os.times()
        client = (t.user + t.system + t.children_user + t.children_system) * os.sysconf("SC_CLK_TCK")
        return sum(cpu), sum(cpu) - cpu[3] - cpu[4], server, client

    def server_seconds(self):
        return (self._now()[2] - self.start[2]) / os.sysconf("SC_CLK_TCK")

    def others_percent(self):
        total0, busy0, server0, client0 = self.start
        total, busy, server, client = self._now()
        others = (busy - busy0) - (server - server0) - (client - client0)
        return max(0.0, 100.0 * others / (total - total0)) if total > total0 else 0.0


def bulk_load(steps, phase, client, collection, batches):
    """POSTs each NDJSON body of `batches` ((body, docs in it, seconds spent
    generating it) tuples) to /docs/<collection>/_bulk on `client`, checking
    each answer's count; `steps` is a ServerSteps. Returns the figures
    (json_bytes, docs, requests, last_etag, times, rates, others_cpu_percent)
    and the zlib -6 ratio of the first body."""
    json_bytes = docs = requests = 0
    in_requests = generating = 0.0
    ratio = None
    last_etag = 0
    cpu = CpuMeter(steps.server.pid)
    t0 = time.perf_counter()
    for body, count, gen_seconds in batches:
        generating += gen_seconds
        if ratio is None:
            ratio = len(body) / len(zlib.compress(body, 6))
        status, payload, seconds = steps.call(phase, lambda: client.request(
            "POST", "/docs/%s/_bulk" % collection, body, "application/x-ndjson"))
        if status != 200:
            steps.check_alive(phase)
            raise RuntimeError("bulk request %d -> %d %s" % (requests + 1, status, payload[:300]))
        answer = json.loads(payload)
        if answer.get("count") != count:
            raise RuntimeError("bulk request %d stored %s of %d docs" % (requests + 1, answer.get("count"), count))
        last_etag = answer["lastEtag"]
        in_requests += seconds
        json_bytes += len(body)
        docs += count
        requests += 1
    wall = time.perf_counter() - t0
    figures = {
        "docs": docs, "json_bytes": json_bytes, "requests": requests, "last_etag": last_etag,
        "seconds_in_requests": in_requests, "seconds_generating": generating, "seconds_wall": wall,
        "mb_per_s": json_bytes / 1e6 / in_requests, "docs_per_s": docs / in_requests,
        "mb_per_s_end_to_end": json_bytes / 1e6 / wall, "others_cpu_percent": cpu.others_percent(),
    }
    return figures, ratio


def ndjson_batches(document, count, batch_bytes):
    """NDJSON bodies of documents document(0) .. document(count - 1), each
    about batch_bytes: yields (body bytes, docs in it, seconds spent
    generating it, (its largest line's bytes, that doc's number))."""
    n = 0
    while n < count:
        t0 = time.perf_counter()
        lines, size, largest = [], 0, (0, -1)
        while n < count and size < batch_bytes:
            line = json.dumps(document(n), separators=(",", ":")) + "\n"
            lines.append(line)
            size += len(line)
            largest = max(largest, (len(line) - 1, n))
            n += 1
        body = "".join(lines).encode()
        yield body, len(lines), time.perf_counter() - t0, largest


def du_bytes(path):
    """Allocated bytes under path (as du), and their apparent size."""
    allocated = apparent = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            allocated += st.st_blocks * 512
            apparent += st.st_size
    return allocated, apparent


def store_figures(data, json_bytes):
    """The store's size on disk (du of DATA/store) and over the JSON bytes."""
    store_du, store_apparent = du_bytes(os.path.join(data, "store"))
    return {"store_du_bytes": store_du, "store_apparent_bytes": store_apparent,
            "store_over_json": store_du / json_bytes}


# ---------------------------------------------------------------- machine

def machine_facts(source):
    """(CPU model, RAM bytes, CMake build type) of this machine and of the
    build directory the binary `source` lives in."""
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    ram = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal"))
    build_type = "?"
    cache = os.path.join(os.path.dirname(source), "CMakeCache.txt")
    if os.path.exists(cache):
        build_type = next((l.split("=", 1)[1].strip() for l in open(cache)
                           if l.startswith("CMAKE_BUILD_TYPE:")), "?")
    return cpu, ram, build_type


def git_output(directory, *args):
    """What `git -C directory ARGS` prints, stripped ("" on failure)."""
    return subprocess.run(["git", "-C", directory] + list(args), capture_output=True,
                          text=True).stdout.strip()


def built_at(path):
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.path.getmtime(path)))
