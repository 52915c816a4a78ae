"""Crash and shutdown tests: acknowledged writes survive `kill -9` and SIGTERM.

Each repetition: 16 writer threads PUT unique documents and overwrite their
own documents with increasing versions, 2 threads send 50-line bulks; after a
random 0.5-2 s the server is killed with SIGKILL mid-flight and restarted on
the same data directory. Then every acknowledged write must be there with
its content and etag, every bulk all-or-nothing, etags distinct, and
/changes must list exactly the present documents. Repetitions:
$CORVID_CRASH_REPS (default 5). Seed: $CORVID_CRASH_SEED (default random,
printed). Run: python3 test_crash.py --binary build/corvid
"""

import json
import os
import random
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corvid_harness import CorvidServer, bulk_path, doc_path, fetch_docs, main  # noqa: E402

REPS = int(os.environ.get('CORVID_CRASH_REPS', '5'))
SEED = int(os.environ.get('CORVID_CRASH_SEED', str(random.randrange(1 << 30))))
WRITERS = 16
BULK_WRITERS = 2
BULK_LINES = 50
OWNED_IDS = 4          # ids each writer overwrites with increasing versions
COLL = 'crash'


def body_for(doc_id, version, writer, rng):
    size = rng.choice((16, 64, 300, 1500, 6000)) if rng.random() > 0.03 else 40000
    filler = ''.join(rng.choice('abcdefghij') for _ in range(8)) * (size // 8)
    return json.dumps({'id': doc_id, 'v': version, 'w': writer, 'big': 18446744073709551615 - version,
                       'f': filler}, separators=(',', ':')).encode()


class Ledger:
    """What the clients attempted and what the server acknowledged."""

    def __init__(self):
        self.lock = threading.Lock()
        self.unique = {}        # id -> {'body', 'etag' (acked) or None, 'refused'}
        self.owned = {}         # id -> {'attempts': {version: body}, 'acked': version, 'etag'}
        self.bulks = {}         # bulk no -> {'ids', 'lines', 'ack' (response json) or None}
        self.errors = []        # unexpected outcomes before the kill / signal
        self.acked = 0
        self.refused = 0

    def error(self, text):
        with self.lock:
            self.errors.append(text)


class Workload:
    """Writer threads hammering one server until told to stop."""

    def __init__(self, server, ledger, seed, crash_event, writers=WRITERS,
                 bulk_writers=BULK_WRITERS):
        self.server = server
        self.ledger = ledger
        self.seed = seed
        self.crash_event = crash_event   # set just before the signal is sent
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.writer, args=(w,), daemon=True)
                        for w in range(writers)]
        self.threads += [threading.Thread(target=self.bulk_writer, args=(b,), daemon=True)
                         for b in range(bulk_writers)]

    def start(self):
        for t in self.threads:
            t.start()

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)
            if t.is_alive():
                self.ledger.error('a writer thread hung')

    def outcome(self, resp, what):
        """Classifies a response: 'ack', 'refused' (503 during shutdown) or 'stop'."""
        if resp.status in (200, 201):
            return 'ack'
        if (resp.status == 503 and self.crash_event.is_set() and isinstance(resp.json, dict)
                and resp.json.get('error', {}).get('code') == 'shutting_down'):
            return 'refused'
        self.ledger.error('%s: unexpected answer %s' % (what, resp.describe()))
        return 'stop'

    def writer(self, w):
        rng = random.Random(self.seed * 1000 + w)
        client = self.server.client(retry=False, timeout=30)
        ledger = self.ledger
        versions = {}
        n = 0
        while not self.stop.is_set():
            if rng.random() < 0.3:
                doc_id = 'own-%d-%d' % (w, rng.randrange(OWNED_IDS))
                version = versions.get(doc_id, 0) + 1
                versions[doc_id] = version
                body = body_for(doc_id, version, w, rng)
                with ledger.lock:
                    entry = ledger.owned.setdefault(doc_id, {'attempts': {}, 'acked': 0,
                                                             'etag': None, 'refused': set()})
                    entry['attempts'][version] = body
            else:
                doc_id = 'u-%d-%d' % (w, n)
                n += 1
                version = None
                body = body_for(doc_id, 0, w, rng)
                with ledger.lock:
                    ledger.unique[doc_id] = {'body': body, 'etag': None, 'refused': False}
            try:
                resp = client.put(doc_path(COLL, doc_id), body)
            except Exception as e:  # connection died
                if not self.crash_event.is_set():
                    ledger.error('PUT %s failed before the crash: %r' % (doc_id, e))
                break
            kind = self.outcome(resp, 'PUT ' + doc_id)
            if kind == 'stop':
                break
            if kind == 'refused':
                with ledger.lock:
                    ledger.refused += 1
                    if version is None:
                        ledger.unique[doc_id]['refused'] = True
                    else:
                        ledger.owned[doc_id]['refused'].add(version)
                continue
            etag = resp.json.get('etag') if isinstance(resp.json, dict) else None
            if resp.json != {'collection': COLL, 'id': doc_id, 'etag': etag} or \
                    not isinstance(etag, int):
                ledger.error('PUT %s: bad answer %s' % (doc_id, resp.describe()))
                break
            with ledger.lock:
                ledger.acked += 1
                if version is None:
                    ledger.unique[doc_id]['etag'] = etag
                else:
                    entry = ledger.owned[doc_id]
                    entry['acked'] = version
                    entry['etag'] = etag
        client.close()

    def bulk_writer(self, b):
        rng = random.Random(self.seed * 1000 + 500 + b)
        client = self.server.client(retry=False, timeout=60)
        ledger = self.ledger
        k = 0
        while not self.stop.is_set():
            no = '%d-%d' % (b, k)
            k += 1
            ids = ['bulk-%s-%d' % (no, i) for i in range(BULK_LINES)]
            lines = [json.dumps({'id': doc_id, 'bulk': no, 'i': i,
                                 'f': 'x' * rng.choice((10, 200, 1000))},
                                separators=(',', ':')).encode() for i, doc_id in enumerate(ids)]
            with ledger.lock:
                ledger.bulks[no] = {'ids': ids, 'lines': lines, 'ack': None, 'refused': False}
            try:
                resp = client.post(bulk_path(COLL), b'\n'.join(lines) + b'\n',
                                   content_type='application/x-ndjson')
            except Exception as e:
                if not self.crash_event.is_set():
                    ledger.error('bulk %s failed before the crash: %r' % (no, e))
                break
            kind = self.outcome(resp, 'bulk ' + no)
            if kind == 'stop':
                break
            if kind == 'refused':
                with ledger.lock:
                    ledger.refused += 1
                    ledger.bulks[no]['refused'] = True
                continue
            j = resp.json if isinstance(resp.json, dict) else {}
            if j.get('count') != BULK_LINES or \
                    j.get('lastEtag', 0) - j.get('firstEtag', 0) + 1 != BULK_LINES:
                ledger.error('bulk %s: bad answer %s' % (no, resp.describe()))
                break
            with ledger.lock:
                ledger.bulks[no]['ack'] = j
                ledger.acked += BULK_LINES
            time.sleep(rng.uniform(0.01, 0.08))
        client.close()


class CrashTest(unittest.TestCase):
    maxDiff = 2000

    def verify(self, server, ledger, context):
        """Checks the restarted server against the ledger; returns the max etag."""
        fail = []

        def check(cond, text):
            if not cond:
                fail.append(text)

        client = server.client(timeout=30)
        changes, last_etag = client.all_changes(0)
        present_feed = {}
        prev = 0
        for entry in changes:
            check(entry['etag'] > prev, 'changes not in strictly increasing etag order at %r'
                  % entry)
            prev = entry['etag']
            check(entry['collection'] == COLL, 'unexpected collection in feed: %r' % entry)
            check(not entry['deleted'], 'a tombstone nobody wrote: %r' % entry)
            check(entry['id'] not in present_feed, 'document listed twice in /changes: %r'
                  % entry)
            present_feed[entry['id']] = entry['etag']

        attempted = set(ledger.unique) | set(ledger.owned)
        for bulk in ledger.bulks.values():
            attempted.update(bulk['ids'])
        for doc_id in present_feed:
            check(doc_id in attempted, 'a document nobody wrote: %r' % doc_id)
        got = fetch_docs(server, COLL, attempted)

        present = {i: g for i, g in got.items() if g[0] == 200}
        for doc_id, (status, body, _) in got.items():
            check(status in (200, 404), 'GET %s -> %s %r' % (doc_id, status, body[:200]))

        # Unique documents.
        lost = []
        for doc_id, entry in ledger.unique.items():
            status, body, etag = got[doc_id]
            if entry['etag'] is not None:
                if status != 200:
                    lost.append(doc_id)
                    continue
                check(body == entry['body'], 'acknowledged %s has other content' % doc_id)
                check(etag == entry['etag'], 'acknowledged %s: etag %s, acknowledged as %s'
                      % (doc_id, etag, entry['etag']))
            elif entry['refused']:
                check(status == 404, '%s was refused with 503 but is stored' % doc_id)
            elif status == 200:
                check(body == entry['body'], 'unacknowledged %s stored with other content'
                      % doc_id)
        check(not lost, '%d acknowledged PUTs lost, e.g. %s' % (len(lost), sorted(lost)[:5]))

        # Overwritten documents.
        for doc_id, entry in ledger.owned.items():
            status, body, etag = got[doc_id]
            if entry['acked'] and status != 200:
                fail.append('acknowledged version %d of %s lost (GET %s)'
                            % (entry['acked'], doc_id, status))
                continue
            if status != 200:
                continue
            versions = [v for v, b in entry['attempts'].items() if b == body]
            if not versions:
                fail.append('%s stored with content no writer sent: %r' % (doc_id, body[:120]))
                continue
            version = versions[0]
            check(version >= entry['acked'], '%s: stored version %d older than acknowledged %d'
                  % (doc_id, version, entry['acked']))
            check(version not in entry['refused'], '%s: version %d refused with 503 but stored'
                  % (doc_id, version))
            if version == entry['acked']:
                check(etag == entry['etag'], '%s: etag %s, acknowledged as %s'
                      % (doc_id, etag, entry['etag']))

        # Bulks: all or nothing; acknowledged ones all there with their etags.
        for no, bulk in ledger.bulks.items():
            states = [got[i][0] for i in bulk['ids']]
            if bulk['ack'] is not None or 200 in states:
                if bulk['ack'] is not None:
                    check(all(s == 200 for s in states), 'acknowledged bulk %s: %d of %d lines '
                          'present' % (no, states.count(200), len(states)))
                else:
                    check(all(s == 200 for s in states), 'bulk %s half-written: %d of %d lines '
                          'present' % (no, states.count(200), len(states)))
                    check(not bulk['refused'], 'bulk %s refused with 503 but stored' % no)
                if not all(s == 200 for s in states):
                    continue
                etags = [got[i][2] for i in bulk['ids']]
                for i, doc_id in enumerate(bulk['ids']):
                    check(got[doc_id][1] == bulk['lines'][i], 'bulk %s line %d has other content'
                          % (no, i + 1))
                check(etags == list(range(etags[0], etags[0] + len(etags))),
                      'bulk %s etags not consecutive in line order: %s...' % (no, etags[:5]))
                if bulk['ack'] is not None:
                    check(etags[0] == bulk['ack']['firstEtag'] and
                          etags[-1] == bulk['ack']['lastEtag'],
                          'bulk %s etags %d..%d, acknowledged as %r'
                          % (no, etags[0], etags[-1], bulk['ack']))

        # Etags distinct; /changes lists exactly the present documents, at their etags.
        etags = [g[2] for g in present.values()]
        check(len(etags) == len(set(etags)), 'present documents share etags')
        check(set(present_feed) == set(present),
              '/changes and GET disagree: %d only in /changes (e.g. %s), %d only via GET (e.g. %s)'
              % (len(set(present_feed) - set(present)), sorted(set(present_feed) - set(present))[:3],
                 len(set(present) - set(present_feed)), sorted(set(present) - set(present_feed))[:3]))
        for doc_id, g in present.items():
            if doc_id in present_feed:
                check(present_feed[doc_id] == g[2], '%s: /changes etag %s, GET ETag %s'
                      % (doc_id, present_feed[doc_id], g[2]))
        max_etag = max(etags, default=0)
        check(last_etag == max_etag, '/changes lastEtag %s, newest document etag %s'
              % (last_etag, max_etag))
        resp = client.get('/collections')
        counts = {e['name']: e['count'] for e in resp.json['collections']}
        check(counts.get(COLL, 0) == len(present), '/collections count %s, %d documents present'
              % (counts.get(COLL), len(present)))
        check(resp.json['lastEtag'] == last_etag, '/collections lastEtag %s, /changes %s'
              % (resp.json['lastEtag'], last_etag))

        # The etag counter survived: a new write gets a newer etag than any acknowledged.
        acked_etags = [e['etag'] for e in ledger.unique.values() if e['etag']]
        acked_etags += [e['etag'] for e in ledger.owned.values() if e['etag']]
        acked_etags += [b['ack']['lastEtag'] for b in ledger.bulks.values() if b['ack']]
        resp = client.put(doc_path('after', 'restart'), b'{"after":true}')
        check(resp.status == 201, 'PUT after restart: ' + resp.describe())
        if resp.status == 201:
            check(resp.json['etag'] > max(acked_etags + [max_etag]),
                  'etag after restart %s not above the acknowledged %s'
                  % (resp.json['etag'], max(acked_etags + [max_etag])))
        client.close()
        if fail:
            self.fail('%s: %d problems:\n  %s\nstderr tail:\n%s'
                      % (context, len(fail), '\n  '.join(fail[:25]), server.stderr_tail()))
        return len(present)

    def run_workload(self, server, ledger, seed, action, delay):
        crash = threading.Event()
        load = Workload(server, ledger, seed, crash)
        load.start()
        time.sleep(delay)
        crash.set()
        rc = action()
        load.join()
        return rc

    def test_kill_9_mid_flight(self):
        print('\ncrash test: %d repetitions, CORVID_CRASH_SEED=%d' % (REPS, SEED),
              file=sys.stderr)
        rng = random.Random(SEED)
        for rep in range(REPS):
            seed = rng.randrange(1 << 30)
            delay = rng.uniform(0.5, 2.0)
            server = CorvidServer()
            try:
                server.start()
                ledger = Ledger()
                self.run_workload(server, ledger, seed, server.kill, delay)
                self.assertEqual(ledger.errors, [], 'rep %d: %s' % (rep, server.stderr_tail()))
                self.assertGreater(ledger.acked, 0, 'rep %d: nothing acknowledged in %.2f s'
                                   % (rep, delay))
                server.start()
                present = self.verify(server, ledger, 'rep %d (seed %d, kill after %.2f s)'
                                      % (rep, seed, delay))
                server.stop()
                print('  rep %d: kill after %.2f s, %d writes acknowledged, %d documents present'
                      % (rep, delay, ledger.acked, present), file=sys.stderr)
            finally:
                server.cleanup()

    def test_kill_9_twice_and_idle_restart(self):
        server = CorvidServer()
        try:
            server.start()
            client = server.client()
            resp = client.put(doc_path(COLL, 'one'), b'{"one":1}')
            self.assertEqual(resp.status, 201, resp.describe())
            etag = resp.json['etag']
            client.close()
            server.restart()       # kill -9, start
            server.restart()       # kill -9 an idle, just-recovered server, start
            client = server.client()
            resp = client.get(doc_path(COLL, 'one'))
            self.assertEqual(resp.status, 200, resp.describe())
            self.assertEqual(resp.body, b'{"one":1}')
            self.assertEqual(resp.header('ETag'), '"%d"' % etag)
            resp = client.put(doc_path(COLL, 'two'), b'{}')
            self.assertEqual(resp.status, 201, resp.describe())
            self.assertGreater(resp.json['etag'], etag)
            client.close()
            server.stop()
        finally:
            server.cleanup()

    def test_sigterm_while_writing(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(signal=sig.name):
                server = CorvidServer()
                try:
                    server.start()
                    ledger = Ledger()
                    result = {}

                    def terminate():
                        t0 = time.monotonic()
                        server.send_signal(sig)
                        result['rc'] = server.wait(30)
                        result['took'] = time.monotonic() - t0

                    self.run_workload(server, ledger, SEED + sig, terminate, 1.0)
                    if result['rc'] is None:
                        server.kill()
                    self.assertEqual(result['rc'], 0, '%s: exit code %s (None = still running '
                                     'after 30 s); stderr:\n%s'
                                     % (sig.name, result['rc'], server.stderr_tail()))
                    self.assertLess(result['took'], 10.0, 'shutdown took %.1f s' % result['took'])
                    self.assertEqual(ledger.errors, [], server.stderr_tail())
                    self.assertGreater(ledger.acked, 0)
                    server.start()
                    present = self.verify(server, ledger, 'after %s' % sig.name)
                    server.stop()
                    print('\n  %s: exit 0 after %.2f s, %d writes acknowledged, %d refused with '
                          '503, %d documents present' % (sig.name, result['took'], ledger.acked,
                                                         ledger.refused, present), file=sys.stderr)
                finally:
                    server.cleanup()

    def test_sigterm_with_long_poll_in_flight(self):
        server = CorvidServer()
        try:
            server.start()
            client = server.client()
            self.assertEqual(client.put(doc_path(COLL, 'x'), b'{}').status, 201)
            last = client.last_etag()
            client.close()
            result = {}

            def poll():
                c = server.client(timeout=60, retry=False)
                try:
                    result['resp'] = c.get('/changes?since=%d&waitMs=30000' % last)
                except Exception as e:
                    result['error'] = repr(e)
                c.close()

            thread = threading.Thread(target=poll)
            thread.start()
            time.sleep(0.5)
            t0 = time.monotonic()
            server.send_signal(signal.SIGTERM)
            rc = server.wait(30)
            took = time.monotonic() - t0
            thread.join(40)
            self.assertEqual(rc, 0, 'exit code %s after SIGTERM with a long poll in flight '
                             '(None = still running after 30 s)' % rc)
            self.assertLess(took, 10.0, 'SIGTERM with a waitMs=30000 long poll in flight took '
                            '%.1f s to exit' % took)
            self.assertIn('resp', result, 'long poll got no answer: %s' % result.get('error'))
            resp = result['resp']
            self.assertIn(resp.status, (200, 503), resp.describe())
            if resp.status == 200:
                self.assertEqual(resp.json, {'results': [], 'lastEtag': last})
            else:
                self.assertEqual(resp.json['error']['code'], 'shutting_down')
        finally:
            server.cleanup()


if __name__ == '__main__':
    main()
