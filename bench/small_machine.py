#!/usr/bin/env python3
"""The small-machine benchmark (issue 26): Corvid inside a memory cgroup.

Starts `corvid serve` in a fresh cgroup v1 memory cgroup (optionally capped),
feeds it StackOverflow-question-like documents and prints, phase by phase,
what it measured and how much memory the server and its page cache took.

Phases (run in this order; --phases picks a subset):

  load     bulk-load --docs documents (~2.3 KB of JSON each, generated from
           --seed while they are sent: the corpus is never held in memory
           nor written to disk) as ~6 MB NDJSON requests on one keep-alive
           connection: MB/s and docs/s, then the store's size on disk (du)
           over the JSON bytes.
  overwrite  rewrites every document once, in random id order (new bodies
           from the generator's vocabulary, drawn with seed --seed + 1), as
           load does: MB/s, then
           the store's size again (how much of the space the old bodies
           leave is reused). Not in the default set.
  get      random GET /docs/questions/q%2F<n> over every id with 64
           connections for --get-seconds, first cold (page cache dropped)
           then hot: req/s, p50, p99. The client is wrk (bench/wrk/
           get_random.lua) when it is installed, else Python threads.
  build    defines a map/reduce index (count and sum of score by month of
           createdAt) and a search index (title, body, tags, score) at once
           and polls GET /admin/indexes every second until both have
           processed the last write: docs/s per minute from lastIndexedEtag
           deltas (min, median), the reported docsPerSec, the admin call's
           latency, and the p99 of searches and a /results query sent every
           second meanwhile; the total build time.
  sigterm  SIGTERM, time until the process exits (with
           --sigterm-during-build it is sent once both indexes are half-way,
           and the restart phase then waits for the rest of the build).
  restart  drops the page cache, starts the server again on the same data:
           time until /health answers and until a GET works, one more GET
           phase, and the rest of the build if SIGTERM interrupted it.

Throughout, a sampler reads the cgroup's memory.stat and max usage and the
process's VmRSS/RssAnon/RssFile every second; each phase prints its peaks,
and the run ends with the overall peaks and whether the cgroup reports an
OOM kill. If the server dies, the run says in which phase and stops. Each
timed phase also says how much of the CPU other processes took meanwhile
(as bench/run.sh does: on 2 cores anything else skews every figure).

The server runs from a private copy of --binary (a rebuild during the run
cannot swap it), in a cgroup named corvid-small-machine-<pid> that is
removed at the end, as is the temp data dir (unless --keep or --data).
Needs root (cgroup v1 memory controller at /sys/fs/cgroup/memory, and
/proc/sys/vm/drop_caches for the cold phases). Python 3 stdlib only.

  nice -n 10 python3 bench/small_machine.py --docs 200000 --cap-mib 1024
  python3 bench/small_machine.py --docs 20000 --phases load,get --json
  python3 bench/small_machine.py --docs 200000 --cap-mib 512 --sigterm-during-build
  python3 bench/small_machine.py --data DIR --keep --phases load     # then, on DIR:
  python3 bench/small_machine.py --data DIR --phases get,build

MB means 10^6 bytes of JSON; MiB 2^20 bytes of memory or disk.
"""
import argparse
import bisect
import http.client
import itertools
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (ROOT, MiB, STOP_TIMEOUT, Client, CpuMeter, MemorySampler, Server,  # noqa: E402
                          ServerDied, ServerSteps, bulk_load, built_at, du_bytes, git_output,
                          machine_facts, mib, ndjson_batches, percentile, proc_memory, say, sigterm_as_interrupt,
                          store_figures)

CGROUP_ROOT = "/sys/fs/cgroup/memory"
COLLECTION = "questions"
MAPREDUCE_INDEX = "questions_by_month"
SEARCH_INDEX = "questions_search"
ALL_PHASES = ("load", "get", "build", "sigterm", "restart")
OPTIONAL_PHASES = ("overwrite",)  # run only when --phases names them
BATCH_BYTES = 6_000_000        # one bulk request (the issue asks for 4-8 MB)
GET_CONNECTIONS = 64
HTTP_TIMEOUT = 30              # seconds, every control-plane call
BULK_TIMEOUT = 600             # seconds, one bulk request
BUILD_TIMEOUT = 4 * 3600       # seconds, the whole index build


# ---------------------------------------------------------------- corpus

# The most frequent ranks of the vocabulary: common English and the words
# every programming question uses. Below them come ~50k synthetic words.
COMMON_WORDS = list(dict.fromkeys("""
the of and to a in is it you that this for i with on not be are have as can
but if or from at my an by what use using there when how error code file
function value was all do get so we will like one would new which data they
me just set your want need work any also way some only other should does
same then make here into now problem trying return string class method list
array object type name line example run test after first without server
user output time each more could than been has following question call
result working solution tried know why where instead case issue change
version table query database page app android java python javascript button
image text form window event loop variable null int number key map request
response thread memory index update create delete add remove find show
""".split()))
ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
          "w", "z", "br", "ch", "cl", "cr", "dr", "fl", "gr", "pl", "pr", "sh", "sl", "st", "str",
          "th", "tr"]
VOWELS = ["a", "e", "i", "o", "u", "ea", "ou", "io", "ai", "y", "ee", "oo"]
CODAS = ["", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "st", "ck", "rt", "x", "ble", "tion",
         "ment", "er", "ed", "ing", "ly"]
REAL_TAGS = ["javascript", "python", "java", "c#", "php", "android", "html", "jquery", "c++",
             "css", "ios", "sql", "mysql", "r", "node.js", "reactjs", "arrays", "c", "asp.net",
             "json", "ruby-on-rails", ".net", "sql-server", "swift", "python-3.x", "objective-c",
             "django", "angular", "excel", "regex", "pandas", "iphone", "ruby", "linux", "ajax",
             "typescript", "xml", "vba", "spring", "database", "wordpress", "string", "git"]
VOCAB_SIZE = 50_000
PHRASES = 3000          # multi-word units: real text repeats word pairs, LZ finds them
PHRASE_SHARE = 0.3      # share of draws that are phrases; with PHRASE_S, tuned so that
PHRASE_S = 0.8          # zlib -6 packs the JSON ~2.6x (English prose: 2.3-2.9x) and the
                        # most common phrase comes ~3 times a document (as "of the")
TAG_COUNT = 2000
ZIPF_S = 1.0
FIRST_SECOND = 1199145600   # 2008-01-01T00:00:00Z
LAST_SECOND = 1735689599    # 2024-12-31T23:59:59Z


def zipf_cumulative(n, s=ZIPF_S):
    return list(itertools.accumulate(1.0 / (i + 1) ** s for i in range(n)))


def synthetic_words(rng, n, taken):
    """n distinct pronounceable words, shorter ones first (they get the
    higher Zipf ranks, as in real text)."""
    taken = set(taken)
    words = []
    while len(words) < n:
        syllables = rng.choice((1, 2, 2, 2, 3, 3, 4))
        w = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(syllables)) + rng.choice(CODAS)
        if len(w) >= 2 and w not in taken:
            taken.add(w)
            words.append(w)
    words.sort(key=lambda w: len(w) + rng.random() * 6)
    return words


class Corpus:
    """StackOverflow-question-like documents, generated in order from a seed.

    Document n has id "q/<n>"; the stream is deterministic for a given seed
    as long as it is read from n = 0, which is how the load phase reads it.
    Nothing but the vocabulary (~50k words) and one batch is held at a time.
    """

    def __init__(self, seed):
        rng = random.Random(seed)
        self.vocab = COMMON_WORDS + synthetic_words(rng, VOCAB_SIZE - len(COMMON_WORDS), COMMON_WORDS)
        word_cum = zipf_cumulative(len(self.vocab))
        phrases = [" ".join(rng.choices(self.vocab, cum_weights=word_cum, k=rng.randint(2, 4)))
                   for _ in range(PHRASES)]
        phrase_cum = zipf_cumulative(PHRASES, PHRASE_S)
        # One table for words and phrases: phrases weigh PHRASE_SHARE of it.
        scale = PHRASE_SHARE / (1 - PHRASE_SHARE) * word_cum[-1] / phrase_cum[-1]
        self.units = self.vocab + phrases
        self.unit_cum = word_cum + [word_cum[-1] + c * scale for c in phrase_cum]
        self.word_cum = word_cum
        extra = TAG_COUNT - len(REAL_TAGS)
        self.tags = REAL_TAGS + ["%s-%s" % (w, rng.choice(("js", "api", "2", "cli", "sdk", "db")))
                                 if i % 3 == 0 else w
                                 for i, w in enumerate(synthetic_words(rng, extra, self.vocab))]
        self.tag_cum = zipf_cumulative(len(self.tags), 0.9)
        self.rng = random.Random(seed * 7919 + 1)

    def _sentences(self, target_bytes):
        rng, parts, size = self.rng, [], 0
        while size < target_bytes:
            words = rng.choices(self.units, cum_weights=self.unit_cum, k=48)
            i = 0
            while i < len(words) and size < target_bytes:
                n = rng.randint(5, 16)
                s = " ".join(words[i:i + n])
                s = s[0].upper() + s[1:] + rng.choice("....?,")
                if s.endswith(","):
                    s = s[:-1] + "."
                parts.append(s)
                size += len(s) + 1
                i += n
        return " ".join(parts)

    def document(self, n):
        rng = self.rng
        title = " ".join(rng.choices(self.vocab, cum_weights=self.word_cum, k=rng.randint(8, 12)))
        title = title[0].upper() + title[1:] + ("?" if rng.random() < 0.5 else "")
        tags = []
        for t in rng.choices(self.tags, cum_weights=self.tag_cum, k=rng.choice((1, 2, 2, 3, 3, 3, 4, 4, 5))):
            if t not in tags:
                tags.append(t)
        score = int(rng.paretovariate(1.3)) - 1
        if rng.random() < 0.08:
            score = -rng.randint(1, 8)
        # A few thousand frequent askers, and a long tail of one-off ones.
        owner_id = rng.randint(1, 5000) if rng.random() < 0.3 else rng.randint(5001, 4_000_000)
        owner_name = "%s %s" % (self.vocab[owner_id * 7 % VOCAB_SIZE].capitalize(),
                                self.vocab[owner_id * 13 % VOCAB_SIZE].capitalize())
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                time.gmtime(rng.randint(FIRST_SECOND, LAST_SECOND)))
        return {"id": "q/%d" % n, "title": title, "body": self._sentences(rng.randint(1500, 2600)),
                "tags": tags, "score": min(score, 30000), "createdAt": created,
                "owner": {"id": owner_id, "name": owner_name}}

    def batches(self, count, batch_bytes=BATCH_BYTES):
        """Yields (ndjson_bytes, docs_in_it, seconds_spent_generating)."""
        for body, docs, seconds, _ in ndjson_batches(self.document, count, batch_bytes):
            yield body, docs, seconds

    def query_words(self):
        """A few words at different frequencies, for searches during the build."""
        return ["error", "function value", self.vocab[len(COMMON_WORDS) + 50],
                self.vocab[len(COMMON_WORDS) + 2000], 'tags:"%s"' % self.tags[0]]


def doc_path(n):
    return "/docs/%s/q%%2F%d" % (COLLECTION, n)   # '/' inside an id must be percent-encoded


# ---------------------------------------------------------------- cgroup, server

class MemoryCgroup:
    """A cgroup v1 memory cgroup of our own, capped at cap_mib (0: no cap)."""

    def __init__(self, name, cap_mib):
        self.path = os.path.join(CGROUP_ROOT, name)
        os.mkdir(self.path)
        if cap_mib:
            self.write("memory.limit_in_bytes", str(cap_mib * MiB))

    def read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def stat(self):
        return {k: int(v) for k, v in (line.split() for line in self.read("memory.stat").splitlines())}

    def number(self, name):
        return int(self.read(name).strip())

    def oom(self):
        """memory.oom_control as a dict: oom_kill_disable, under_oom, oom_kill."""
        return {k: int(v) for k, v in (line.split() for line in self.read("memory.oom_control").splitlines())}

    def reset_peak(self):
        try:
            self.write("memory.max_usage_in_bytes", "0")
        except OSError:
            pass

    def remove(self):
        """Kills what is still in it (only our server can be), then removes it."""
        for pid in self.read("cgroup.procs").split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return True
            except OSError:
                time.sleep(0.1)
        return False


class CgroupSampler(MemorySampler):
    """Every second: the cgroup's memory.stat and max usage, and the server
    process's VmRSS/RssAnon/RssFile; keeps the peaks per phase and overall."""

    STAT_KEYS = ("rss", "cache", "mapped_file", "total_rss", "total_cache")

    def __init__(self, cgroup, server):
        super().__init__(1.0)
        self.cgroup, self.server = cgroup, server

    def read(self):
        figures = {}
        try:
            stat = self.cgroup.stat()
            for k in self.STAT_KEYS:
                figures["cgroup_" + k] = stat.get(k, 0)
            figures["cgroup_max_usage"] = self.cgroup.number("memory.max_usage_in_bytes")
            figures["cgroup_usage"] = self.cgroup.number("memory.usage_in_bytes")
        except (OSError, ValueError):
            pass
        pid = self.server.pid
        if pid and self.server.alive():
            try:
                figures.update(proc_memory(pid))
            except (OSError, ValueError):
                pass
        return figures


def drop_caches():
    """sync; echo 3 > /proc/sys/vm/drop_caches. Returns None or why not."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        return None
    except OSError as e:
        return str(e)


# ---------------------------------------------------------------- phases

class Run(ServerSteps):
    """The state shared by the phases: the server, the cgroup, the figures."""

    def __init__(self, args, server, cgroup, sampler):
        self.args, self.server, self.cgroup, self.sampler = args, server, cgroup, sampler
        self.summary = {"phases": {}}
        self.docs = None           # documents in the collection
        self.last_etag = None      # the last write's etag
        self.build_done = False
        self.corpus = None

    def begin(self, phase):
        self.sampler.phase = phase
        self.cgroup.reset_peak()
        self.check_alive(phase)

    def end(self, phase, figures):
        """Prints the phase's memory peaks and stores its figures."""
        self.sampler.sample()
        p = self.sampler.phase_peaks(phase)
        figures["memory"] = p
        self.summary["phases"][phase] = figures
        say("  memory[%s]: peak RssAnon %s, VmRSS %s, RssFile %s; cgroup peak rss %s, cache %s, "
            "max_usage %s" % (phase, mib(p.get("RssAnon")), mib(p.get("VmRSS")), mib(p.get("RssFile")),
                              mib(p.get("cgroup_rss")), mib(p.get("cgroup_cache")),
                              mib(p.get("cgroup_max_usage"))))
        self.check_alive(phase)

    def client(self, timeout=HTTP_TIMEOUT):
        return Client(self.server.port, timeout)

    def collection_state(self):
        """(documents in the collection, the server's last etag)."""
        client = self.client()
        c = self.call(self.sampler.phase, lambda: client.json("GET", "/collections"))
        client.close()
        count = next((x["count"] for x in c["collections"] if x["name"] == COLLECTION), 0)
        return count, c["lastEtag"]


def phase_load(run):
    """Bulk-loads --docs documents as ~6 MB NDJSON requests on one connection."""
    run.begin("load")
    conn = run.client(BULK_TIMEOUT)
    figures, ratio = bulk_load(run, "load", conn, COLLECTION, run.corpus.batches(run.args.docs))
    conn.close()
    run.docs, run.last_etag = run.collection_state()
    figures.update(store_figures(run.args.data, figures["json_bytes"]))
    figures["zlib6_ratio_first_batch"] = ratio
    docs, json_bytes, requests = figures["docs"], figures["json_bytes"], figures["requests"]
    in_requests, wall = figures["seconds_in_requests"], figures["seconds_wall"]
    generating, others = figures["seconds_generating"], figures["others_cpu_percent"]
    say("load: %d docs, %.1f MB of JSON (%.0f B/doc, zlib-6 compresses it %.2fx) in %d bulk requests "
        "of ~%d MB on one connection" % (docs, json_bytes / 1e6, json_bytes / docs, ratio, requests,
                                         BATCH_BYTES // 1_000_000))
    say("  %.1f MB/s, %.0f docs/s (time in requests: %.2f s); end to end with generation %.1f MB/s "
        "(%.2f s, of which %.2f s generating in Python); other processes used %.0f%% of the CPU" % (
            figures["mb_per_s"], figures["docs_per_s"], in_requests, figures["mb_per_s_end_to_end"],
            wall, generating, others))
    say("  store: %s on disk (du of %s/store; apparent %s) = %.2fx the JSON; collection count %d, "
        "lastEtag %d" % (mib(figures["store_du_bytes"]), run.args.data, mib(figures["store_apparent_bytes"]),
                         figures["store_over_json"], run.docs, run.last_etag))
    run.end("load", figures)


def phase_overwrite(run):
    """Rewrites every document once, in random id order, as load writes them."""
    run.begin("overwrite")
    docs = run.docs or run.args.docs
    order = list(range(docs))
    random.Random(run.args.seed + 1).shuffle(order)
    corpus = Corpus(run.args.seed)  # the same vocabulary (the dictionary was trained on it), other documents
    corpus.rng = random.Random(run.args.seed + 1)

    def document(i):
        doc = corpus.document(i)
        doc["id"] = "q/%d" % order[i]
        return doc

    batches = ((body, count, seconds) for body, count, seconds, _ in ndjson_batches(document, docs, BATCH_BYTES))
    conn = run.client(BULK_TIMEOUT)
    figures, _ = bulk_load(run, "overwrite", conn, COLLECTION, batches)
    conn.close()
    run.docs, run.last_etag = run.collection_state()
    figures.update(store_figures(run.args.data, figures["json_bytes"]))
    say("overwrite: %d docs rewritten in random id order, %.1f MB/s (time in requests: %.2f s); "
        "store: %s on disk = %.2fx the JSON; collection count %d, lastEtag %d" % (
            figures["docs"], figures["mb_per_s"], figures["seconds_in_requests"], mib(figures["store_du_bytes"]),
            figures["store_over_json"], run.docs, run.last_etag))
    run.end("overwrite", figures)


def wrk_usable(args):
    return args.client in ("auto", "wrk") and shutil.which("wrk") and os.path.exists(
        os.path.join(ROOT, "bench", "wrk", "get_random.lua"))


def get_with_wrk(run, seconds):
    env = dict(os.environ, BENCH_COLLECTION=COLLECTION, BENCH_ID_PREFIX="q%2F", BENCH_IDS=str(run.docs))
    cmd = ["wrk", "-t1", "-c%d" % GET_CONNECTIONS, "-d%ds" % seconds, "--timeout", "10s", "-s",
           os.path.join(ROOT, "bench", "wrk", "get_random.lua"), "http://127.0.0.1:%d" % run.server.port]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=seconds + 120).stdout
    line = next((l for l in out.splitlines() if l.startswith("WRK_RESULT ")), None)
    if line is None:
        raise RuntimeError("wrk printed no WRK_RESULT line: %s" % out[-500:])
    r = dict(kv.split("=") for kv in line.split()[1:])
    return {"client": "wrk -t1 -c%d (bench/wrk/get_random.lua)" % GET_CONNECTIONS,
            "requests": int(r["requests"]), "req_per_s": float(r["req_per_s"]),
            "p50_ms": int(r["p50_us"]) / 1e3, "p99_ms": int(r["p99_us"]) / 1e3,
            "max_ms": int(r["max_us"]) / 1e3,
            "errors": int(r["status_errors"]) + int(r["socket_errors"])}


def get_with_python(run, seconds):
    deadline = time.perf_counter() + seconds
    latencies, errors = [], [0]
    lock = threading.Lock()

    def worker(i):
        rng = random.Random(run.args.seed * 1000 + i)
        client, mine, bad = run.client(10), [], 0
        while time.perf_counter() < deadline:
            try:
                status, _, took = client.request("GET", doc_path(rng.randrange(run.docs)))
                mine.append(took)
                bad += status != 200
            except (OSError, http.client.HTTPException):
                bad += 1
                time.sleep(0.01)
        client.close()
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(GET_CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    wall = time.perf_counter() - t0
    return {"client": "Python, %d threads each with its own keep-alive connection (the GIL bounds it: "
                      "a floor, not the server's rate)" % GET_CONNECTIONS,
            "requests": len(latencies), "req_per_s": len(latencies) / wall,
            "p50_ms": percentile(latencies, 50) * 1e3 if latencies else None,
            "p99_ms": percentile(latencies, 99) * 1e3 if latencies else None,
            "max_ms": max(latencies) * 1e3 if latencies else None, "errors": errors[0]}


def phase_get(run, name, drop_cache, cold_start=False):
    """Random GETs over every id with 64 connections for --get-seconds;
    drop_cache: drop the page cache first (a cold phase)."""
    run.begin(name)
    if not run.docs:
        raise RuntimeError("no documents in '%s': run the load phase or pass --data with a loaded store"
                           % COLLECTION)
    note, cold = "", cold_start
    if drop_cache:
        why_not = drop_caches()
        cold = why_not is None
        if why_not:
            note = "; cold NOT possible (drop_caches: %s), so this is warm" % why_not
        else:
            st = run.sampler.sample()
            note = "; page cache dropped (left: cgroup cache %s, server RssFile %s: mapped pages stay)" % (
                mib(st.get("cgroup_cache")), mib(st.get("RssFile")))
    probe = run.client()
    status, _, _ = run.call(name, lambda: probe.request("GET", doc_path(run.docs - 1)))
    probe.close()
    if status != 200:
        raise RuntimeError("GET %s -> %d" % (doc_path(run.docs - 1), status))
    seconds = run.args.get_seconds
    cpu = CpuMeter(run.server.pid)
    r = get_with_wrk(run, seconds) if wrk_usable(run.args) else get_with_python(run, seconds)
    r["cold"] = cold
    r["others_cpu_percent"] = cpu.others_percent()
    say("%s: %.0f req/s, p50 %.2f ms, p99 %.2f ms, max %.1f ms, %d errors; %d requests in %d s over %d ids; "
        "client: %s; other processes used %.0f%% of the CPU%s" % (
            name, r["req_per_s"], r["p50_ms"] or 0, r["p99_ms"] or 0, r["max_ms"] or 0, r["errors"],
            r["requests"], seconds, run.docs, r["client"], r["others_cpu_percent"], note))
    run.end(name, r)


INDEX_DEFINITIONS = {
    MAPREDUCE_INDEX: {
        "type": "mapreduce", "collection": COLLECTION,
        "map": {"month": "date_trunc('month', createdAt)", "score": "score"},
        "groupBy": ["month"],
        "reduce": {"questions": "count()", "totalScore": "sum(score)"}},
    SEARCH_INDEX: {
        "type": "search", "collection": COLLECTION,
        "fields": {"title": {"analyzer": "standard", "boost": 2.0}, "body": {"analyzer": "english"},
                   "tags": {"analyzer": "keyword"}, "score": {"type": "number"}}},
}


class QueryLoad(threading.Thread):
    """While the build runs: every second, each search query once and one
    /results query, on one keep-alive connection; keeps their latencies."""

    def __init__(self, run):
        super().__init__(daemon=True)
        self.run_ = run
        self.paths = [("search", q, "/indexes/%s/search?limit=10&q=%s" % (SEARCH_INDEX, urllib.parse.quote(q)))
                      for q in run.corpus.query_words()]
        self.paths.append(("results", "rows", "/indexes/%s/results?limit=1000" % MAPREDUCE_INDEX))
        self.latency = {"search": [], "results": []}
        self.totals = {}      # query -> "total" of its last answer (a sanity check)
        self.failures = {"search": 0, "results": 0}
        self.stopping = threading.Event()

    def run(self):
        client = self.run_.client(10)
        while not self.stopping.is_set():
            tick = time.perf_counter()
            for kind, query, path in self.paths:
                try:
                    status, payload, took = client.request("GET", path)
                    self.latency[kind].append(took)
                    self.failures[kind] += status != 200
                    if status == 200:
                        self.totals[query] = json.loads(payload).get("total")
                except (OSError, http.client.HTTPException, ValueError):
                    self.failures[kind] += 1
            self.stopping.wait(max(0.0, 1.0 - (time.perf_counter() - tick)))
        client.close()


def minute_rates(samples, width=60.0):
    """docs/s over consecutive windows of `width` seconds, from (t, etag)
    samples taken until the index was done. A last partial window counts if
    it is at least 10 s long or the only one. Returns (rates, partial?)."""
    if len(samples) < 2:
        return [], False
    rates, (t0, e0) = [], samples[0][:2]
    partial = False
    for t, e, *_ in samples[1:]:
        if t - t0 >= width:
            rates.append((e - e0) / (t - t0))
            t0, e0 = t, e
    t, e = samples[-1][:2]
    if t > t0 and (t - t0 >= 10 or not rates):
        rates.append((e - e0) / (t - t0))
        partial = True
    return rates, partial


def reported_rate_errors(samples, width=60.0):
    """How far each reported docsPerSec is from the rate lastIndexedEtag
    moved at over the same trailing window: for every poll at least `width`
    seconds after the first, reported / ((e(t) - e(t - width)) / width) - 1,
    e(t - width) interpolated between the polls around it. The server's
    window is the same minute (batches that ended in it, from the start of
    the earliest), so the two differ by at most a batch at either end.
    `samples` are (t, lastIndexedEtag, docsPerSec) until the index was
    done. Returns the relative errors."""
    errors = []
    times = [s[0] for s in samples]
    for t, e, reported in samples:
        start = t - width
        if start < samples[0][0] or not reported:
            continue
        before = samples[bisect.bisect_right(times, start) - 1]   # the last poll at or before start
        after = samples[bisect.bisect_left(times, start)]         # the first at or after it
        e0 = before[1] if after[0] == before[0] else \
            before[1] + (after[1] - before[1]) * (start - before[0]) / (after[0] - before[0])
        measured = (e - e0) / width
        if measured > 0:
            errors.append(reported / measured - 1)
    return errors


def phase_build(run, name="build"):
    """Defines both indexes at once (unless resuming) and polls
    /admin/indexes every second until both reached the last write's etag."""
    run.begin(name)
    resume = name != "build"
    if run.last_etag is None:
        run.docs, run.last_etag = run.collection_state()
    target = run.last_etag
    control = run.client()
    cpu = CpuMeter(run.server.pid)
    t0 = time.perf_counter()
    if not resume:
        for index, definition in INDEX_DEFINITIONS.items():
            status, payload, _ = run.call(name, lambda: control.request(
                "PUT", "/indexes/%s" % index, json.dumps(definition)))
            if status not in (200, 201):
                raise RuntimeError("PUT /indexes/%s -> %d %s" % (index, status, payload[:300]))
    queries = QueryLoad(run)
    queries.start()
    samples = {i: [] for i in INDEX_DEFINITIONS}        # (t, lastIndexedEtag, docsPerSec) until done
    done_at, last_seen, admin_latency = {}, {}, []
    interrupted = timed_out = False
    next_progress = 30.0
    # Until the SIGTERM half-way is sent, poll ten times a second so that a
    # short build is still caught in the middle.
    want_sigterm = run.args.sigterm_during_build and not resume
    try:
        while True:
            tick = time.perf_counter()
            run.check_alive(name)
            try:
                status, payload, took = control.request("GET", "/admin/indexes")
            except (OSError, http.client.HTTPException):
                run.check_alive(name)
                time.sleep(1)
                continue
            now = time.perf_counter() - t0
            admin_latency.append(took)
            listing = {x["name"]: x for x in json.loads(payload)["indexes"]} if status == 200 else {}
            for index in INDEX_DEFINITIONS:
                x = listing.get(index)
                if x is None:
                    continue
                last_seen[index] = x
                if index in done_at:
                    continue
                samples[index].append((now, x["lastIndexedEtag"], x.get("docsPerSec") or 0))
                if x["lastIndexedEtag"] >= target:
                    done_at[index] = now
            if len(done_at) == len(INDEX_DEFINITIONS):
                break
            if now >= next_progress:
                next_progress += 30
                say("  %s at %.0f s: %s" % (name, now, ", ".join(
                    "%s %d/%d" % (i, last_seen.get(i, {}).get("lastIndexedEtag", 0), target)
                    for i in INDEX_DEFINITIONS)))
            if (want_sigterm and len(last_seen) == len(INDEX_DEFINITIONS)
                    and min(x["lastIndexedEtag"] for x in last_seen.values()) >= target / 2):
                interrupted = True
                break
            if now > BUILD_TIMEOUT:
                timed_out = True
                break
            time.sleep(max(0.0, (0.1 if want_sigterm else 1.0) - (time.perf_counter() - tick)))
    finally:
        queries.stopping.set()
        queries.join(15)
        control.close()
    total = time.perf_counter() - t0
    others = cpu.others_percent()
    figures = {"target_etag": target, "seconds": total, "interrupted_by_sigterm": interrupted,
               "others_cpu_percent": others,
               "timed_out": timed_out, "indexes": {},
               "admin_latency_ms": {"max": max(admin_latency) * 1e3 if admin_latency else None,
                                    "p99": (percentile(admin_latency, 99) or 0) * 1e3, "polls": len(admin_latency)},
               "queries": {k: {"count": len(v), "failures": queries.failures[k],
                               "p50_ms": (percentile(v, 50) or 0) * 1e3, "p99_ms": (percentile(v, 99) or 0) * 1e3,
                               "max_ms": max(v) * 1e3 if v else None}
                           for k, v in queries.latency.items()},
               "last_totals": dict(queries.totals)}
    state = "interrupted by SIGTERM half-way" if interrupted else ("TIMED OUT" if timed_out else "done")
    if want_sigterm and not interrupted and not timed_out:
        state += " (too fast to send SIGTERM half-way: it is sent at the end instead)"
    say("%s: %s, %s after %.1f s (target etag %d); other processes used %.0f%% of the CPU" % (
        name, "resumed" if resume else "both indexes defined at once", state, total, target, others))
    for index in INDEX_DEFINITIONS:
        rates, partial = minute_rates(samples[index])
        reported = [s[2] for s in samples[index] if s[2]]
        errors = reported_rate_errors(samples[index])
        abs_errors = sorted(abs(x) for x in errors)
        x = last_seen.get(index, {})
        f = {"seconds": done_at.get(index), "minute_rates": rates, "last_window_partial": partial,
             "docs_per_s_min": min(rates) if rates else None,
             "docs_per_s_median": statistics.median(rates) if rates else None,
             "reported_docs_per_s_median": statistics.median(reported) if reported else None,
             "reported_docs_per_s_last": reported[-1] if reported else None,
             "reported_vs_same_minute": {
                 "polls": len(errors),
                 "median_error": statistics.median(errors) if errors else None,
                 "median_abs_error": statistics.median(abs_errors) if errors else None,
                 "p90_abs_error": abs_errors[int(0.9 * (len(abs_errors) - 1))] if errors else None,
                 "max_abs_error": abs_errors[-1] if errors else None},
             "lastIndexedEtag": x.get("lastIndexedEtag"), "state": x.get("state"),
             "errors": x.get("errors", {}).get("count"), "entries": x.get("entries"),
             "memoryBytes": x.get("memoryBytes"), "diskBytes": x.get("diskBytes")}
        figures["indexes"][index] = f
        short = f["seconds"] is not None and f["seconds"] < 10
        say("  %-19s %s; docs/s per minute (etag deltas) min %s, median %s over %d window(s)%s%s; "
            "reported docsPerSec median %s, last %s; entries %s, errors %s, memoryBytes %s, diskBytes %s" % (
                index, "done in %.1f s" % f["seconds"] if f["seconds"] is not None else "not done",
                "%.0f" % f["docs_per_s_min"] if rates else "n/a",
                "%.0f" % f["docs_per_s_median"] if rates else "n/a", len(rates),
                " (the last partial)" if partial else "",
                " (done within a few 1-s polls: a lower bound)" if short and rates else "",
                "%.0f" % f["reported_docs_per_s_median"] if f["reported_docs_per_s_median"] else "n/a",
                "%.0f" % f["reported_docs_per_s_last"] if f["reported_docs_per_s_last"] else "n/a",
                f["entries"], f["errors"], mib(f["memoryBytes"]), mib(f["diskBytes"])))
        c = f["reported_vs_same_minute"]
        if c["polls"]:
            say("  %-19s docsPerSec against lastIndexedEtag's move over the same minute, %d polls: "
                "median error %+.1f%%, |error| median %.1f%%, p90 %.1f%%, max %.1f%%" % (
                    index, c["polls"], 100 * c["median_error"], 100 * c["median_abs_error"],
                    100 * c["p90_abs_error"], 100 * c["max_abs_error"]))
        else:
            say("  %-19s docsPerSec: no poll a minute into the build to compare over the same minute" % index)
    a, q = figures["admin_latency_ms"], figures["queries"]
    say("  GET /admin/indexes: %d polls, p99 %.2f ms, max %.2f ms" % (a["polls"], a["p99"], a["max"] or 0))
    for kind, v in q.items():
        say("  %-7s during the build: %d queries, %d failed, p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (
            kind, v["count"], v["failures"], v["p50_ms"], v["p99_ms"], v["max_ms"] or 0))
    say("  their last answers' totals: %s" % ", ".join(
        "%s %s" % (query, hits) for query, hits in queries.totals.items()))
    indexes_du, _ = du_bytes(os.path.join(run.args.data, "indexes"))
    figures["indexes_du_bytes"] = indexes_du
    say("  index files on disk: %s (du of %s/indexes)" % (mib(indexes_du), run.args.data))
    run.build_done = len(done_at) == len(INDEX_DEFINITIONS)
    run.end(name, figures)
    if interrupted:
        phase_sigterm(run, "sigterm (during build)")


def phase_sigterm(run, name="sigterm"):
    """SIGTERM; the time until the process exited."""
    run.begin(name)
    seconds, killed = run.server.stop()
    figures = {"seconds": seconds, "killed_after_timeout": killed, "exit": run.server.exit_text()}
    say("%s: exited after %.2f s, %s%s" % (name, seconds, figures["exit"],
                                           " (SIGKILL after %d s)" % STOP_TIMEOUT if killed else ""))
    run.summary["phases"][name] = figures


def phase_restart(run, phases):
    """Drops the page cache, starts the server on the same data: time until
    /health answers and until a GET works; one more GET phase; the rest of
    an interrupted build."""
    name = "restart"
    run.sampler.phase = name
    if run.server.alive():
        seconds, _ = run.server.stop()
        say("restart: stopped the running server first (SIGTERM, %.2f s)" % seconds)
    why_not = drop_caches()
    run.cgroup.reset_peak()
    t0 = time.perf_counter()
    run.server.start()
    client = run.client(2)
    health = run.server.wait_until(lambda: client.request("GET", "/health")[0] == 200, 300)
    if health is None:
        client.close()
        run.check_alive(name)
        raise RuntimeError("the restarted server did not answer /health within 300 s")
    health = time.perf_counter() - t0
    if run.docs is None:
        run.docs, run.last_etag = run.collection_state()
    probe, first_get = doc_path(max(0, (run.docs or 1) - 1)), None
    if run.docs:
        first_get = run.server.wait_until(lambda: client.request("GET", probe)[0] == 200, 300)
        if first_get is not None:
            first_get = time.perf_counter() - t0
    client.close()
    run.check_alive(name)
    figures = {"cold": why_not is None, "health_seconds": health, "first_get_seconds": first_get}
    say("restart: %s; /health answered after %s, GET %s after %s" % (
        "page cache dropped (cold)" if why_not is None else "cold NOT possible (drop_caches: %s)" % why_not,
        "%.3f s" % health, probe,
        "%.3f s" % first_get if first_get is not None else
        "NEVER (300 s)" if run.docs else "n/a (no documents)"))
    run.end(name, figures)
    if "get" in phases:
        phase_get(run, "get (after restart)", drop_cache=False, cold_start=run.summary["phases"][name]["cold"])
    if "build" in phases and not run.build_done:
        phase_build(run, "build (resumed after restart)")


# ---------------------------------------------------------------- main

def machine_line(source, copy):
    """What we ran on: the machine, and the binary (source path, build type,
    when it was built, the commit) that `copy` was copied from."""
    cpu, ram, build_type = machine_facts(source)
    rev = git_output(ROOT, "rev-parse", "--short", "HEAD") or "no commit"
    return ("machine: %d cores, %s, %.1f GiB RAM, %s\n"
            "binary:  %s (%s build, built %s; HEAD %s; run from a private copy)" % (
                os.cpu_count(), cpu, ram / (1 << 30), platform.platform(), source, build_type,
                built_at(copy), rev))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=200_000, help="documents to load (default 200000)")
    ap.add_argument("--cap-mib", type=int, default=0,
                    help="the cgroup's memory.limit_in_bytes in MiB (default 0: no limit)")
    ap.add_argument("--budget-mib", type=int,
                    help="pass --memory-budget (bytes) to the server, if its --help lists that flag")
    ap.add_argument("--data", help="data directory (default: a temp dir under /tmp, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the temp data dir and the server log")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "corvid"),
                    help="the corvid binary (default: build/corvid under the repo root)")
    ap.add_argument("--seed", type=int, default=26, help="corpus seed: same seed, same documents (default 26)")
    ap.add_argument("--get-seconds", type=int, default=10, help="length of each GET phase (default 10)")
    ap.add_argument("--phases", default=",".join(ALL_PHASES),
                    help="comma list among %s (default: all but %s)" % (
                        ",".join(ALL_PHASES + OPTIONAL_PHASES), ",".join(OPTIONAL_PHASES)))
    ap.add_argument("--sigterm-during-build", action="store_true",
                    help="send SIGTERM when both indexes are half-way, then restart")
    ap.add_argument("--client", choices=("auto", "wrk", "python"), default="auto",
                    help="GET client: wrk if installed (auto), or Python threads")
    ap.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    args = ap.parse_args()
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if args.docs < 1:
        ap.error("--docs must be at least 1")
    unknown = [p for p in phases if p not in ALL_PHASES + OPTIONAL_PHASES]
    if unknown:
        ap.error("unknown phase(s) %s (want a subset of %s)" % (
            ",".join(unknown), ",".join(ALL_PHASES + OPTIONAL_PHASES)))
    if args.client == "wrk" and not shutil.which("wrk"):
        ap.error("--client wrk: wrk is not installed")
    args.binary = os.path.abspath(args.binary)
    if not os.access(args.binary, os.X_OK):
        ap.error("no executable corvid at %s" % args.binary)
    return args, phases


def server_extra_args(binary, budget_mib):
    """--memory-budget only when asked for and the binary knows it.
    Returns (arguments, a note for the report or None)."""
    if budget_mib is None:
        return [], None
    help_text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=30)
    if "--memory-budget" not in help_text.stdout + help_text.stderr:
        return [], "--budget-mib %d NOT applied: `corvid serve --help` lists no --memory-budget" % budget_mib
    return ["--memory-budget", str(budget_mib * MiB)], "--memory-budget %d (%d MiB)" % (
        budget_mib * MiB, budget_mib)


def main():
    args, phases = parse_args()
    sigterm_as_interrupt()      # a SIGTERM unwinds like Ctrl-C, through the cleanup below
    if args.sigterm_during_build and "build" in phases and "restart" not in phases:
        phases.append("restart")
    work = tempfile.mkdtemp(prefix="corvid-small-machine-")
    own_data = args.data is None
    args.data = os.path.abspath(args.data or os.path.join(work, "data"))
    cgroup = server = sampler = run = None
    try:
        os.makedirs(args.data, exist_ok=True)
        # A private copy, as bench/run.sh does: a rebuild during the run must
        # not swap the binary under it.
        binary = os.path.join(work, "corvid")
        shutil.copy2(args.binary, binary)
        extra, budget_note = server_extra_args(binary, args.budget_mib)
        say("== Corvid small-machine benchmark  %s" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        say(machine_line(args.binary, binary))
        say("run:     %s, cgroup cap %s, %s, seed %d, phases %s%s, data %s" % (
            "--docs %d" % args.docs if "load" in phases else "the documents already in the store",
            "%d MiB" % args.cap_mib if args.cap_mib else "none (uncapped)",
            budget_note or "no --memory-budget", args.seed, ",".join(phases),
            ", SIGTERM during build" if args.sigterm_during_build else "", args.data))
        cgroup = MemoryCgroup("corvid-small-machine-%d" % os.getpid(), args.cap_mib)
        server = Server(binary, args.data, os.path.join(work, "server.log"), cgroup, extra)
        sampler = CgroupSampler(cgroup, server)
        run = Run(args, server, cgroup, sampler)
        run.corpus = Corpus(args.seed)
        run.summary.update({"docs": args.docs if "load" in phases else None, "cap_mib": args.cap_mib,
                            "budget": budget_note,
                            "seed": args.seed, "phases_run": phases})
        run_phases(run, phases)
    except OSError as e:    # setup: no binary, no cgroup (not root?), ...
        say("small_machine.py: cannot set up the run: %s" % e)
        return 2
    except KeyboardInterrupt:
        say("interrupted during phase '%s'; stopping the server and cleaning up" % (
            sampler.phase if sampler else "setup"))
        return 130
    finally:
        if sampler is not None:
            sampler.stopping.set()
        if server is not None and server.alive():
            server.stop(30)
        if run is not None:
            report_memory(run)
        if cgroup is not None and not cgroup.remove():
            say("warning: could not remove %s" % cgroup.path)
        if args.keep:
            say("kept: data in %s, server log in %s" % (args.data, os.path.join(work, "server.log")))
        else:
            if own_data:
                shutil.rmtree(args.data, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        say(json.dumps(run.summary, indent=2, sort_keys=True))
    return 1 if ("died" in run.summary or "failed" in run.summary) else 0


def run_phases(run, phases):
    """Starts the server and runs the phases in order; a death or a failure
    ends the run and is recorded in run.summary."""
    server, sampler = run.server, run.sampler
    phase = "start"
    try:
        server.start()
        up = server.wait_healthy(60)
        if up is None:
            raise ServerDied("start")
        say("server:  pid %d on 127.0.0.1:%d in cgroup %s, /health after %.3f s" % (
            server.pid, server.port, run.cgroup.path, up))
        sampler.start()
        if "load" in phases:
            phase = "load"
            phase_load(run)
        else:
            run.docs, run.last_etag = run.collection_state()
            run.summary["docs"] = run.docs
        if "overwrite" in phases:
            phase = "overwrite"
            phase_overwrite(run)
        if "get" in phases:
            phase = "get (cold)"
            phase_get(run, "get (cold)", drop_cache=True)
            phase = "get (hot)"
            phase_get(run, "get (hot)", drop_cache=False)
        if "build" in phases:
            phase = "build"
            phase_build(run)
        if "sigterm" in phases and server.alive():
            phase = "sigterm"
            phase_sigterm(run)
        if "restart" in phases:
            phase = "restart"
            phase_restart(run, phases)
    except ServerDied as e:
        phase = str(e)
        run.summary["died"] = {"phase": phase, "exit": server.exit_text()}
        try:
            oom = run.cgroup.oom().get("oom_kill", "n/a")
        except (OSError, ValueError):
            oom = "n/a"
        run.summary["died"]["cgroup_oom_kill"] = oom
        p = sampler.phase_peaks(sampler.phase)
        run.summary["died"]["memory"] = p
        say("SERVER DIED during phase '%s': %s; the cgroup's oom_kill count is %s%s. Last lines of its log:\n%s" % (
            phase, server.exit_text(), oom, " (the OOM killer)" if oom not in (0, "n/a") else "",
            server.log_tail()))
        say("  memory[%s] until then: peak RssAnon %s, cgroup peak rss %s, cache %s" % (
            sampler.phase, mib(p.get("RssAnon")), mib(p.get("cgroup_rss")), mib(p.get("cgroup_cache"))))
    except (RuntimeError, OSError, ValueError, http.client.HTTPException, subprocess.SubprocessError) as e:
        run.summary["failed"] = {"phase": sampler.phase, "error": str(e)}
        say("FAILED in phase '%s': %s" % (sampler.phase, e))
        if server.proc is not None and not server.alive():
            say("  the server is gone: %s. Last lines of its log:\n%s" % (server.exit_text(), server.log_tail()))


def report_memory(run):
    """The overall peaks and the cgroup's verdict on limits and OOM kills."""
    cg = run.cgroup
    p = run.sampler.phase_peaks("all")
    figures = {"peaks": p}
    try:
        figures["failcnt"] = cg.number("memory.failcnt")
        figures["oom_control"] = cg.oom()
        limit = cg.number("memory.limit_in_bytes")
        figures["limit_bytes"] = limit if limit < (1 << 62) else None
    except (OSError, ValueError) as e:
        figures["error"] = str(e)
    run.summary["memory"] = figures
    oom = figures.get("oom_control", {})
    say("memory (whole run): peak RssAnon %s, VmRSS %s; cgroup peak rss %s, cache %s (total_rss %s, "
        "total_cache %s), mapped_file %s; limit %s; memory.failcnt %s; oom_kill %s, under_oom %s" % (
            mib(p.get("RssAnon")), mib(p.get("VmRSS")), mib(p.get("cgroup_rss")), mib(p.get("cgroup_cache")),
            mib(p.get("cgroup_total_rss")), mib(p.get("cgroup_total_cache")), mib(p.get("cgroup_mapped_file")),
            mib(figures.get("limit_bytes")) if figures.get("limit_bytes") else "none",
            figures.get("failcnt"), oom.get("oom_kill", "n/a"), oom.get("under_oom", "n/a")))
    if oom.get("oom_kill"):
        say("  the cgroup's OOM killer killed %d process(es)" % oom["oom_kill"])


if __name__ == "__main__":
    sys.exit(main())
