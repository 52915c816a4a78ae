"""Damaged files (issue 29; docs/http-choices.md, "Damaged files").

One data directory is built once: 3,000 documents, a search index `s` and a
map/reduce index `m` over them, both caught up; their answers are the
oracle. Then, for each case, a copy of that directory is damaged with the
server stopped (bytes flipped, a file truncated or deleted) and the server
started on it:
- an index file (a segment, the MANIFEST, the map/reduce LMDB file): the
  server starts, the damage is reported in /admin/indexes errors (etag 0,
  "index files damaged (...)") when a checksum or LMDB's own checks can see
  it, the index rebuilds itself from the store, and its answers equal the
  oracle;
- errors.log: answers unchanged, the server keeps serving;
- definition.json: the index is left out (404), the other one serves, and
  stderr names the file;
- the store's data.mdb (truncated, both meta pages flipped, deleted under
  existing indexes): `corvid serve` exits 1 with a message naming
  data.mdb, and never serves.
`corvid verify --data DIR` (API.md, Command line) runs on every damaged
copy before the server sees it: exit 1 and a DAMAGED line naming the
file; on the pristine directory and on every copy the server rebuilt, exit
0, and it changes no file.
"""
import hashlib
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.parse

from corvid_harness import CorvidServer, binary_path, bulk_path, main

DOCS = 3000
SEED = int(os.environ.get('CORVID_SEED', str(random.randrange(1 << 30))))
SEARCH = {'type': 'search', 'collection': 'c',
          'fields': {'t': {'analyzer': 'standard'}, 'n': {'type': 'number'}}}
MAPREDUCE = {'type': 'mapreduce', 'collection': 'c', 'map': {'k': 'k', 'v': 'n'}, 'groupBy': ['k'],
             'reduce': {'count': 'count()', 'sum': 'sum(v)', 'max': 'max(v)'}}
QUERIES = ['fox', 'dog', 'fox AND dog', '"red fox"', 'n:[100 TO 200]']


def flip(path, offset, count=8, rng=None):
    rng = rng or random.Random(SEED)
    with open(path, 'r+b') as f:
        f.seek(offset)
        old = f.read(count)
        f.seek(offset)
        f.write(bytes(b ^ (1 + rng.randrange(255)) for b in old))


def truncate(path, fraction=0.5):
    with open(path, 'r+b') as f:
        f.truncate(int(os.path.getsize(path) * fraction))


class CorruptionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        print('corruption tests: CORVID_SEED=%d' % SEED)
        cls.tmp = tempfile.mkdtemp(prefix='corvid-corrupt-')
        cls.pristine = os.path.join(cls.tmp, 'pristine')
        os.mkdir(cls.pristine)
        rng = random.Random(SEED)
        words = ['fox', 'dog', 'red', 'cat', 'owl', 'sea', 'sky']
        server = CorvidServer(['--listen', '127.0.0.1:0'], data_dir=cls.pristine)
        try:
            server.start()
            c = server.client()
            for start in range(0, DOCS, 1000):
                lines = ''.join(json.dumps({'id': 'd%d' % i, 'k': 'k%d' % rng.randrange(40), 'n': i,
                                            't': ' '.join(rng.choice(words) for _ in range(6))}) + '\n'
                                for i in range(start, start + 1000))
                assert c.post(bulk_path('c'), lines, content_type='application/x-ndjson').status == 200
            assert c.put('/indexes/s', json.dumps(SEARCH)).status == 201
            assert c.put('/indexes/m', json.dumps(MAPREDUCE)).status == 201
            cls.oracle = cls.answers(c)
            c.close()
            server.stop()
        finally:
            server.cleanup()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @staticmethod
    def answers(c, timeout=60.0):
        """Search totals and top ids per query, and every reduce row, once
        both indexes have caught up with the store."""
        last = c.last_etag()
        out = {}
        for q in QUERIES:
            r = c.get('/indexes/s/search?q=%s&limit=20&minEtag=%d&waitMs=%d'
                      % (urllib.parse.quote(q, safe=''), last, timeout * 1000))
            assert r.status == 200, r.describe()
            assert not r.json['stale'], r.describe()
            out[q] = (r.json['total'], [h['id'] for h in r.json['hits']])
        r = c.get('/indexes/m/results?limit=1000&minEtag=%d&waitMs=%d' % (last, timeout * 1000))
        assert r.status == 200, r.describe()
        assert not r.json['stale'], r.describe()
        out['rows'] = r.json['rows']
        return out

    def damaged_copy(self):
        target = os.path.join(self.tmp, self._testMethodName)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(self.pristine, target)
        return target

    @staticmethod
    def state_dir(data, index):
        top = os.path.join(data, 'indexes', index)
        with open(os.path.join(top, 'current')) as f:
            return os.path.join(top, f.read().strip())

    def segments(self, data):
        state = os.path.join(self.state_dir(data, 's'), 'state')
        segs = sorted(n for n in os.listdir(state) if n.startswith('seg-'))
        self.assertTrue(segs)
        return [os.path.join(state, n) for n in segs]

    def serve_and_check(self, data, damaged=None, reported=True):
        """Starts on `data`; the damaged index (if any) reports it (when
        `reported`) and both answer as the oracle."""
        server = CorvidServer(['--listen', '127.0.0.1:0'], data_dir=data)
        try:
            server.start()
            c = server.client()
            self.assertEqual(self.answers(c), self.oracle)
            deadline = time.monotonic() + 30
            while True:  # caught up; the last batch's bookkeeping may still be running
                listing = c.get('/admin/indexes').json['indexes']
                if all(i['state'] == 'idle' for i in listing) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            by_name = {i['name']: i for i in listing}
            self.assertEqual(sorted(by_name), ['m', 's'])
            for name, info in by_name.items():
                self.assertEqual(info['state'], 'idle', info)
                messages = [e['message'] for e in info['errors']['recent']]
                damage = [m for m in messages if 'index files damaged' in m]
                if name == damaged and reported:
                    self.assertEqual(len(damage), 1, info)
                    self.assertEqual(info['errors']['recent'][0]['etag'], 0, info)
                else:
                    self.assertEqual(damage, [], info)
            c.close()
            server.stop()
            return server.stderr_tail()
        finally:
            server.cleanup()

    def verify(self, data, damaged=None):
        """Runs `corvid verify`; with `damaged`, expects exit 1 and a
        DAMAGED line holding it, else exit 0 and no DAMAGED line. Returns
        stdout."""
        proc = subprocess.run([binary_path(), 'verify', '--data', data], capture_output=True, text=True, timeout=120)
        out = proc.stdout + proc.stderr
        bad = [line for line in proc.stdout.splitlines() if line.startswith('DAMAGED')]
        if damaged is None:
            self.assertEqual((proc.returncode, bad), (0, []), out)
            self.assertIn('nothing is damaged', proc.stdout, out)
        else:
            self.assertEqual(proc.returncode, 1, out)
            self.assertTrue(any(damaged in line for line in bad), 'no DAMAGED line names %r:\n%s' % (damaged, out))
        return proc.stdout

    def test_verify_pristine_changes_nothing(self):
        def digest():
            out = {}
            for root, _, files in os.walk(self.pristine):
                for n in files:
                    if n != 'lock.mdb':
                        with open(os.path.join(root, n), 'rb') as f:
                            out[os.path.join(root, n)] = hashlib.sha256(f.read()).hexdigest()
            return out
        before = digest()
        out = self.verify(self.pristine)
        self.assertEqual(digest(), before)
        ok = [line for line in out.splitlines() if line.startswith('ok')]
        self.assertTrue(any('store: %d documents' % DOCS in line for line in ok), out)
        self.assertTrue(any('index m' in line for line in ok) and any('index s' in line for line in ok), out)
        proc = subprocess.run([binary_path(), 'verify', '--data', os.path.join(self.tmp, 'nowhere')],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)

    def test_verify_finds_a_damaged_document_body(self):
        # The server reads the store as it is (LMDB keeps no checksums);
        # verify decodes every body. Every copy of one document's text in
        # the file (LMDB keeps stale copies in free pages) loses its '{'.
        data = self.damaged_copy()
        path = os.path.join(data, 'store', 'data.mdb')
        with open(path, 'rb') as f:
            raw = bytearray(f.read())
        needle = b'{"id": "d1234", '
        at = raw.find(needle)
        self.assertGreaterEqual(at, 0)
        while at >= 0:
            raw[at] = ord('[')
            at = raw.find(needle, at + 1)
        with open(path, 'wb') as f:
            f.write(raw)
        self.verify(data, "document 'd1234' in c")

    def refuse_to_serve(self, data, needle):
        proc = subprocess.run([binary_path(), 'serve', '--data', data, '--listen', '127.0.0.1:0'],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertNotIn('corvid listening', proc.stdout)
        self.assertIn(needle, proc.stderr)

    # -- search index files ------------------------------------------------
    def test_segment_bytes_flipped(self):
        """In its body, and in the header's format version (bytes 8-11) and
        definition fingerprint (16-23): read as "another format" or
        "another definition", those once meant a quiet rebuild, and
        `corvid verify` said nothing was damaged."""
        for where in ('middle', 'version', 'fingerprint'):
            with self.subTest(where=where):
                data = self.damaged_copy()
                seg = self.segments(data)[0]
                offset, count = {'middle': (os.path.getsize(seg) // 2, 8), 'version': (8, 4),
                                 'fingerprint': (16, 8)}[where]
                flip(seg, offset, count)
                self.verify(data, os.path.basename(seg))
                self.serve_and_check(data, 's')
                self.verify(data)

    def test_segment_truncated(self):
        data = self.damaged_copy()
        seg = self.segments(data)[-1]
        truncate(seg)
        self.verify(data, os.path.basename(seg))
        self.serve_and_check(data, 's')
        self.verify(data)

    def test_segment_deleted(self):
        data = self.damaged_copy()
        seg = self.segments(data)[0]
        os.remove(seg)
        self.verify(data, os.path.basename(seg))
        self.serve_and_check(data, 's')

    def test_manifest_flipped_truncated_deleted(self):
        for damage in ('flip', 'flip version', 'truncate', 'delete'):
            with self.subTest(damage=damage):
                data = self.damaged_copy()
                manifest = os.path.join(self.state_dir(data, 's'), 'state', 'MANIFEST')
                if damage == 'flip':
                    flip(manifest, 20)
                elif damage == 'flip version':
                    flip(manifest, 8, 4)
                elif damage == 'truncate':
                    truncate(manifest)
                else:
                    os.remove(manifest)
                self.verify(data, 'MANIFEST')
                self.serve_and_check(data, 's')
                self.verify(data)

    # -- map/reduce state -------------------------------------------------
    def test_mapreduce_file_truncated(self):
        data = self.damaged_copy()
        truncate(os.path.join(self.state_dir(data, 'm'), 'state', 'data.mdb'))
        self.verify(data, 'data.mdb')
        self.serve_and_check(data, 'm')
        self.verify(data)

    def test_mapreduce_meta_pages_flipped(self):
        data = self.damaged_copy()
        path = os.path.join(self.state_dir(data, 'm'), 'state', 'data.mdb')
        for page in (0, 1):  # both LMDB meta pages: their magic
            flip(path, page * 4096 + 16, 4)
        self.verify(data, 'index m')
        self.serve_and_check(data, 'm')
        self.verify(data)

    def test_mapreduce_file_deleted(self):
        # Nothing to notice a damage with: the index starts afresh and
        # rebuilds, as a new one would (not reported).
        data = self.damaged_copy()
        os.remove(os.path.join(self.state_dir(data, 'm'), 'state', 'data.mdb'))
        self.serve_and_check(data, 'm', reported=False)

    # -- errors.log, definition.json ----------------------------------------
    def test_error_log_damaged(self):
        for damage in ('garbage', 'truncate', 'delete'):
            with self.subTest(damage=damage):
                data = self.damaged_copy()
                path = os.path.join(self.state_dir(data, 's'), 'errors.log')
                if damage == 'garbage':
                    with open(path, 'ab') as f:
                        f.write(b'{"etag": 7, "id": \xff\xfe garbage\n\x00\x01{}\n')
                elif damage == 'truncate':
                    with open(path, 'ab') as f:
                        f.write(b'{"etag": 9, "id": "x", "mess')
                elif os.path.exists(path):
                    os.remove(path)
                self.serve_and_check(data)

    def test_definition_damaged_leaves_the_index_out(self):
        for damage in ('flip', 'truncate', 'delete'):
            with self.subTest(damage=damage):
                data = self.damaged_copy()
                path = os.path.join(self.state_dir(data, 's'), 'definition.json')
                if damage == 'flip':
                    with open(path, 'r+b') as f:
                        f.write(b'{{{{')
                elif damage == 'truncate':
                    truncate(path)
                else:
                    os.remove(path)
                self.verify(data, 'definition.json')
                server = CorvidServer(['--listen', '127.0.0.1:0'], data_dir=data)
                try:
                    server.start()
                    c = server.client()
                    self.assertEqual(c.get('/indexes/s/search?q=fox').status, 404)
                    last = c.last_etag()
                    r = c.get('/indexes/m/results?limit=1000&minEtag=%d&waitMs=60000' % last)
                    self.assertEqual(r.json['rows'], self.oracle['rows'])
                    c.close()
                    server.stop()
                    self.assertIn('definition.json', server.stderr_tail())
                finally:
                    server.cleanup()

    def test_current_damaged_falls_back_and_verify_says_so(self):
        # `current` names the version that answers. Damaged so that it
        # names no version on disk ("v1" -> "v9", one bit), or nothing at
        # all, verify reports it, and the server answers from the version
        # that is there (it once left the index out: 404) and rewrites it.
        # Deleted beside v1 alone, it is a create that crashed before writing
        # it: no damage; beside any other version (a create always makes
        # v1), it is damage.
        for damage in ('v9', 'garbage', 'truncate', 'delete', 'delete-beside-v2'):
            with self.subTest(damage=damage):
                data = self.damaged_copy()
                top = os.path.join(data, 'indexes', 's')
                path = os.path.join(top, 'current')
                with open(path) as f:
                    version = f.read().strip()
                if damage == 'v9':
                    with open(path, 'w') as f:
                        f.write('v9\n')
                elif damage == 'garbage':
                    with open(path, 'wb') as f:
                        f.write(b'\xff\x00v')
                elif damage == 'truncate':
                    truncate(path)
                elif damage == 'delete':
                    os.remove(path)
                else:
                    os.remove(path)
                    os.rename(os.path.join(top, version), os.path.join(top, 'v2'))
                    version = 'v2'
                if damage == 'delete':
                    self.verify(data)
                else:
                    out = self.verify(data, os.path.join('indexes', 's', 'current'))
                    self.assertIn('falls back to ' + version, out)
                self.serve_and_check(data, 's', reported=False)
                with open(path) as f:
                    self.assertEqual(f.read().strip(), version)
                self.verify(data)

    # -- the store ----------------------------------------------------------
    def test_store_truncated_refuses_to_start(self):
        data = self.damaged_copy()
        truncate(os.path.join(data, 'store', 'data.mdb'))
        self.verify(data, 'data.mdb')
        self.refuse_to_serve(data, 'data.mdb')

    def test_store_meta_pages_flipped_refuses_to_start(self):
        data = self.damaged_copy()
        path = os.path.join(data, 'store', 'data.mdb')
        for page in (0, 1):
            flip(path, page * 4096 + 16, 4)
        self.verify(data, 'data.mdb')
        self.refuse_to_serve(data, 'data.mdb')

    def test_store_deleted_refuses_to_start(self):
        data = self.damaged_copy()
        os.remove(os.path.join(data, 'store', 'data.mdb'))
        self.verify(data, 'data.mdb')
        self.refuse_to_serve(data, 'data.mdb')


if __name__ == '__main__':
    main()
