"""End-to-end tests of online backup and restore (API.md "Backup and restore";
the file format at the top of storage/backup_format.h) against the real
`corvid` binary.

1. Under concurrent writes: 30,000 small documents are bulk-loaded, a search
   index and a map/reduce index (count and sum by month) built over them;
   then one writer thread PUTs (new and existing ids) and DELETEs at ~300/s,
   recording every acknowledged write with its etag, and a query thread
   searches, reads results and documents, while GET /admin/backup is read
   (slowly, so that the snapshot is held for about a second). Just before
   the backup the writer sends one bulk of 3,000 updates, inserts and
   deletes, so that the indexes are snapshotted behind the store and a
   restored index has a tail to catch up. E is the Corvid-Backup-Etag
   header. The file's structure is checked (header etag E, every part's
   size, the manifest, the end magic). `corvid restore` makes a new data
   directory and a second server starts on it: every
   document id ever written answers GET exactly as the oracle at E (all
   writes with etag <= E applied; 404 for the deleted and the not yet
   created), the collection listings and GET /collections counts match,
   /changes?since=0 holds each document's latest change at or below E and
   lastEtag == E. The indexes resume without a rebuild: right after start
   their lastIndexedEtag is above 0 (and at least the etag they were idle at
   before the writes began), their indexed-documents counter stays below
   the number of writes, and after minEtag=E the map/reduce rows and the
   search totals of several terms equal an oracle over the oracle documents.
2. `corvid restore` refuses a file with one flipped byte (middle, header
   etag, file checksum), a truncated file (several lengths) and one with a
   byte appended: exit 1, a message on stderr naming the problem, and the
   target directory not created (or left empty when it existed empty). A
   non-empty target directory (or a file): exit 1, its contents untouched.
3. `corvid backup --url ... -o FILE` against a server with --api-key: exit 0
   with the key, and the file restores to a server with the same documents
   and index; exit 1 (and no file) with a wrong key or none (HTTP 403/401).
4./5. On a store of ~110 MB of incompressible JSON: while a backup streams
   to a slow reader (~25 MB/s) VmRSS grows by less than 64 MiB (sampled
   every 50 ms; the store's map is faulted in beforehand, see
   MemoryAndAbortTest) and so does RssAnon; a client that goes away after
   ~1 MB leaves the server serving (/health, writes), its descriptors and
   threads back to where they were, and a second backup (`corvid backup`)
   completes and verifies; SIGTERM while a backup is in progress ends the
   server with exit code 0 within 10 s.

Seed: $CORVID_SEED (default random, printed). $CORVID_SKIP_RSS=1 skips the
memory bounds (sanitizer builds).
Run: python3 test_backup.py --binary build/corvid
"""

import base64
import collections
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corvid_harness as h  # noqa: E402
from corvid_harness import CorvidServer, bulk_path, doc_path, q  # noqa: E402

SEED = int(os.environ.get('CORVID_SEED', str(random.randrange(1 << 30))))
SKIP_RSS = os.environ.get('CORVID_SKIP_RSS') == '1' or os.environ.get('CORVID_SANITIZER_BUILD') == '1'
WAIT_MS = 30000
CLI_TIMEOUT_S = 120

DOCS = 30000              # bulk-loaded documents of test 1
OTHER_DOCS = 500          # a second collection, written to as well
WRITE_RATE = 300          # writer operations per second
BULK_WRITES = 3000        # one bulk of writes just before the backup
WORDS = ['alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot', 'golf', 'hotel', 'india',
         'juliet', 'kilo', 'lima', 'mike', 'november', 'oscar', 'papa', 'quebec', 'romeo',
         'sierra', 'tango', 'uniform', 'victor', 'whiskey', 'xray', 'yankee', 'zulu']
SEARCH_TERMS = ['alpha', 'bravo', 'delta', 'kilo', 'tango', 'zulu']
MONTHS = ['%d-%02d' % (y, m) for y in (2023, 2024) for m in range(1, 13)]

BIG_JSON_BYTES = 110 * 1000 * 1000   # test 4/5 store: incompressible JSON
BIG_DOC_BLOB = 7500                  # random bytes per document (base64: 10,000 chars)
RSS_LIMIT = 64 << 20

SEARCH_DEF = {'type': 'search', 'collection': 'docs',
              'fields': {'text': {'analyzer': 'standard'}, 'date': {'type': 'date'}}}
MONTH_DEF = {'type': 'mapreduce', 'collection': 'docs',
             'map': {'month': 'substr(date, 0, 7)', 'score': 'score'},
             'groupBy': ['month'], 'reduce': {'n': 'count()', 'total': 'sum(score)'}}


def dumps(obj):
    return json.dumps(obj, separators=(',', ':'))


def ordered(body):
    """A JSON text as nested (key, value) pair lists: equality keeps key order."""
    return json.loads(body, object_pairs_hook=list)


def run_cli(*args, timeout=CLI_TIMEOUT_S):
    return subprocess.run([h.binary_path()] + [str(a) for a in args], stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=timeout)


def describe_run(proc):
    return 'exit %s, stdout %r, stderr %r' % (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])


def proc_status(pid):
    """VmRSS, RssAnon, RssFile (bytes) and Threads from /proc/PID/status."""
    out = {}
    try:
        with open('/proc/%d/status' % pid) as f:
            for line in f:
                name, _, value = line.partition(':')
                if name in ('VmRSS', 'RssAnon', 'RssFile'):
                    out[name] = int(value.split()[0]) * 1024
                elif name == 'Threads':
                    out[name] = int(value)
    except OSError:
        pass
    return out


def open_fds(pid):
    try:
        return len(os.listdir('/proc/%d/fd' % pid))
    except OSError:
        return -1


def metric_value(text, name, index):
    m = re.search(r'^%s\{index="%s"\} (\S+)$' % (re.escape(name), re.escape(index)), text, re.M)
    return float(m.group(1)) if m else None


def tree(path):
    """{relative path: bytes or 'dir'} of everything under `path`."""
    out = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path)] = 'dir'
        for f in files:
            full = os.path.join(root, f)
            with open(full, 'rb') as fh:
                out[os.path.relpath(full, path)] = (fh.read(), os.stat(full).st_mtime_ns)
    return out


# ---------------------------------------------------------------------------
# The backup file, read independently of the server's reader


class BackupFile:
    """Parses a backup (storage/backup_format.h, version 1): everything but
    the XXH3 checksums, which the standard library cannot compute."""

    def __init__(self, path):
        self.parts = []   # [(name, size, hash)] in file order
        with open(path, 'rb') as f:
            self._parse(f)

    @staticmethod
    def _exact(f, n, what):
        data = f.read(n)
        if len(data) != n:
            raise AssertionError('backup file ends inside %s' % what)
        return data

    def _parse(self, f):
        head = self._exact(f, 28, 'the header')
        if head[:8] != b'CORVIDBK':
            raise AssertionError('bad magic %r' % head[:8])
        self.version, self.etag, self.log_sequence = struct.unpack('<IQQ', head[8:28])
        while True:
            kind = self._exact(f, 1, 'a record tag')
            if kind == b'E':
                break
            if kind != b'P':
                raise AssertionError('unknown record %r at byte %d' % (kind, f.tell() - 1))
            (name_len,) = struct.unpack('<H', self._exact(f, 2, 'a part name length'))
            name = self._exact(f, name_len, 'a part name').decode('ascii')
            if not re.fullmatch(r'[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*', name) or \
                    any(c in ('.', '..') for c in name.split('/')):
                raise AssertionError('invalid part name %r' % name)
            size = 0
            while True:
                (length,) = struct.unpack('<I', self._exact(f, 4, 'a chunk length'))
                if length == 0:
                    break
                if length > 4 << 20:
                    raise AssertionError('chunk of %d bytes in part %r' % (length, name))
                f.seek(length, os.SEEK_CUR)
                size += length
            stated, digest = struct.unpack('<QQ', self._exact(f, 16, 'a part trailer'))
            if stated != size:
                raise AssertionError('part %r: size %d stated, %d in its chunks' % (name, stated, size))
            self.parts.append((name, size, digest))
        (count,) = struct.unpack('<I', self._exact(f, 4, 'the manifest count'))
        manifest = []
        for _ in range(count):
            (name_len,) = struct.unpack('<H', self._exact(f, 2, 'a manifest name length'))
            name = self._exact(f, name_len, 'a manifest name').decode('ascii')
            size, digest = struct.unpack('<QQ', self._exact(f, 16, 'a manifest entry'))
            manifest.append((name, size, digest))
        if manifest != self.parts:
            raise AssertionError('manifest %r does not list the parts %r' % (manifest[:10], self.parts[:10]))
        tail = self._exact(f, 16, 'the file checksum and end magic')
        if tail[8:] != b'CORVIDBE':
            raise AssertionError('end magic %r' % tail[8:])
        if f.read(1):
            raise AssertionError('bytes after the end magic')

    def names(self):
        return [p[0] for p in self.parts]


def download_backup(host, port, path, api_key=None, pace=None, on_start=None):
    """GET /admin/backup into `path`; pace=(bytes, seconds) reads that much
    and then sleeps. Returns (response headers, bytes, (start, end) times)."""
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        headers = {'Authorization': 'Bearer ' + api_key} if api_key else {}
        start = time.monotonic()
        conn.request('GET', '/admin/backup', headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            raise AssertionError('GET /admin/backup -> %d %r' % (resp.status, resp.read()[:500]))
        if on_start:
            on_start(resp)
        total = 0
        step = pace[0] if pace else 1 << 20
        with open(path, 'wb') as out:
            while True:
                data = resp.read(step)
                if not data:
                    break
                out.write(data)
                total += len(data)
                if pace:
                    time.sleep(pace[1])
        return resp.msg, total, (start, time.monotonic())
    finally:
        conn.close()


def wait_for_exit(server, timeout):
    try:
        return server.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


# ---------------------------------------------------------------------------
# 1. Backup under concurrent writes, restore, compare with the oracle


class Oracle:
    """Every acknowledged write: (collection, id) -> [(etag, body bytes or None)]."""

    def __init__(self):
        self.history = collections.defaultdict(list)

    def put(self, coll, doc_id, etag, body):
        self.history[(coll, doc_id)].append((etag, body))

    def delete(self, coll, doc_id, etag):
        self.history[(coll, doc_id)].append((etag, None))

    def state_at(self, etag):
        """(collection, id) -> (etag, body or None) of the last write <= etag
        (absent: never written by then)."""
        out = {}
        for key, writes in self.history.items():
            last = None
            for w in writes:
                if w[0] <= etag and (last is None or w[0] > last[0]):
                    last = w
            if last is not None:
                out[key] = last
        return out


class RandomSet:
    """A set with O(1) add, discard and uniform random choice."""

    def __init__(self, items=()):
        self.items = []
        self.pos = {}
        for x in items:
            self.add(x)

    def __len__(self):
        return len(self.items)

    def __contains__(self, x):
        return x in self.pos

    def add(self, x):
        if x not in self.pos:
            self.pos[x] = len(self.items)
            self.items.append(x)

    def discard(self, x):
        i = self.pos.pop(x, None)
        if i is None:
            return
        last = self.items.pop()
        if i < len(self.items):
            self.items[i] = last
            self.pos[last] = i

    def choice(self, rng):
        return self.items[rng.randrange(len(self.items))]


class BackupUnderWritesTest(unittest.TestCase):
    maxDiff = 4000

    def setUp(self):
        self.rng = random.Random(SEED)
        self.tmp = tempfile.mkdtemp(prefix='corvid-backup-')
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.server = CorvidServer()
        self.addCleanup(self.server.cleanup)
        self.server.start()
        self.c = self.server.client(timeout=60)
        self.addCleanup(self.c.close)

    # -- helpers ---------------------------------------------------------
    def random_doc(self, rng, extra=None):
        doc = dict(extra or {})
        doc['date'] = '%s-%02d' % (rng.choice(MONTHS), rng.randint(1, 28))
        doc['score'] = rng.randint(0, 999)
        n = rng.randint(2, 7)
        doc['text'] = ' '.join(WORDS[min(len(WORDS) - 1, int(abs(rng.gauss(0, 8))))] for _ in range(n))
        return doc

    def bulk(self, coll, docs, oracle):
        body = '\n'.join(dumps(d) for d in docs) + '\n'
        resp = self.c.post(bulk_path(coll), body, content_type='application/x-ndjson')
        self.assertEqual(resp.status, 200, resp.describe())
        first, last = resp.json['firstEtag'], resp.json['lastEtag']
        self.assertEqual(last - first + 1, len(docs), resp.describe())
        for i, d in enumerate(docs):
            oracle.put(coll, d['id'], first + i, dumps(d).encode())
        return last

    def wait_idle(self, client, names, timeout=60.0):
        deadline = time.monotonic() + timeout
        while True:
            resp = client.get('/admin/indexes')
            self.assertEqual(resp.status, 200, resp.describe())
            body = resp.json
            entries = {e['name']: e for e in body['indexes']}
            if all(n in entries and entries[n]['state'] == 'idle' and entries[n]['backlog'] == 0
                   and entries[n]['lastIndexedEtag'] == body['lastEtag'] for n in names):
                return body['lastEtag']
            if time.monotonic() > deadline:
                self.fail('indexes not idle after %.0f s: %s' % (timeout, resp.describe()))
            time.sleep(0.05)

    # -- the test ----------------------------------------------------------
    def test_backup_under_concurrent_writes_restores_the_state_at_its_etag(self):
        print('\n  seed %d (CORVID_SEED replays it)' % SEED, file=sys.stderr)
        rng = self.rng
        oracle = Oracle()
        t0 = time.monotonic()
        docs = [self.random_doc(rng, {'id': 'd%05d' % i}) for i in range(DOCS)]
        for i in range(0, DOCS, 10000):
            self.bulk('docs', docs[i:i + 10000], oracle)
        self.bulk('other', [self.random_doc(rng, {'id': 'o%04d' % i}) for i in range(OTHER_DOCS)], oracle)
        for name, definition in (('bk_text', SEARCH_DEF), ('bk_month', MONTH_DEF)):
            resp = self.c.put('/indexes/' + name, dumps(definition))
            self.assertEqual(resp.status, 201, resp.describe())
        idle_etag = self.wait_idle(self.c, ['bk_text', 'bk_month'])
        print('  loaded %d documents, indexes idle at etag %d in %.1f s'
              % (DOCS + OTHER_DOCS, idle_etag, time.monotonic() - t0), file=sys.stderr)

        # -- writer and queries while the backup is read -------------------
        stop = threading.Event()
        errors = []
        acks = []  # (etag, monotonic time) of every acknowledged write
        live = {'docs': RandomSet('d%05d' % i for i in range(DOCS)),
                'other': RandomSet('o%04d' % i for i in range(OTHER_DOCS))}
        dead = {'docs': RandomSet(), 'other': RandomSet()}
        wrng = random.Random(SEED + 1)

        bulk_now, bulk_done = threading.Event(), threading.Event()
        counter = {'new': 0}

        def new_id(coll):
            counter['new'] += 1
            return ('n%05d' if coll == 'docs' else 'p%05d') % counter['new']

        def bulk_of_writes(client):
            # One bulk of updates, new documents and deletes (distinct ids):
            # the indexes have it to do when the backup snapshots them.
            lines, seen = [], set()
            while len(lines) < BULK_WRITES:
                r = wrng.random()
                doc_id = new_id('docs') if r < 0.3 else live['docs'].choice(wrng)
                if doc_id in seen:
                    continue
                seen.add(doc_id)
                if r > 0.75:
                    lines.append((doc_id, None, dumps({'id': doc_id, '_deleted': True})))
                else:
                    body = dumps(self.random_doc(wrng, {'id': doc_id, 'v': len(acks)}))
                    lines.append((doc_id, body.encode(), body))
            resp = client.post(bulk_path('docs'), '\n'.join(x[2] for x in lines) + '\n',
                               content_type='application/x-ndjson')
            if resp.status != 200 or resp.json.get('count') != len(lines) or \
                    resp.json['lastEtag'] - resp.json['firstEtag'] + 1 != len(lines):
                errors.append('bulk: ' + resp.describe())
                return False
            now = time.monotonic()
            for i, (doc_id, body, _) in enumerate(lines):
                etag = resp.json['firstEtag'] + i
                if body is None:
                    oracle.delete('docs', doc_id, etag)
                    live['docs'].discard(doc_id)
                    dead['docs'].add(doc_id)
                else:
                    oracle.put('docs', doc_id, etag, body)
                    live['docs'].add(doc_id)
                    dead['docs'].discard(doc_id)
                acks.append((etag, now))
            return True

        def writer():
            client = self.server.client(timeout=30, retry=False)
            interval = 1.0 / WRITE_RATE
            next_at = time.monotonic()
            try:
                while not stop.is_set():
                    if bulk_now.is_set() and not bulk_done.is_set():
                        ok = bulk_of_writes(client)
                        bulk_done.set()
                        if not ok:
                            return
                        next_at = time.monotonic()
                        continue
                    coll = 'docs' if wrng.random() < 0.85 else 'other'
                    r = wrng.random()
                    if r < 0.2 and live[coll]:
                        doc_id = live[coll].choice(wrng)
                        resp = client.delete(doc_path(coll, doc_id))
                        if resp.status != 200 or not isinstance(resp.json, dict):
                            errors.append('DELETE %s/%s: %s' % (coll, doc_id, resp.describe()))
                            return
                        etag = resp.json['etag']
                        oracle.delete(coll, doc_id, etag)
                        live[coll].discard(doc_id)
                        dead[coll].add(doc_id)
                    else:
                        if r < 0.3 and dead[coll]:
                            doc_id = dead[coll].choice(wrng)
                        elif r < 0.55 or not live[coll]:
                            doc_id = new_id(coll)
                        else:
                            doc_id = live[coll].choice(wrng)
                        body = dumps(self.random_doc(wrng, {'v': len(acks)})).encode()
                        expect = 200 if doc_id in live[coll] else 201
                        resp = client.put(doc_path(coll, doc_id), body)
                        if resp.status != expect or not isinstance(resp.json, dict):
                            errors.append('PUT %s/%s (expected %d): %s'
                                          % (coll, doc_id, expect, resp.describe()))
                            return
                        etag = resp.json['etag']
                        oracle.put(coll, doc_id, etag, body)
                        live[coll].add(doc_id)
                        dead[coll].discard(doc_id)
                    if acks and etag <= acks[-1][0]:
                        errors.append('etag %d after %d' % (etag, acks[-1][0]))
                        return
                    acks.append((etag, time.monotonic()))
                    next_at += interval
                    pause = next_at - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    else:
                        next_at = time.monotonic()
            except Exception as e:  # the write's outcome is unknown: the oracle cannot go on
                errors.append('writer: %r' % e)
            finally:
                client.close()

        queries = []  # monotonic times of answered queries

        def querier():
            client = self.server.client(timeout=30)
            qrng = random.Random(SEED + 2)
            try:
                while not stop.is_set():
                    k = qrng.randrange(3)
                    if k == 0:
                        resp = client.get('/indexes/bk_text/search?q=text:%s&limit=5'
                                          % qrng.choice(SEARCH_TERMS))
                        ok = resp.status == 200 and isinstance(resp.json.get('total'), int)
                    elif k == 1:
                        resp = client.get('/indexes/bk_month/results')
                        ok = resp.status == 200 and isinstance(resp.json.get('rows'), list)
                    else:
                        resp = client.get(doc_path('docs', 'd%05d' % qrng.randrange(DOCS)))
                        ok = resp.status in (200, 404)
                    if not ok:
                        errors.append('query: ' + resp.describe())
                        return
                    queries.append(time.monotonic())
                    time.sleep(0.01)
            except Exception as e:
                errors.append('querier: %r' % e)
            finally:
                client.close()

        threads = [threading.Thread(target=writer, daemon=True),
                   threading.Thread(target=querier, daemon=True)]
        for t in threads:
            t.start()
        backup_path = os.path.join(self.tmp, 'under-writes.backup')
        try:
            time.sleep(1.0)
            self.assertFalse(errors, errors)
            bulk_now.set()
            self.assertTrue(bulk_done.wait(30), 'the bulk of writes did not finish')
            self.assertFalse(errors, errors)
            headers, size, (b_start, b_end) = download_backup(
                self.server.host, self.server.port, backup_path, pace=(128 << 10, 0.02))
            time.sleep(0.5)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        self.assertFalse(errors, errors[:5])
        self.assertEqual((headers.get('Content-Type') or '').split(';')[0].strip(), 'application/octet-stream')
        self.assertEqual((headers.get('Transfer-Encoding') or '').lower(), 'chunked', str(headers))
        self.assertIsNotNone(headers.get('Corvid-Backup-Etag'), str(headers))
        E = int(headers['Corvid-Backup-Etag'])
        during = [e for e, t in acks if b_start <= t <= b_end]
        print('  backup: %d bytes at etag %d in %.2f s; %d writes (%d acknowledged while it was read), '
              '%d queries while it was read' % (size, E, b_end - b_start, len(acks), len(during),
                                                 sum(1 for t in queries if b_start <= t <= b_end)),
              file=sys.stderr)
        # The backup was taken while writes went on: some before E, some after,
        # and writes kept being acknowledged while it was read.
        self.assertGreater(E, idle_etag, 'no write of the writer is in the backup')
        self.assertTrue(any(e > E for e, _ in acks), 'no write after the backup etag %d' % E)
        self.assertGreaterEqual(len(during), 5, 'writes stalled while the backup was read')
        self.assertTrue(any(b_start <= t <= b_end for t in queries), 'no query answered during the backup')
        self.assertIn(E, [e for e, _ in acks], 'E=%d is not the etag of an acknowledged write' % E)

        # -- the file ----------------------------------------------------------
        bf = BackupFile(backup_path)
        self.assertEqual((bf.version, bf.etag, bf.log_sequence), (1, E, 0))
        names = bf.names()
        self.assertIn('store/data.mdb', names)
        for index in ('bk_text', 'bk_month'):
            self.assertIn('indexes/%s/v1/definition.json' % index, names)
            self.assertTrue(any(n.startswith('indexes/%s/v1/state/' % index) for n in names), names)

        # -- restore and a server on it -----------------------------------------
        restored = os.path.join(self.tmp, 'restored')
        proc = run_cli('restore', '--from', backup_path, '--data', restored)
        self.assertEqual(proc.returncode, 0, describe_run(proc))
        server2 = CorvidServer(data_dir=restored)
        self.addCleanup(server2.cleanup)
        server2.start()
        c2 = server2.client(timeout=60)
        self.addCleanup(c2.close)
        resp = c2.get('/admin/indexes')
        self.assertEqual(resp.status, 200, resp.describe())
        first_look = {e['name']: e for e in resp.json['indexes']}
        self.assertEqual(sorted(first_look), ['bk_month', 'bk_text'], resp.describe())
        self.assertEqual(resp.json['lastEtag'], E, resp.describe())
        for name, entry in first_look.items():
            # Resumed from the snapshot, not rebuilt: the indexes were idle at
            # idle_etag before the writes began and snapshotted after.
            self.assertGreater(entry['lastIndexedEtag'], 0, 'index %s right after start: %r' % (name, entry))
            self.assertGreaterEqual(entry['lastIndexedEtag'], idle_etag,
                                    'index %s right after start: %r' % (name, entry))
            self.assertLessEqual(entry['lastIndexedEtag'], E, 'index %s: %r' % (name, entry))
        print('  restored server: indexes right after start at %s (E = %d)'
              % ({n: e['lastIndexedEtag'] for n, e in first_look.items()}, E), file=sys.stderr)

        state = oracle.state_at(E)
        self.check_documents(server2, c2, oracle, state, E)
        self.check_indexes(c2, state, E, acks)

        # The restored server goes on from E.
        resp = c2.put(doc_path('docs', 'after-restore'), b'{"date":"2024-01-01","score":1,"text":"zulu"}')
        self.assertEqual(resp.status, 201, resp.describe())
        self.assertGreater(resp.json['etag'], E, resp.describe())
        c2.close()
        server2.stop()
        self.c.close()
        self.server.stop()  # the server that was backed up ends cleanly too

    def check_documents(self, server2, c2, oracle, state, E):
        # Every id ever written (at any etag, before or after E): GET equals the
        # oracle at E, with its etag; 404 where deleted or not yet created.
        keys = sorted(oracle.history)
        problems = []
        lock = threading.Lock()

        def check(part):
            client = server2.client(timeout=60)
            try:
                for coll, doc_id in part:
                    resp = client.get(doc_path(coll, doc_id))
                    want = state.get((coll, doc_id))
                    if want is None or want[1] is None:
                        ok = resp.status == 404
                        expect = '404 (%s)' % ('never written by E' if want is None else 'deleted at %d' % want[0])
                    else:
                        ok = (resp.status == 200 and resp.header('ETag') == '"%d"' % want[0]
                              and ordered(resp.body) == ordered(want[1]))
                        expect = '200 etag %d %r' % (want[0], want[1][:200])
                    if not ok:
                        with lock:
                            problems.append('%s/%s: %s; expected %s' % (coll, doc_id, resp.describe(), expect))
            finally:
                client.close()

        workers = [threading.Thread(target=check, args=(keys[i::2],)) for i in range(2)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        self.assertFalse(problems, '%d of %d documents differ from the oracle at etag %d:\n  %s'
                         % (len(problems), len(keys), E, '\n  '.join(problems[:10])))

        # The listings hold exactly the live documents at E.
        for coll in ('docs', 'other'):
            listed = {}
            after = None
            while True:
                resp = c2.get('/docs/%s?limit=1000%s' % (q(coll), '&after=' + q(after) if after else ''))
                self.assertEqual(resp.status, 200, resp.describe())
                for r in resp.json['results']:
                    listed[r['id']] = r['etag']
                after = resp.json.get('next')
                if after is None:
                    break
            expected = {k[1]: v[0] for k, v in state.items() if k[0] == coll and v[1] is not None}
            self.assertEqual(len(listed), len(expected), coll)
            self.assertEqual(listed, expected, coll)

        resp = c2.get('/collections')
        self.assertEqual(resp.status, 200, resp.describe())
        got = {c['name']: (c['count'], c['tombstones']) for c in resp.json['collections']}
        want = {}
        for (coll, _), (_, body) in state.items():
            n, t = want.get(coll, (0, 0))
            want[coll] = (n + (body is not None), t + (body is None))
        self.assertEqual(got, want, resp.describe())
        self.assertEqual(resp.json['lastEtag'], E, resp.describe())

        # The change feed: each document's latest change at or below E.
        changes, last = c2.all_changes(0)
        self.assertEqual(last, E)
        latest = {}
        for ch in changes:
            key = (ch['collection'], ch['id'])
            self.assertLessEqual(ch['etag'], E, ch)
            writes = dict(oracle.history.get(key, []))
            self.assertIn(ch['etag'], writes, 'a change no write made: %r' % ch)
            self.assertEqual(ch['deleted'], writes[ch['etag']] is None, ch)
            if key not in latest or ch['etag'] > latest[key][0]:
                latest[key] = (ch['etag'], ch['deleted'])
        expected = {k: (v[0], v[1] is None) for k, v in state.items()}
        missing = sorted(set(expected) - set(latest))[:10]
        extra = sorted(set(latest) - set(expected))[:10]
        self.assertFalse(missing or extra, 'change feed: missing %r, extra %r' % (missing, extra))
        wrong = [(k, latest[k], expected[k]) for k in expected if latest[k] != expected[k]][:10]
        self.assertFalse(wrong, 'change feed: latest change differs (key, got, expected): %r' % wrong)

    def check_indexes(self, c2, state, E, acks):
        live = [ordered_doc for (coll, _), (_, body) in state.items()
                if coll == 'docs' and body is not None for ordered_doc in [json.loads(body)]]
        # map/reduce: count and sum by month
        rows = {}
        for d in live:
            m = d['date'][:7]
            n, t = rows.get(m, (0, 0))
            rows[m] = (n + 1, t + d['score'])
        expected = [{'month': m, 'n': rows[m][0], 'total': rows[m][1]} for m in sorted(rows)]
        resp = c2.get('/indexes/bk_month/results?limit=1000&minEtag=%d&waitMs=%d' % (E, WAIT_MS))
        self.assertEqual(resp.status, 200, resp.describe())
        self.assertFalse(resp.json['stale'], resp.describe())
        self.assertGreaterEqual(resp.json['indexEtag'], E, resp.describe())
        self.assertEqual(resp.json['rows'], expected)
        self.assertEqual(resp.json['total'], len(expected))
        # search: exact totals of several terms, and of everything
        for term in SEARCH_TERMS + ['*']:
            if term == '*':
                want = len(live)
                query = '*'
            else:
                want = sum(1 for d in live if term in d['text'].split())
                query = 'text:' + term
            resp = c2.get('/indexes/bk_text/search?q=%s&limit=1&minEtag=%d&waitMs=%d'
                          % (q(query), E, WAIT_MS))
            self.assertEqual(resp.status, 200, resp.describe())
            self.assertFalse(resp.json['stale'], resp.describe())
            self.assertGreaterEqual(resp.json['indexEtag'], E, resp.describe())
            self.assertEqual(resp.json['total'], want, 'q=%s: %s' % (query, resp.describe()))
        # Caught up by replaying the writes after each index's snapshot, not by
        # indexing the collection again.
        resp = c2.get('/metrics')
        self.assertEqual(resp.status, 200, resp.describe())
        text = resp.body.decode()
        writes_to_e = sum(1 for e, _ in acks if e <= E)
        for name in ('bk_text', 'bk_month'):
            done = metric_value(text, 'corvid_index_indexed_documents_total', name)
            self.assertIsNotNone(done, 'no corvid_index_indexed_documents_total for %s' % name)
            print('  restored index %s indexed %d documents to catch up (%d writes up to E)'
                  % (name, done, writes_to_e), file=sys.stderr)
            self.assertLessEqual(done, writes_to_e,
                                 'index %s indexed %d documents after the restore; only %d writes '
                                 'preceded E (a rebuild?)' % (name, done, writes_to_e))


# ---------------------------------------------------------------------------
# 2. Damaged backups and occupied targets


class RestoreRefusesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix='corvid-backup-')
        server = CorvidServer()
        try:
            server.start()
            c = server.client(timeout=60)
            lines = ['{"id":"k%04d","month":"2024-%02d","score":%d,"text":"word%d"}'
                     % (i, i % 12 + 1, i, i % 7) for i in range(3000)]
            resp = c.post(bulk_path('small'), '\n'.join(lines) + '\n', content_type='application/x-ndjson')
            assert resp.status == 200, resp.describe()
            loaded = resp.json['lastEtag']
            resp = c.put('/indexes/small_month', dumps({
                'type': 'mapreduce', 'collection': 'small', 'map': {'month': 'month', 'score': 'score'},
                'groupBy': ['month'], 'reduce': {'n': 'count()', 'total': 'sum(score)'}}))
            assert resp.status == 201, resp.describe()
            resp = c.get('/indexes/small_month/results?minEtag=%d&waitMs=%d' % (loaded, WAIT_MS))
            assert resp.status == 200 and not resp.json['stale'], resp.describe()
            c.close()
            cls.good = os.path.join(cls.tmp, 'good.backup')
            headers, _, _ = download_backup(server.host, server.port, cls.good)
            cls.etag = int(headers['Corvid-Backup-Etag'])
            server.stop()
        finally:
            server.cleanup()
        with open(cls.good, 'rb') as f:
            cls.data = f.read()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def variant(self, name, data):
        path = os.path.join(self.tmp, name)
        with open(path, 'wb') as f:
            f.write(data)
        return path

    def flipped(self, offset):
        b = bytearray(self.data)
        b[offset] ^= 0x5a
        return bytes(b)

    def assertRefused(self, path, words, context):
        """Exit 1 with a message naming the problem; neither a fresh target
        nor an empty one gets anything."""
        for existing in (False, True):
            target = os.path.join(self.tmp, 'target-%d' % existing)
            shutil.rmtree(target, ignore_errors=True)
            if existing:
                os.mkdir(target)
            proc = run_cli('restore', '--from', path, '--data', target)
            ctx = '%s (target %s): %s' % (context, 'empty' if existing else 'absent', describe_run(proc))
            self.assertEqual(proc.returncode, 1, ctx)
            message = proc.stderr.decode('utf-8', 'replace').lower()
            self.assertTrue(any(w in message for w in words), 'message names none of %r: %s' % (words, ctx))
            if existing:
                self.assertTrue(os.path.isdir(target), ctx)
                self.assertEqual(os.listdir(target), [], ctx)
            else:
                self.assertFalse(os.path.exists(target), ctx + ': the target was created')

    def test_the_intact_file_restores(self):
        BackupFile(self.good)  # and parses
        target = os.path.join(self.tmp, 'intact')
        proc = run_cli('restore', '--from', self.good, '--data', target)
        self.assertEqual(proc.returncode, 0, describe_run(proc))
        self.assertTrue(os.listdir(target))
        server = CorvidServer(data_dir=target)
        self.addCleanup(server.cleanup)
        server.start()
        c = server.client()
        self.addCleanup(c.close)
        resp = c.get('/collections')
        self.assertEqual(resp.json['collections'], [{'name': 'small', 'count': 3000, 'tombstones': 0}])
        self.assertEqual(resp.json['lastEtag'], self.etag)
        resp = c.get('/indexes/small_month/results?minEtag=%d&waitMs=%d' % (self.etag, WAIT_MS))
        self.assertEqual(sum(r['n'] for r in resp.json['rows']), 3000, resp.describe())
        c.close()
        server.stop()

    def test_a_flipped_byte_is_refused(self):
        n = len(self.data)
        corrupt = ('checksum', 'corrupt', 'mismatch', 'does not match', 'invalid', 'damaged',
                   'end marker is missing')
        cases = [('middle', n // 2), ('header etag', 12), ('first chunk', 100),
                 ('file checksum', n - 16), ('end magic', n - 1)]
        for label, offset in cases:
            with self.subTest(label):
                path = self.variant('flip-%d.backup' % offset, self.flipped(offset))
                self.assertRefused(path, corrupt, 'byte %d of %d flipped (%s)' % (offset, n, label))

    def test_a_truncated_file_is_refused(self):
        n = len(self.data)
        for length in (n // 2, n - 1, n - 17, 28, 5, 0):
            with self.subTest(length=length):
                path = self.variant('trunc-%d.backup' % length, self.data[:length])
                self.assertRefused(path, ('truncated', 'too short', 'ends', 'not a corvid backup'),
                                   'truncated to %d of %d bytes' % (length, n))
        path = self.variant('appended.backup', self.data + b'\0')
        self.assertRefused(path, ('follow', 'trailing', 'corrupt', 'after the end'), 'one byte appended')

    def test_a_non_empty_target_is_left_untouched(self):
        target = os.path.join(self.tmp, 'occupied')
        os.makedirs(os.path.join(target, 'sub'))
        with open(os.path.join(target, 'keep.txt'), 'wb') as f:
            f.write(b'precious')
        with open(os.path.join(target, 'sub', 'data.mdb'), 'wb') as f:
            f.write(b'\1' * 5000)
        before = tree(target)
        proc = run_cli('restore', '--from', self.good, '--data', target)
        self.assertEqual(proc.returncode, 1, describe_run(proc))
        message = proc.stderr.decode('utf-8', 'replace').lower()
        self.assertIn('empty', message, describe_run(proc))
        self.assertEqual(tree(target), before)
        # A file where the directory would go: refused, left as it was.
        target = os.path.join(self.tmp, 'a-file')
        with open(target, 'wb') as f:
            f.write(b'not a directory')
        proc = run_cli('restore', '--from', self.good, '--data', target)
        self.assertEqual(proc.returncode, 1, describe_run(proc))
        self.assertTrue(proc.stderr.strip(), describe_run(proc))
        with open(target, 'rb') as f:
            self.assertEqual(f.read(), b'not a directory')


# ---------------------------------------------------------------------------
# 3. `corvid backup` and the API key


class BackupCommandTest(unittest.TestCase):
    KEY = 'backup-key-%d' % SEED

    def test_backup_command_with_and_without_the_right_key(self):
        tmp = tempfile.mkdtemp(prefix='corvid-backup-')
        self.addCleanup(shutil.rmtree, tmp, True)
        server = CorvidServer(['--api-key', self.KEY])
        self.addCleanup(server.cleanup)
        server.start()
        c = server.client(api_key=self.KEY)
        self.addCleanup(c.close)
        bodies = {}
        for i in range(200):
            body = dumps({'n': i, 'month': '2024-%02d' % (i % 12 + 1), 'big': 18446744073709551615 - i,
                          'f': 1.0, 'text': 'hello world %d' % i}).encode()
            resp = c.put(doc_path('keyed', 'k%03d' % i), body)
            self.assertEqual(resp.status, 201, resp.describe())
            bodies['k%03d' % i] = (resp.json['etag'], body)
        resp = c.delete(doc_path('keyed', 'k007'))
        self.assertEqual(resp.status, 200, resp.describe())
        del bodies['k007']
        resp = c.put('/indexes/keyed_text', dumps({'type': 'search', 'collection': 'keyed',
                                                    'fields': {'text': {'analyzer': 'standard'}}}))
        self.assertEqual(resp.status, 201, resp.describe())
        last = c.last_etag()
        url = 'http://%s:%d' % (server.host, server.port)

        # Refused: a wrong key, no key. No file is left behind.
        for label, extra in (('wrong key', ['--api-key', self.KEY + 'x']), ('no key', [])):
            with self.subTest(label):
                out = os.path.join(tmp, 'refused-%s.backup' % label.replace(' ', '-'))
                proc = run_cli('backup', '--url', url, '-o', out, *extra)
                self.assertEqual(proc.returncode, 1, '%s: %s' % (label, describe_run(proc)))
                self.assertTrue(proc.stderr.strip(), describe_run(proc))
                self.assertFalse(os.path.exists(out), '%s: %s was left behind' % (label, out))
        # The same through HTTP (API.md: 401 missing, 403 wrong API key).
        for key, status in ((None, 401), (self.KEY + 'x', 403)):
            client = server.client(api_key=key)
            resp = client.get('/admin/backup')
            client.close()
            self.assertEqual(resp.status, status, resp.describe())

        # HEAD: GET's header (chunked, no Content-Length: the size is not
        # known before the stream) and no body, so that the next response
        # on the connection follows at once (RFC 9110 §9.3.2).
        sock = socket.create_connection((server.host, server.port), timeout=30)
        try:
            auth = 'Authorization: Bearer %s\r\n' % self.KEY
            sock.sendall(('HEAD /admin/backup HTTP/1.1\r\nHost: x\r\n%s\r\n'
                          'GET /health HTTP/1.1\r\nHost: x\r\n%s\r\n' % (auth, auth)).encode())
            (head_status, head_headers, head_body), (status, _, body) = h.read_responses(sock, 2)
        finally:
            sock.close()
        self.assertEqual(head_status, 200, head_headers)
        self.assertEqual(head_headers.get('transfer-encoding'), 'chunked', head_headers)
        self.assertNotIn('content-length', head_headers)
        self.assertEqual(head_headers.get('content-type'), 'application/octet-stream', head_headers)
        self.assertIn('corvid-backup-etag', head_headers)
        self.assertEqual(head_body, b'')
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body).get('status'), 'ok', body)

        # The right key: exit 0, a file that parses and restores.
        out = os.path.join(tmp, 'keyed.backup')
        proc = run_cli('backup', '--url', url, '-o', out, '--api-key', self.KEY)
        self.assertEqual(proc.returncode, 0, describe_run(proc))
        bf = BackupFile(out)
        self.assertEqual(bf.etag, last)
        self.assertIn('store/data.mdb', bf.names())
        restored = os.path.join(tmp, 'restored')
        proc = run_cli('restore', '--from', out, '--data', restored)
        self.assertEqual(proc.returncode, 0, describe_run(proc))
        server2 = CorvidServer(data_dir=restored)
        self.addCleanup(server2.cleanup)
        server2.start()
        c2 = server2.client()
        self.addCleanup(c2.close)
        resp = c2.get('/collections')
        self.assertEqual(resp.json, {'collections': [{'name': 'keyed', 'count': 199, 'tombstones': 1}],
                                     'lastEtag': last}, resp.describe())
        for doc_id, (etag, body) in bodies.items():
            resp = c2.get(doc_path('keyed', doc_id))
            self.assertEqual(resp.status, 200, resp.describe())
            self.assertEqual(resp.header('ETag'), '"%d"' % etag, resp.describe())
            self.assertEqual(ordered(resp.body), ordered(body), resp.describe())
        self.assertEqual(c2.get(doc_path('keyed', 'k007')).status, 404)
        resp = c2.get('/indexes/keyed_text/search?q=hello&limit=0&minEtag=%d&waitMs=%d' % (last, WAIT_MS))
        self.assertEqual(resp.status, 200, resp.describe())
        self.assertEqual(resp.json['total'], 199, resp.describe())
        c2.close()
        server2.stop()
        c.close()
        server.stop()


# ---------------------------------------------------------------------------
# 4. and 5. A large store: memory while streaming, clients that go away, SIGTERM


class MemoryAndAbortTest(unittest.TestCase):
    """One server with ~110 MB of incompressible JSON (the backup is ~90 MB,
    more than the 64 MiB bound, so a server holding it would fail). The
    tests run in name order; the last one ends the server with SIGTERM.

    VmRSS counts the pages of the store's memory map (LMDB's data.mdb) that
    the process has touched. The store copy (mdb_env_copyfd2) walks every
    page of that map, so on a store nothing has read since it was written
    VmRSS grows by about the store's size (RssFile: page cache, which the
    kernel reclaims, not memory the server holds), as it does for any
    reader of every document. The store is therefore read through once
    before the baseline is taken; RssAnon is bounded as well, which needs
    no such step."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix='corvid-backup-')
        cls.server = CorvidServer()
        try:
            cls.server.start()
            c = cls.server.client(timeout=120)
            rng = random.Random(SEED + 5)
            n = 0
            per_doc = BIG_DOC_BLOB * 4 // 3
            count = BIG_JSON_BYTES // per_doc
            t0 = time.monotonic()
            while n < count:
                lines = []
                for _ in range(min(1500, count - n)):
                    blob = base64.b64encode(rng.getrandbits(BIG_DOC_BLOB * 8).to_bytes(BIG_DOC_BLOB, 'little'))
                    lines.append(b'{"id":"b%06d","blob":"%s"}' % (n, blob))
                    n += 1
                resp = c.post(bulk_path('big'), b'\n'.join(lines) + b'\n', content_type='application/x-ndjson')
                assert resp.status == 200, resp.describe()
            cls.docs = n
            cls.last_etag = c.last_etag()
            # Fault the store's map in (what any reader of every document does),
            # so that VmRSS before the backup already counts the file-backed pages
            # of data.mdb that the copy walks; its anonymous memory is what counts.
            after = None
            while True:
                resp = c.get('/docs/big?limit=1000' + ('&after=' + after if after else ''))
                assert resp.status == 200, resp.describe()
                after = resp.json.get('next')
                if after is None:
                    break
            c.close()
            print('\n  large store: %d documents (%d MB of JSON) loaded and read in %.1f s'
                  % (n, n * (per_doc + 24) // 1000000, time.monotonic() - t0), file=sys.stderr)
        except BaseException:
            cls.server.cleanup()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertTrue(self.server.running(), 'server not running; stderr:\n' + self.server.stderr_tail())

    def backup_cli(self, name):
        out = os.path.join(self.tmp, name)
        proc = run_cli('backup', '--url', 'http://%s:%d' % (self.server.host, self.server.port), '-o', out)
        self.assertEqual(proc.returncode, 0, describe_run(proc))
        bf = BackupFile(out)
        os.unlink(out)
        return bf

    def raw_backup_request(self):
        sock = self.server.connect(timeout=30)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        sock.sendall(b'GET /admin/backup HTTP/1.1\r\nHost: x\r\n\r\n')
        buf = b''
        while b'\r\n\r\n' not in buf:
            chunk = sock.recv(65536)
            self.assertTrue(chunk, 'connection closed before the header: %r' % buf)
            buf += chunk
        head, _, rest = buf.partition(b'\r\n\r\n')
        self.assertTrue(head.startswith(b'HTTP/1.1 200'), head)
        return sock, len(rest)

    @unittest.skipIf(SKIP_RSS, 'CORVID_SKIP_RSS: a sanitizer build')
    def test_1_memory_while_streaming_to_a_slow_reader(self):
        pid = self.server.proc.pid
        time.sleep(2.5)  # the server trims its allocator once quiet for 2 s (http_server.cc)
        before = proc_status(pid)
        samples = []
        done = threading.Event()

        def sample():
            while not done.is_set():
                samples.append(proc_status(pid))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        path = os.path.join(self.tmp, 'slow.backup')
        try:
            headers, size, (t0, t1) = download_backup(self.server.host, self.server.port, path,
                                                      pace=(256 << 10, 0.01))
        finally:
            done.set()
            sampler.join()
        bf = BackupFile(path)
        os.unlink(path)
        self.assertEqual(bf.etag, self.last_etag)
        self.assertEqual(int(headers['Corvid-Backup-Etag']), self.last_etag)
        peak = {k: max(s.get(k, 0) for s in samples) for k in ('VmRSS', 'RssAnon', 'RssFile')}
        mib = lambda v: v / 1048576.0  # noqa: E731
        print('  slow backup: %.1f MB in %.1f s, %d samples; VmRSS %.1f -> peak %.1f MiB, '
              'RssAnon %.1f -> %.1f, RssFile %.1f -> %.1f'
              % (size / 1e6, t1 - t0, len(samples), mib(before['VmRSS']), mib(peak['VmRSS']),
                 mib(before['RssAnon']), mib(peak['RssAnon']), mib(before['RssFile']), mib(peak['RssFile'])),
              file=sys.stderr)
        self.assertGreater(size, RSS_LIMIT, 'the backup is too small to tell')
        self.assertGreaterEqual(len(samples), 20)
        self.assertLess(peak['VmRSS'] - before['VmRSS'], RSS_LIMIT,
                        'VmRSS grew by %.1f MiB while the backup streamed' % mib(peak['VmRSS'] - before['VmRSS']))
        self.assertLess(peak['RssAnon'] - before['RssAnon'], RSS_LIMIT,
                        'RssAnon grew by %.1f MiB while the backup streamed'
                        % mib(peak['RssAnon'] - before['RssAnon']))

    def test_2_a_client_that_goes_away(self):
        pid = self.server.proc.pid
        fds_before, threads_before = open_fds(pid), proc_status(pid).get('Threads')
        sock, got = self.raw_backup_request()
        while got < (1 << 20):
            chunk = sock.recv(65536)
            self.assertTrue(chunk, 'backup ended after %d bytes' % got)
            got += len(chunk)
        sock.close()
        c = self.server.client(timeout=10)
        try:
            resp = c.get('/health')
            self.assertEqual(resp.status, 200, resp.describe())
            # Writes are not held off by the abandoned snapshot.
            resp = c.put(doc_path('big', 'after-abort'), b'{"x":1}')
            self.assertEqual(resp.status, 201, resp.describe())
            last = resp.json['etag']
            # The abandoned backup lets go of its descriptors (the store copy's
            # pipe) and threads.
            deadline = time.monotonic() + 10
            while True:
                fds, threads = open_fds(pid), proc_status(pid).get('Threads')
                if fds <= fds_before + 1 and threads <= threads_before:
                    break
                if time.monotonic() > deadline:
                    self.fail('10 s after the client went away: %d descriptors (%d before), %d threads (%d before)'
                              % (fds, fds_before, threads, threads_before))
                time.sleep(0.1)
        finally:
            c.close()
        bf = self.backup_cli('second.backup')
        self.assertEqual(bf.etag, last)
        self.assertTrue(self.server.running())
        c = self.server.client(timeout=10)
        self.assertEqual(c.get('/health').status, 200)
        c.close()

    def test_3_sigterm_during_a_backup(self):
        sock, got = self.raw_backup_request()
        try:
            while got < (2 << 20):
                chunk = sock.recv(65536)
                self.assertTrue(chunk, 'backup ended after %d bytes' % got)
                got += len(chunk)
            # The client stops reading: the backup is in progress, held up by it.
            time.sleep(0.3)
            self.assertTrue(self.server.running())
            t0 = time.monotonic()
            self.server.send_signal(signal.SIGTERM)
            # Waits past the 10 s bound, to tell a late exit from a hang.
            rc = wait_for_exit(self.server, 40)
            took = time.monotonic() - t0
            if rc is None:
                self.server.kill()
                self.fail('the server did not exit within 40 s of SIGTERM during a backup; stderr:\n'
                          + self.server.stderr_tail())
            print('  SIGTERM during a backup: exit %d after %.2f s' % (rc, took), file=sys.stderr)
            self.assertLess(took, 10.0, 'the server exited (code %d) %.2f s after SIGTERM during a backup '
                            'whose client had stopped reading; stderr:\n%s'
                            % (rc, took, self.server.stderr_tail()))
            self.assertEqual(rc, 0, 'exit code after SIGTERM; stderr:\n' + self.server.stderr_tail())
        finally:
            sock.close()


if __name__ == '__main__':
    h.main()
