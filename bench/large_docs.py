#!/usr/bin/env python3
"""The large-documents benchmark (issue 34): RavenDB's own comparison with CouchDB.

RavenDB measured how fast a map/reduce index builds over "users" documents
of three shapes; this program measures Corvid on the same three, each in a
fresh server (fresh temp data dir), and prints RavenDB's and CouchDB's
figures and the issue's bars beside ours:

  (a) small    --docs-small (100,000) users {"id", "score", "name", "createdAt"}
  (b) 300k     --docs-300k  (10,000) users with one extra "bio" property of
               ~300 KB of lorem-ipsum-like text
  (c) many     --docs-many  (3,000) users with N extra properties "p0".."pN-1"
               of ~1 KB of text each, N uniform in 90..900, so a document is
               90-900 KB

The text is drawn word by word from a seeded RNG over a Zipf-weighted
lorem vocabulary of 5,000 words (the classic lorem words first, then
synthetic Latin-like ones), with some commas and full stops: never one
repeated string, so it compresses as prose does (zlib -6: ~3x; the run
prints the ratio of its first bulk body).

Per case:
  load    bulk-loads the documents through POST /docs/users/_bulk as NDJSON
          bodies of ~16 MB on one keep-alive connection. Each body is
          generated before its request is timed, so "load MB/s" is the
          server's (JSON bytes / time inside requests); the end-to-end
          figure includes Python's generation. Then the store's size on
          disk (du of DIR/store) over the JSON bytes.
  mr      PUT a map/reduce index (sum and count of score by
          date_trunc('month', createdAt)) and time its build: build docs/s
          = documents / seconds from sending the PUT until a query with
          minEtag = the last write's etag answers fresh (the server wakes
          such a wait from the index's progress, so this is exact to a
          round trip; these builds can take well under 50 ms). Meanwhile a
          thread polls GET /admin/indexes every 50 ms until lastIndexedEtag
          reaches that etag; its time (the first poll that saw it done, an
          upper bound within one poll) is printed beside. Checks that the
          rows count every document.
  search  DELETE that index, PUT a search index over `name` alone (text,
          standard analyzer), timed the same way. Checks a query finds hits.
  get     (cases b and c) GET the largest document 200 times on one
          keep-alive connection: median latency (and p90, max).
Before each case the run waits (at most --idle-wait, default 300 s) for
the machine to be --min-idle (80) % idle. During each phase a sampler
reads the server's VmRSS and RssAnon from /proc/PID/status every 100 ms;
each phase prints its peaks. Each timed phase also says how much CPU
other processes took meanwhile (on 2 cores anything else skews every
figure).

The server runs from a private copy of --binary (a rebuild during the run
cannot swap it). Python 3 stdlib only; no root needed.

  nice -n 10 python3 bench/large_docs.py                 # the full run
  nice -n 10 python3 bench/large_docs.py --scale 0.2     # a quick one
  python3 bench/large_docs.py --cases b --docs-300k 2000 --json

MB means 10^6 bytes (JSON, and the 200 MB RSS bar); MiB 2^20 bytes.
"""
import argparse
import http.client
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (ROOT, Client, CpuMeter, MemorySampler, Server, ServerDied,  # noqa: E402
                          ServerSteps, built_at, bulk_load, git_output, machine_facts, mib, ndjson_batches,
                          percentile, proc_memory, say, sigterm_as_interrupt, store_figures)

COLLECTION = "users"
MR_INDEX = "users_by_month"
SEARCH_INDEX = "users_name"
CASES = ("a", "b", "c")
CASE_NAMES = {"a": "small", "b": "one 300 KB property", "c": "90-900 KB in ~1 KB properties"}
BATCH_BYTES = 16_000_000       # one bulk request
POLL_SECONDS = 0.05            # GET /admin/indexes during a build
SAMPLE_SECONDS = 0.1           # /proc/PID/status
GET_REPEATS = 200
HTTP_TIMEOUT = 60
JSON_OK = (200, 201)           # the statuses Client.json accepts here
BULK_TIMEOUT = 900
BUILD_TIMEOUT = 3600

# The figures of issue 34: map/reduce build docs/s per case.
RAVENDB = {"a": 78_064, "b": 68_965, "c": 38_759}
COUCHDB = {"a": 19_821, "b": None, "c": 9_363}
CORVID_BEFORE = {"a": "475,000-631,000", "b": "1,683-1,999", "c": "557-683"}
RSS_BAR_BYTES = 200_000_000
STORE_BAR = 0.25

MR_DEFINITION = {
    "type": "mapreduce", "collection": COLLECTION,
    "map": {"month": "date_trunc('month', createdAt)", "score": "score"},
    "groupBy": ["month"],
    "reduce": {"total": "sum(score)", "count": "count()"}}
SEARCH_DEFINITION = {
    "type": "search", "collection": COLLECTION,
    "fields": {"name": {"analyzer": "standard"}}}


def num(x, fmt="{:,.0f}"):
    return "n/a" if x is None else fmt.format(x)


# ---------------------------------------------------------------- corpus

LOREM = list(dict.fromkeys("""
lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor
incididunt ut labore et dolore magna aliqua enim ad minim veniam quis nostrud
exercitation ullamco laboris nisi aliquip ex ea commodo consequat duis aute
irure in reprehenderit voluptate velit esse cillum eu fugiat nulla pariatur
excepteur sint occaecat cupidatat non proident sunt culpa qui officia deserunt
mollit anim id est laborum perspiciatis unde omnis iste natus error voluptatem
accusantium doloremque laudantium totam rem aperiam eaque ipsa quae ab illo
inventore veritatis quasi architecto beatae vitae dicta explicabo nemo ipsam
quia voluptas aspernatur aut odit fugit consequuntur magni dolores eos ratione
sequi nesciunt neque porro quisquam dolorem adipisci numquam eius modi tempora
incidunt magnam quaerat minima nostrum exercitationem ullam corporis suscipit
laboriosam aliquid commodi consequatur autem vel eum iure quam nihil molestiae
illum quo at vero accusamus iusto odio dignissimos ducimus blanditiis
praesentium voluptatum deleniti atque corrupti quos quas molestias excepturi
occaecati cupiditate provident similique mollitia animi dolorum fuga harum
quidem rerum facilis expedita distinctio nam libero tempore cum soluta nobis
eligendi optio cumque impedit minus maxime placeat facere possimus assumenda
repellendus temporibus quibusdam officiis debitis necessitatibus saepe eveniet
voluptates repudiandae recusandae itaque earum hic tenetur sapiente delectus
reiciendis voluptatibus maiores alias perferendis doloribus asperiores repellat
""".split()))
SYLLABLES = ("a e i o u ae re ti ta tu ca co cu la le li lo ma me mi mo na ne ni no nu pa pe pi "
             "po qua que qui ra ri ro sa se si so su ve vi vo di do du fa fe fi ga gi ha he ia io "
             "ius um us is es at et it or ar er ur ex im in un ant ent unt ium tas tem bus tur rum "
             "rem").split()
FIRST_NAMES = ("james mary john patricia robert jennifer michael linda william elizabeth david "
               "barbara richard susan joseph jessica thomas sarah charles karen christopher lisa "
               "daniel nancy matthew betty anthony margaret mark sandra donald ashley steven kimberly "
               "paul emily andrew donna joshua michelle kenneth carol kevin amanda brian dorothy "
               "george melissa timothy deborah ronald stephanie edward rebecca jason sharon jeffrey "
               "laura ryan cynthia jacob kathleen gary amy nicholas angela eric shirley jonathan anna "
               "stephen brenda larry pamela justin emma scott nicole brandon helen benjamin samantha "
               "samuel katherine gregory christine alexander debra frank rachel patrick carolyn "
               "raymond janet jack catherine dennis maria jerry heather tyler diane aaron ruth jose "
               "julie adam olivia nathan joyce henry virginia douglas victoria zachary kelly peter "
               "lauren kyle christina ethan joan walter evelyn noah judith jeremy megan christian "
               "andrea keith cheryl roger hannah terry jacqueline gerald martha harold gloria sean "
               "teresa austin ann carl sara arthur madison lawrence frances dylan kathryn jesse "
               "janice jordan jean bryan abigail billy alice joe judy bruce sophia gabriel grace "
               "logan denise albert amber willie doris alan marilyn juan danielle wayne beverly "
               "elijah isabella randy theresa roy diana vincent natalie ralph brittany eugene "
               "charlotte russell marie bobby kayla mason alexis philip lori louis").split()
VOCAB_SIZE = 5000
ZIPF_S = 1.0
TABLE_SIZE = 1 << 16           # two random bytes pick a word
FIRST_SECOND = 1262304000      # 2010-01-01T00:00:00Z
LAST_SECOND = 1735689599       # 2024-12-31T23:59:59Z
BIO_BYTES = 300_000            # case b: the "bio" property's text
PROP_BYTES = 990               # case c: each property's text (~1 KB with its key)
PROPS_MIN, PROPS_MAX = 90, 900


class Corpus:
    """The users of one case, generated in order from a seed.

    Document n has id "users/<n>"; nothing but the vocabulary and one
    batch is held at a time. Text is made by mapping random 16-bit values
    through a 65,536-entry table of words (each word as many times as its
    Zipf weight), so it is fast (~150 MB/s) and varied.
    """

    def __init__(self, case, seed):
        rng = random.Random(seed)
        words, seen = list(LOREM), set(LOREM)
        while len(words) < VOCAB_SIZE:
            w = "".join(rng.choice(SYLLABLES) for _ in range(rng.choice((2, 2, 3, 3, 3, 4))))
            if w not in seen:
                seen.add(w)
                words.append(w)
        weights = [1.0 / (i + 1) ** ZIPF_S for i in range(len(words))]
        total = sum(weights)
        table = []
        for w, x in zip(words, weights):
            for _ in range(max(1, round(x / total * TABLE_SIZE))):
                r = rng.random()
                table.append(w + ("." if r < 0.07 else "," if r < 0.12 else ""))
        rng.shuffle(table)
        table = table[:TABLE_SIZE]
        while len(table) < TABLE_SIZE:
            table.append(rng.choice(words))
        self.table = table
        self.mean_token = sum(len(t) + 1 for t in table) / len(table)
        self.last_names = [w.capitalize() for w in words[200:3200]]
        self.case = case
        self.rng = random.Random(seed * 7919 + ord(case))
        self.first_name = None         # of document 0: a search that must hit

    def text(self, target):
        """About `target` bytes of words (cut at a word boundary)."""
        n = int(target / self.mean_token * 1.1) + 4
        s = " ".join(map(self.table.__getitem__, array("H", self.rng.randbytes(2 * n))))
        while len(s) < target:            # rare: a run of short words
            s += " " + self.text(target - len(s))
        cut = s.rfind(" ", 0, target + 1)
        return s[:cut if cut > 0 else target]

    def document(self, n):
        rng = self.rng
        doc = {"id": "users/%d" % n,
               "score": rng.randint(0, 1000),
               "name": "%s %s" % (rng.choice(FIRST_NAMES).capitalize(), rng.choice(self.last_names)),
               "createdAt": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                          time.gmtime(rng.randint(FIRST_SECOND, LAST_SECOND)))}
        if self.first_name is None:
            self.first_name = doc["name"].split()[0]
        if self.case == "b":
            doc["bio"] = self.text(BIO_BYTES)
        elif self.case == "c":
            for i in range(rng.randint(PROPS_MIN, PROPS_MAX)):
                doc["p%d" % i] = self.text(PROP_BYTES)
        return doc

    def batches(self, count, batch_bytes=BATCH_BYTES):
        """Yields (ndjson bytes, docs in it, seconds spent generating,
        (largest line's bytes, its doc number))."""
        return ndjson_batches(self.document, count, batch_bytes)


def doc_path(n):
    return "/docs/%s/users%%2F%d" % (COLLECTION, n)   # '/' inside an id is percent-encoded


# ---------------------------------------------------------------- server

class ProcSampler(MemorySampler):
    """Every 100 ms the server's VmRSS and RssAnon; the peaks per phase."""

    def __init__(self, pid):
        super().__init__(SAMPLE_SECONDS, count_samples=True)
        self.pid = pid

    def read(self):
        try:
            return proc_memory(self.pid)
        except (OSError, ValueError):
            return None


def idle_percent(seconds):
    """The machine's idle share (idle + iowait) over `seconds`."""
    def read():
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:9]]
        return sum(cpu), cpu[3] + cpu[4]
    t0, i0 = read()
    time.sleep(seconds)
    t1, i1 = read()
    return 100.0 * (i1 - i0) / (t1 - t0) if t1 > t0 else 100.0


def wait_idle(min_idle, max_wait):
    """Waits (up to max_wait s) until the machine is at least min_idle %
    idle over 2 s; returns (idle %, seconds waited)."""
    t0 = time.perf_counter()
    idle = idle_percent(2.0)
    while idle < min_idle and time.perf_counter() - t0 < max_wait:
        idle = idle_percent(2.0)
    return idle, time.perf_counter() - t0


class Poller(threading.Thread):
    """Polls GET /admin/indexes every 50 ms on its own connection until
    `name` has processed `target` (or it is told to stop): the time of the
    first poll that saw it done and of the one before, and the last entry."""

    def __init__(self, server, name, target):
        super().__init__(daemon=True)
        self.server, self.name, self.target = server, name, target
        self.t0 = None
        self.done = self.not_done = None
        self.last, self.polls, self.error = {}, 0, None
        self.stopping = threading.Event()

    def run(self):
        client = Client(self.server.port, HTTP_TIMEOUT)
        try:
            while not self.stopping.is_set():
                tick = time.perf_counter()
                status, payload, _ = client.request("GET", "/admin/indexes")
                now = time.perf_counter() - self.t0
                self.polls += 1
                if status == 200:
                    x = next((i for i in json.loads(payload)["indexes"] if i["name"] == self.name), None)
                    if x is not None:
                        self.last = x
                        if x["lastIndexedEtag"] >= self.target:
                            self.done = now
                            return
                self.not_done = now
                self.stopping.wait(max(0.0, POLL_SECONDS - (time.perf_counter() - tick)))
        except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
            self.error = str(e)
        finally:
            client.close()


# ---------------------------------------------------------------- one case

class Case(ServerSteps):
    def __init__(self, case, docs, args, binary, work):
        self.case, self.docs, self.args = case, docs, args
        self.data = os.path.join(work, "data-%s" % case)
        self.server = Server(binary, self.data, os.path.join(work, "server-%s.log" % case))
        self.sampler = None
        self.figures = {"case": case, "shape": CASE_NAMES[case], "docs": docs}
        self.last_etag = None
        self.largest = (0, -1)
        self.probe_name = None

    def memory_line(self, phase, at_start):
        self.sampler.sample()
        p = self.sampler.phase_peaks(phase)
        self.figures.setdefault("memory", {})[phase] = {"peaks": p, "at_start": at_start}
        say("    memory[%s]: peak VmRSS %s, RssAnon %s, RssFile %s (at its start: VmRSS %s, RssAnon %s; "
            "%d samples)" % (phase, mib(p.get("VmRSS")), mib(p.get("RssAnon")), mib(p.get("RssFile")),
                             mib(at_start.get("VmRSS")), mib(at_start.get("RssAnon")), p.get("samples", 0)))
        return p

    def run(self):
        os.makedirs(self.data)
        self.server.start()
        up = self.server.wait_healthy(60)
        if up is None:
            if not self.server.alive():
                raise ServerDied("start")
            raise RuntimeError("the server did not answer /health within 60 s")
        self.sampler = ProcSampler(self.server.pid)
        self.sampler.start()
        say("(%s) %s: %d docs; server pid %d on 127.0.0.1:%d, /health after %.3f s" % (
            self.case, CASE_NAMES[self.case], self.docs, self.server.pid, self.server.port, up))
        try:
            self.load()
            self.build("mapreduce", MR_INDEX, MR_DEFINITION)
            self.call("delete", lambda: Client(self.server.port, HTTP_TIMEOUT).json(
                "DELETE", "/indexes/%s" % MR_INDEX, ok=JSON_OK))
            self.build("search", SEARCH_INDEX, SEARCH_DEFINITION)
            if self.case in ("b", "c"):
                self.get_large()
        finally:
            self.sampler.stopping.set()
            self.server.stop()
        return self.figures

    def load(self):
        at_start = self.sampler.begin("load")
        corpus = Corpus(self.case, self.args.seed)

        def batches():
            for body, count, gen_seconds, largest in corpus.batches(self.docs):
                self.largest = max(self.largest, largest)
                yield body, count, gen_seconds
        conn = Client(self.server.port, BULK_TIMEOUT)
        f, ratio = bulk_load(self, "load", conn, COLLECTION, batches())
        conn.close()
        docs, json_bytes, requests = f["docs"], f["json_bytes"], f["requests"]
        self.probe_name = corpus.first_name
        c = Client(self.server.port, HTTP_TIMEOUT).json("GET", "/collections", ok=JSON_OK)
        count = next((x["count"] for x in c["collections"] if x["name"] == COLLECTION), 0)
        if count != docs:
            raise RuntimeError("the collection holds %d docs, not %d" % (count, docs))
        self.last_etag = max(f["last_etag"], c["lastEtag"])
        f.update(store_figures(self.data, json_bytes))
        f.update({"last_etag": self.last_etag, "largest_doc_bytes": self.largest[0],
                  "largest_doc": "users/%d" % self.largest[1], "zlib6_ratio_first_body": ratio})
        self.figures["load"] = f
        say("  load: %.1f MB of JSON (%s B/doc, largest %s B; zlib -6 packs the first body %.2fx) in %d "
            "bulk requests of ~%d MB on one connection" % (
                json_bytes / 1e6, num(json_bytes / docs), num(self.largest[0]), ratio, requests,
                BATCH_BYTES // 1_000_000))
        say("    %.1f MB/s, %s docs/s (%.2f s inside requests); end to end with generation %.1f MB/s "
            "(%.2f s, %.2f s of it generating in Python); other processes used %.0f%% of the CPU" % (
                f["mb_per_s"], num(f["docs_per_s"]), f["seconds_in_requests"], f["mb_per_s_end_to_end"],
                f["seconds_wall"], f["seconds_generating"], f["others_cpu_percent"]))
        say("    store: %s on disk (du of DATA/store; apparent %s) = %.3fx the JSON; lastEtag %d" % (
            mib(f["store_du_bytes"]), mib(f["store_apparent_bytes"]), f["store_over_json"], self.last_etag))
        self.memory_line("load", at_start)

    def build(self, kind, name, definition):
        """PUT the index; its build time is when a query with minEtag = the
        last write's etag answers (the server wakes such waits from the
        index's progress listener, so this is exact to a round trip); a
        thread polling /admin/indexes every 50 ms gives the cross-check."""
        at_start = self.sampler.begin(kind)
        control = Client(self.server.port, HTTP_TIMEOUT)
        target = self.last_etag
        poller = Poller(self.server, name, target)
        cpu = CpuMeter(self.server.pid)
        t0 = time.perf_counter()
        poller.t0 = t0
        poller.start()
        try:
            status, payload, _ = self.call(kind, lambda: control.request(
                "PUT", "/indexes/%s" % name, json.dumps(definition)))
            if status not in (200, 201):
                raise RuntimeError("PUT /indexes/%s -> %d %s" % (name, status, payload[:300]))
            put_seconds = time.perf_counter() - t0
            if kind == "mapreduce":
                wait = "/indexes/%s/results?limit=1" % name
            else:
                wait = "/indexes/%s/search?limit=1&q=%s" % (name, urllib.parse.quote(self.probe_name))
            wait += "&minEtag=%d&waitMs=60000" % target
            done = None
            while done is None:
                self.check_alive(kind)
                status, payload, _ = self.call(kind, lambda: control.request("GET", wait))
                if status != 200:
                    raise RuntimeError("GET %s -> %d %s" % (wait, status, payload[:300]))
                r = json.loads(payload)
                if r.get("indexEtag", 0) >= target and not r.get("stale"):
                    done = time.perf_counter() - t0
                elif time.perf_counter() - t0 > BUILD_TIMEOUT:
                    raise RuntimeError("%s index not built after %d s (indexEtag %s of %d)" % (
                        kind, BUILD_TIMEOUT, r.get("indexEtag"), target))
            server_cpu = cpu.server_seconds()
            others = cpu.others_percent()
            poller.join(BUILD_TIMEOUT)
        finally:
            poller.stopping.set()
        if poller.error:
            raise RuntimeError("polling /admin/indexes: %s" % poller.error)
        last = poller.last
        check = self.check_index(kind, name, control)
        control.close()
        f = {"seconds": done, "docs_per_s": self.docs / done, "put_seconds": put_seconds,
             "poll_done_seconds": poller.done, "poll_previous_seconds": poller.not_done,
             "poll_docs_per_s": self.docs / poller.done if poller.done else None, "polls": poller.polls,
             "target_etag": target, "server_cpu_seconds": server_cpu, "others_cpu_percent": others,
             "reported_docs_per_sec": last.get("docsPerSec"), "entries": last.get("entries"),
             "errors": (last.get("errors") or {}).get("count"), "memoryBytes": last.get("memoryBytes"),
             "diskBytes": last.get("diskBytes"), "lastBatch": last.get("lastBatch"), "check": check}
        self.figures[kind] = f
        say("  %s build: %s docs/s: built %.3f s after the PUT was sent (the PUT took %.3f s); server "
            "CPU %.2f s; other processes used %.0f%% of the CPU" % (
                kind, num(f["docs_per_s"]), done, put_seconds, server_cpu, others))
        say("    50-ms polls of /admin/indexes: the first to see it done came at %s (%s docs/s), the one "
            "before at %s; %d polls" % (
                "%.3f s" % poller.done if poller.done is not None else "never",
                num(f["poll_docs_per_s"]), "%.3f s" % poller.not_done if poller.not_done is not None
                else "none", poller.polls))
        say("    entries %s, errors %s, memoryBytes %s, diskBytes %s, reported docsPerSec %s, lastBatch %s; "
            "check: %s" % (last.get("entries"), f["errors"], mib(last.get("memoryBytes")),
                           mib(last.get("diskBytes")), num(last.get("docsPerSec")),
                           json.dumps(last.get("lastBatch")), check))
        self.memory_line(kind, at_start)

    def check_index(self, kind, name, control):
        """A sanity check of what the index answers."""
        if kind == "mapreduce":
            r = control.json("GET", "/indexes/%s/results?limit=1000" % name, ok=JSON_OK)
            counted = sum(row.get("count", 0) for row in r["rows"])
            ok = counted == self.docs and not r.get("stale")
            return "%s: %d month rows counting %d docs%s" % (
                "ok" if ok else "WRONG", r["total"], counted, "" if ok else " (want %d)" % self.docs)
        q = self.probe_name
        r = control.json("GET", "/indexes/%s/search?limit=1&q=%s" % (name, urllib.parse.quote(q)), ok=JSON_OK)
        return "%s: q=%s -> total %d" % ("ok" if r["total"] > 0 and not r.get("stale") else "WRONG", q, r["total"])

    def get_large(self):
        at_start = self.sampler.begin("get")
        n = self.largest[1]
        path = doc_path(n)
        client = Client(self.server.port, HTTP_TIMEOUT)
        times, size = [], None
        cpu = CpuMeter(self.server.pid)
        for _ in range(GET_REPEATS):
            status, payload, seconds = self.call("get", lambda: client.request("GET", path))
            if status != 200:
                raise RuntimeError("GET %s -> %d" % (path, status))
            size = len(payload)
            times.append(seconds)
        others = cpu.others_percent()
        client.close()
        f = {"id": "users/%d" % n, "bytes": size, "repeats": GET_REPEATS,
             "median_ms": statistics.median(times) * 1e3, "p90_ms": percentile(times, 90) * 1e3,
             "min_ms": min(times) * 1e3, "max_ms": max(times) * 1e3, "others_cpu_percent": others}
        self.figures["get"] = f
        say("  get: the largest document (users/%d, %s B) %d times on one connection: median %.2f ms, "
            "p90 %.2f ms, min %.2f ms, max %.2f ms; other processes used %.0f%% of the CPU" % (
                n, num(size), GET_REPEATS, f["median_ms"], f["p90_ms"], f["min_ms"], f["max_ms"], others))
        self.memory_line("get", at_start)


# ---------------------------------------------------------------- report

def comparison(results, scaled):
    """The table of issue 34's figures beside ours, and the bars."""
    def rate(case, kind):
        r = results.get(case, {}).get(kind)
        return r["docs_per_s"] if r else None

    say("")
    say("== map/reduce build, docs/s (issue 34's figures beside this run)%s" % (
        " [scaled run: fewer docs than RavenDB's]" if scaled else ""))
    cols = [c for c in CASES]
    header = "  %-28s" % "" + "".join("%20s" % ("(%s) %s" % (c, ("small", "300 KB", "90-900 KB")[i]))
                                      for i, c in enumerate(cols))
    say(header)
    say("  %-28s" % "Corvid, this run" + "".join("%20s" % num(rate(c, "mapreduce")) for c in cols))
    say("  %-28s" % "RavenDB 4.0" + "".join("%20s" % num(RAVENDB[c]) for c in cols))
    say("  %-28s" % "CouchDB, fastest" + "".join("%20s" % (num(COUCHDB[c]) if COUCHDB[c] else "-")
                                                 for c in cols))
    say("  %-28s" % "Corvid before (issue 34)" + "".join("%20s" % CORVID_BEFORE[c] for c in cols))
    say("  %-28s" % "search over name, this run" + "".join("%20s" % num(rate(c, "search")) for c in cols))
    say("  %-28s" % "load MB/s, this run" + "".join(
        "%20s" % (num(results[c]["load"]["mb_per_s"], "{:.1f}") if c in results else "n/a") for c in cols))
    say("  %-28s" % "store / JSON, this run" + "".join(
        "%20s" % (num(results[c]["load"]["store_over_json"], "{:.3f}") if c in results else "n/a")
        for c in cols))
    say("  %-28s" % "GET large doc, median ms" + "".join(
        "%20s" % (num(results[c]["get"]["median_ms"], "{:.2f}") if "get" in results.get(c, {}) else "-")
        for c in cols))

    bars = []

    def bar(text, value, ok):
        bars.append({"bar": text, "value": value, "pass": ok})

    small_mr, small_search = rate("a", "mapreduce"), rate("a", "search")
    for c in ("b", "c"):
        r = rate(c, "mapreduce")
        half = None if r is None or small_mr is None else r >= 0.5 * small_mr
        bar("(%s) map/reduce build >= 0.5x the small case's rate" % c,
            None if half is None else "%s vs 0.5 x %s = %s (%.2fx)" % (
                num(r), num(small_mr), num(0.5 * small_mr), r / small_mr), half)
        bar("(%s) map/reduce build >= RavenDB's %s" % (c, num(RAVENDB[c])),
            None if r is None else "%s (%.2fx RavenDB)" % (num(r), r / RAVENDB[c]),
            None if r is None else r >= RAVENDB[c])
    s = rate("c", "search")
    bar("(c) search over name >= 0.5x its small-case rate",
        None if s is None or small_search is None else "%s vs 0.5 x %s = %s (%.2fx)" % (
            num(s), num(small_search), num(0.5 * small_search), s / small_search),
        None if s is None or small_search is None else s >= 0.5 * small_search)
    mem = results.get("c", {}).get("memory", {})
    if "mapreduce" in mem:
        vm = max(mem[k]["peaks"].get("VmRSS", 0) for k in ("mapreduce", "search") if k in mem)
        anon = max(mem[k]["peaks"].get("RssAnon", 0) for k in ("mapreduce", "search") if k in mem)
        bar("(c) peak RSS during the builds <= 200 MB (VmRSS; RssAnon beside it)",
            "VmRSS %.1f MB (%s), RssAnon %.1f MB (%s)" % (vm / 1e6, mib(vm), anon / 1e6, mib(anon)),
            vm <= RSS_BAR_BYTES)
    else:
        bar("(c) peak RSS during the builds <= 200 MB", None, None)
    load_c = results.get("c", {}).get("load")
    bar("(c) store <= 0.25x the JSON",
        None if not load_c else "%.3fx" % load_c["store_over_json"],
        None if not load_c else load_c["store_over_json"] <= STORE_BAR)
    say("")
    say("== bars (issue 34)%s" % (" [scaled run]" if scaled else ""))
    for b in bars:
        say("  %-4s %s: %s" % ({True: "PASS", False: "FAIL", None: "n/a"}[b["pass"]], b["bar"],
                               b["value"] if b["value"] is not None else "not measured in this run"))
    return bars


def machine_line(source, copy):
    cpu, ram, build_type = machine_facts(source)
    src_dir = os.path.dirname(os.path.dirname(source))
    rev = git_output(src_dir, "rev-parse", "--short", "HEAD") or "unknown"
    dirty = git_output(src_dir, "status", "--porcelain", "--untracked-files=no")
    return ("machine: %d cores, %s, %.1f GiB RAM, %s; nice %d\n"
            "binary:  %s (%s build, built %s; its tree's HEAD %s%s; run from a private copy)" % (
                os.cpu_count(), cpu, ram / (1 << 30), platform.platform(), os.nice(0), source, build_type,
                built_at(copy), rev,
                " with uncommitted changes" if dirty else ""))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs-small", type=int, default=100_000, help="case (a) users (default 100000)")
    ap.add_argument("--docs-300k", type=int, default=10_000, help="case (b) users (default 10000)")
    ap.add_argument("--docs-many", type=int, default=3_000, help="case (c) users (default 3000)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the three doc counts (default 1)")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "corvid"),
                    help="the corvid binary (default: build/corvid under the repo root)")
    ap.add_argument("--cases", default="a,b,c", help="comma list among a,b,c (default: all)")
    ap.add_argument("--seed", type=int, default=34, help="corpus seed (default 34)")
    ap.add_argument("--min-idle", type=float, default=80,
                    help="before each case, wait until the machine is this %% idle (default 80; 0: don't)")
    ap.add_argument("--idle-wait", type=float, default=300,
                    help="the most seconds to wait for that, per case (default 300)")
    ap.add_argument("--keep", action="store_true", help="keep the temp data dirs and server logs")
    ap.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    args = ap.parse_args()
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in args.cases if c not in CASES]
    if bad or not args.cases:
        ap.error("--cases: want a comma list among a,b,c, got %r" % ",".join(bad))
    if args.scale <= 0:
        ap.error("--scale must be positive")
    args.counts = {c: max(1, round(n * args.scale))
                   for c, n in zip(CASES, (args.docs_small, args.docs_300k, args.docs_many))}
    args.binary = os.path.abspath(args.binary)
    if not os.access(args.binary, os.X_OK):
        ap.error("no executable corvid at %s" % args.binary)
    return args


def main():
    args = parse_args()
    sigterm_as_interrupt()
    work = tempfile.mkdtemp(prefix="corvid-large-docs-")
    summary = {"cases": {}, "counts": args.counts, "scale": args.scale, "seed": args.seed}
    failed = False
    current = None
    try:
        binary = os.path.join(work, "corvid")
        shutil.copy2(args.binary, binary)
        say("== Corvid large-documents benchmark (issue 34)  %s" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        say(machine_line(args.binary, binary))
        say("run:     cases %s; docs a=%d b=%d c=%d (scale %g); seed %d; bulk bodies ~%d MB; polls every "
            "%d ms, memory samples every %d ms" % (
                ",".join(args.cases), args.counts["a"], args.counts["b"], args.counts["c"], args.scale,
                args.seed, BATCH_BYTES // 1_000_000, POLL_SECONDS * 1000, SAMPLE_SECONDS * 1000))
        t_all = time.perf_counter()
        for c in args.cases:
            say("")
            if args.min_idle > 0:
                idle, waited = wait_idle(args.min_idle, args.idle_wait)
                say("(%s) before it the machine was %.0f%% idle (waited %.0f s for >= %.0f%%%s)" % (
                    c, idle, waited, args.min_idle, "" if idle >= args.min_idle else ": gave up"))
            current = Case(c, args.counts[c], args, binary, work)
            try:
                summary["cases"][c] = current.run()
            except ServerDied as e:
                failed = True
                summary["cases"][c] = dict(current.figures, died={"phase": str(e), "exit": current.server.exit_text()})
                say("  SERVER DIED during '%s': %s. Last lines of its log:\n%s" % (
                    e, current.server.exit_text(), current.server.log_tail()))
            except (RuntimeError, OSError, ValueError, http.client.HTTPException) as e:
                failed = True
                summary["cases"][c] = dict(current.figures, failed=str(e))
                say("  FAILED: %s" % e)
            finally:
                if not args.keep:
                    shutil.rmtree(current.data, ignore_errors=True)
        done = {c: r for c, r in summary["cases"].items() if "died" not in r and "failed" not in r}
        summary["bars"] = comparison(done, args.scale != 1.0)
        summary["seconds_total"] = time.perf_counter() - t_all
        say("")
        say("total: %.0f s" % summary["seconds_total"])
    except KeyboardInterrupt:
        say("interrupted; stopping the server and cleaning up")
        return 130
    finally:
        if current is not None and current.server.alive():
            current.server.stop(30)
        if args.keep:
            say("kept: %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        say(json.dumps(summary, indent=2, sort_keys=True))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
