"""Crash loops with indexes (issue 29): one data directory, $CORVID_LOOP_CYCLES
cycles (default 5; the slow suite's bar is 50: `CORVID_LOOP_CYCLES=50
ctest -R e2e_crash_loop`) of concurrent writes, deletes, bulks and index
definition changes, each ended by `kill -9` at a random moment, then a
restart on the same directory and these checks:

- every acknowledged write is there: each document is in the state of its
  last acknowledged operation (PUT body and ETag, or 404 after a DELETE),
  or in the state of the one operation that was in flight on it at the
  kill; an acknowledged bulk is whole, an unacknowledged one all or
  nothing;
- every index has its last acknowledged definition (or the one in flight);
- every index's answers equal those of a fresh rebuild: a twin index with
  the same definition is created, both catch up with the store, and the
  search totals and matching ids of a few queries, and every reduce row,
  must be equal. (The twin is then deleted.)

Each writer thread owns its ids, so an id's operations are ordered; a
thread stops at its first failed request (the kill), so at most one
operation per thread is in doubt. Seed: $CORVID_SEED (printed).
"""
import json
import os
import random
import sys
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corvid_harness import CorvidServer, bulk_path, doc_path, fetch_docs, main  # noqa: E402

CYCLES = int(os.environ.get('CORVID_LOOP_CYCLES', '5'))
SEED = int(os.environ.get('CORVID_SEED', str(random.randrange(1 << 30))))
COLL = 'loop'
WRITERS = 3
IDS_PER_WRITER = 40
BULK_LINES = 30
TAGS = ['red', 'green', 'blue', 'amber', 'teal']

# Two definitions per index name; the definer alternates between them.
DEFINITIONS = {
    's': [{'type': 'search', 'collection': COLL,
           'fields': {'tag': {'analyzer': 'keyword'}, 'w': {'type': 'number'}}},
          {'type': 'search', 'collection': COLL,
           'fields': {'tag': {'analyzer': 'keyword'}, 'w': {'type': 'number'},
                      'text': {'analyzer': 'english'}}}],
    'm': [{'type': 'mapreduce', 'collection': COLL, 'map': {'tag': 'tag', 'w': 'w'}, 'groupBy': ['tag'],
           'reduce': {'n': 'count()', 'sum': 'sum(w)', 'max': 'max(w)'}},
          {'type': 'mapreduce', 'collection': COLL, 'map': {'tag': 'tag', 'v': 'v'}, 'groupBy': ['tag'],
           'reduce': {'n': 'count()', 'mean': 'avg(v)'}}],
}
QUERIES = ['tag:red', 'tag:blue OR tag:teal', 'w:[0 TO 1]', 'w:[2 TO 9] AND tag:amber']
ABSENT = object()   # a document's state: not there


class Ledger:
    """Per id: the state after its last acknowledged operation, and the
    state after the operation in flight at the kill (if any)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.acked = {}       # id -> (body bytes, etag) or ABSENT
        self.doubt = {}       # id -> possible state of the operation in doubt
        self.indexes = {}     # name -> acknowledged definition, or ABSENT
        self.index_doubt = {}  # name -> definition (or ABSENT) of the PUT/DELETE in doubt
        self.bulk_doubt = []  # the ids of the bulk in flight at the kill: all there or none
        self.errors = []
        self.acked_ops = 0


def doc_body(rng, doc_id, writer, version):
    return json.dumps({'id': doc_id, 'tag': rng.choice(TAGS), 'w': writer, 'v': version,
                       'text': ' '.join(rng.choice(['fox', 'dogs', 'running', 'sea', 'sky'])
                                        for _ in range(rng.randrange(1, 12)))},
                      separators=(',', ':')).encode()


class Load:
    def __init__(self, server, ledger, seed, cycle, killed):
        self.server, self.ledger, self.seed, self.cycle = server, ledger, seed, cycle
        self.killed = killed
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.writer, args=(w,), daemon=True) for w in range(WRITERS)]
        self.threads.append(threading.Thread(target=self.bulk_writer, daemon=True))
        self.threads.append(threading.Thread(target=self.definer, daemon=True))

    def run_until_killed(self, delay):
        for t in self.threads:
            t.start()
        time.sleep(delay)
        self.killed.set()
        self.server.kill()
        for t in self.threads:
            t.join(60)
            if t.is_alive():
                self.ledger.errors.append('a client thread hung')

    def failed(self, what, exc):
        if not self.killed.is_set():
            with self.ledger.lock:
                self.ledger.errors.append('%s failed before the kill: %r' % (what, exc))

    def writer(self, w):
        rng = random.Random(self.seed * 100 + w)
        c = self.server.client(retry=False, timeout=30)
        led = self.ledger
        while not self.stop.is_set():
            doc_id = 'w%d-%d' % (w, rng.randrange(IDS_PER_WRITER))
            with led.lock:
                current = led.acked.get(doc_id, ABSENT)
            if current is not ABSENT and rng.random() < 0.25:
                with led.lock:
                    led.doubt[doc_id] = ABSENT
                try:
                    resp = c.delete(doc_path(COLL, doc_id))
                except Exception as e:
                    self.failed('DELETE ' + doc_id, e)
                    break
                if resp.status != 200:
                    led.errors.append('DELETE %s: %s' % (doc_id, resp.describe()))
                    break
                with led.lock:
                    led.acked[doc_id] = ABSENT
                    del led.doubt[doc_id]
                    led.acked_ops += 1
                continue
            body = doc_body(rng, doc_id, w, self.cycle * 100000 + rng.randrange(100000))
            with led.lock:
                led.doubt[doc_id] = (body, None)
            try:
                resp = c.put(doc_path(COLL, doc_id), body)
            except Exception as e:
                self.failed('PUT ' + doc_id, e)
                break
            if resp.status not in (200, 201):
                led.errors.append('PUT %s: %s' % (doc_id, resp.describe()))
                break
            with led.lock:
                led.acked[doc_id] = (body, resp.json['etag'])
                del led.doubt[doc_id]
                led.acked_ops += 1
        c.close()

    def bulk_writer(self):
        rng = random.Random(self.seed * 100 + 99)
        c = self.server.client(retry=False, timeout=60)
        led = self.ledger
        k = 0
        while not self.stop.is_set():
            ids = ['b%d-%d-%d' % (self.cycle, k, i) for i in range(BULK_LINES)]
            k += 1
            lines = [doc_body(rng, doc_id, 9, i) for i, doc_id in enumerate(ids)]
            with led.lock:
                for doc_id, line in zip(ids, lines):
                    led.doubt[doc_id] = (line, None)
                led.bulk_doubt = ids
            try:
                resp = c.post(bulk_path(COLL), b'\n'.join(lines) + b'\n', content_type='application/x-ndjson')
            except Exception as e:
                self.failed('bulk', e)
                break
            if resp.status != 200:
                led.errors.append('bulk: %s' % resp.describe())
                break
            first = resp.json['firstEtag']
            with led.lock:
                for i, (doc_id, line) in enumerate(zip(ids, lines)):
                    led.acked[doc_id] = (line, first + i)
                    del led.doubt[doc_id]
                led.acked_ops += 1
                led.bulk_doubt = []
            time.sleep(rng.uniform(0.01, 0.05))
        c.close()

    def definer(self):
        rng = random.Random(self.seed * 100 + 98)
        c = self.server.client(retry=False, timeout=30)
        led = self.ledger
        while not self.stop.is_set():
            time.sleep(rng.uniform(0.1, 0.4))
            name = rng.choice(sorted(DEFINITIONS))
            delete = rng.random() < 0.15
            definition = ABSENT if delete else rng.choice(DEFINITIONS[name])
            with led.lock:
                led.index_doubt[name] = definition
            try:
                if delete:
                    resp = c.delete('/indexes/' + name)
                else:
                    resp = c.put('/indexes/' + name, json.dumps(definition))
            except Exception as e:
                self.failed('index ' + name, e)
                break
            if resp.status not in ((200, 404) if delete else (200, 201, 202)):
                led.errors.append('index %s: %s' % (name, resp.describe()))
                break
            with led.lock:
                led.indexes[name] = definition
                del led.index_doubt[name]
                led.acked_ops += 1
        c.close()


class CrashLoopTest(unittest.TestCase):
    maxDiff = 3000

    def check_documents(self, server, ledger, where):
        ids = set(ledger.acked) | set(ledger.doubt)
        got = fetch_docs(server, COLL, ids)
        problems = []
        for doc_id in sorted(ids):
            status, body, etag = got[doc_id]
            allowed = [ledger.acked.get(doc_id, ABSENT)]
            if doc_id in ledger.doubt:
                allowed.append(ledger.doubt[doc_id])
            if status == 404:
                if ABSENT not in allowed:
                    problems.append('%s: acknowledged write lost (404)' % doc_id)
                continue
            if status != 200:
                problems.append('%s: GET %s' % (doc_id, status))
                continue
            ok = any(a is not ABSENT and a[0] == body and (a[1] is None or a[1] == etag) for a in allowed)
            if not ok:
                problems.append('%s: stored %r (ETag %s), allowed %r' % (
                    doc_id, body[:80], etag, [a if a is ABSENT else (a[0][:60], a[1]) for a in allowed]))
        present = [got[i][0] == 200 for i in ledger.bulk_doubt]
        if any(present) and not all(present):
            problems.append('the bulk in flight at the kill is half there: %d of %d lines'
                            % (sum(present), len(present)))
        self.assertEqual(problems[:20], [], '%s: %d document problems' % (where, len(problems)))
        # What is there now is the acknowledged state from here on.
        for doc_id in ids:
            status, body, etag = got[doc_id]
            ledger.acked[doc_id] = (body, etag) if status == 200 else ABSENT
        ledger.doubt.clear()
        ledger.bulk_doubt = []

    def wait_settled(self, c, timeout=120):
        """Every index caught up with the store, no replacement building."""
        deadline = time.monotonic() + timeout
        while True:
            last = c.last_etag()
            listing = c.get('/admin/indexes').json
            pending = [i['name'] for i in listing['indexes']
                       if i['lastIndexedEtag'] < last or 'replacing' in i or i['state'] not in ('idle',)]
            if not pending:
                return listing
            self.assertLess(time.monotonic(), deadline, 'indexes not settled: %s' % listing)
            time.sleep(0.1)

    def answers(self, c, name, definition):
        if definition['type'] == 'search':
            out = {}
            for q in QUERIES:
                r = c.get('/indexes/%s/search?q=%s&limit=1000' % (name, urllib.parse.quote(q, safe='')))
                self.assertEqual(r.status, 200, r.describe())
                out[q] = (r.json['total'], sorted(h['id'] for h in r.json['hits']))
            return out
        r = c.get('/indexes/%s/results?limit=1000' % name)
        self.assertEqual(r.status, 200, r.describe())
        return r.json['rows']

    def check_indexes(self, server, ledger, where):
        c = server.client(timeout=60)
        listing = self.wait_settled(c)
        present = {i['name'] for i in listing['indexes']}
        for name in DEFINITIONS:
            allowed = [ledger.indexes.get(name, ABSENT)]
            if name in ledger.index_doubt:
                allowed.append(ledger.index_doubt[name])
            if name not in present:
                self.assertIn(ABSENT, allowed, '%s: index %s lost' % (where, name))
                ledger.indexes[name] = ABSENT
                continue
            definition = c.get('/indexes/' + name).json['definition']
            self.assertIn(definition, [a for a in allowed if a is not ABSENT],
                          '%s: index %s has a definition nobody acknowledged' % (where, name))
            ledger.indexes[name] = definition
            twin = 'fresh_' + name
            self.assertEqual(c.put('/indexes/' + twin, json.dumps(definition)).status, 201)
            self.wait_settled(c)
            self.assertEqual(self.answers(c, name, definition), self.answers(c, twin, definition),
                             '%s: index %s differs from a fresh rebuild' % (where, name))
            self.assertEqual(c.delete('/indexes/' + twin).status, 200)
        ledger.index_doubt.clear()
        c.close()

    def test_crash_loop(self):
        print('\ncrash loop: %d cycles, CORVID_SEED=%d' % (CYCLES, SEED), file=sys.stderr)
        rng = random.Random(SEED)
        ledger = Ledger()
        server = CorvidServer()
        try:
            server.start()
            c = server.client()
            for name, defs in DEFINITIONS.items():
                self.assertEqual(c.put('/indexes/' + name, json.dumps(defs[0])).status, 201)
                ledger.indexes[name] = defs[0]
            c.close()
            for cycle in range(CYCLES):
                delay = rng.uniform(0.3, 2.5)
                before = ledger.acked_ops
                Load(server, ledger, rng.randrange(1 << 30), cycle, threading.Event()).run_until_killed(delay)
                self.assertEqual(ledger.errors, [], 'cycle %d: %s' % (cycle, server.stderr_tail()))
                server.start()
                where = 'cycle %d (kill after %.2f s)' % (cycle, delay)
                self.check_documents(server, ledger, where)
                self.check_indexes(server, ledger, where)
                print('  cycle %d: kill after %.2f s, %d operations acknowledged, %d documents, indexes %s'
                      % (cycle, delay, ledger.acked_ops - before,
                         sum(1 for s in ledger.acked.values() if s is not ABSENT),
                         sorted(n for n, d in ledger.indexes.items() if d is not ABSENT)), file=sys.stderr)
                if cycle % 3 == 2:
                    for name, defs in DEFINITIONS.items():  # bring deleted indexes back
                        if ledger.indexes.get(name, ABSENT) is ABSENT:
                            c = server.client()
                            self.assertEqual(c.put('/indexes/' + name, json.dumps(defs[0])).status, 201)
                            ledger.indexes[name] = defs[0]
                            c.close()
            server.stop()
        finally:
            server.cleanup()


if __name__ == '__main__':
    main()
