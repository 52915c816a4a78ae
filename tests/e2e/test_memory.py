"""End-to-end tests of the memory budget (issue 26, API.md "Server").

--memory-budget is accepted, refused when malformed, reported in /metrics
with the memory parts; its default is half the memory cgroup's limit; and
both index kinds build under a cgroup v1 memory cap (the page cache counts
against it) without an OOM kill, with exact results. The cgroup tests need
a writable /sys/fs/cgroup/memory (root); elsewhere they are skipped, and
say so.
"""

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corvid_harness as h  # noqa: E402

CGROUP_ROOT = '/sys/fs/cgroup/memory'


def metric(text, name):
    m = re.search(r'^%s (\S+)$' % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def cgroup_usable():
    return os.path.isdir(CGROUP_ROOT) and os.access(CGROUP_ROOT, os.W_OK)


class CappedServer:
    """`corvid serve` started inside a fresh memory cgroup of `cap_mib`."""

    def __init__(self, cap_mib, extra_args=()):
        self.tmp = tempfile.mkdtemp(prefix='corvid-mem-')
        self.data = os.path.join(self.tmp, 'data')
        self.cgroup = os.path.join(CGROUP_ROOT, 'corvid-e2e-%d' % os.getpid())
        os.mkdir(self.cgroup)
        with open(os.path.join(self.cgroup, 'memory.limit_in_bytes'), 'w') as f:
            f.write(str(cap_mib << 20))
        cmd = 'echo $$ > %s/cgroup.procs && exec %s serve --data %s --listen 127.0.0.1:0 %s' % (
            self.cgroup, h.binary_path(), self.data, ' '.join(extra_args))
        self.proc = subprocess.Popen(['sh', '-c', cmd], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode().strip()
        m = h.LISTEN_LINE_RE.match(line)
        if not m:
            self.close()
            raise AssertionError('no listening line: %r' % line)
        self.client = h.CorvidClient(m.group(1), int(m.group(2)), timeout=120)

    def read(self, name):
        with open(os.path.join(self.cgroup, name)) as f:
            return f.read()

    def rss_anon(self):
        try:
            with open('/proc/%d/status' % self.proc.pid) as f:
                for line in f:
                    if line.startswith('RssAnon:'):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def oom_kills(self):
        m = re.search(r'^oom_kill (\d+)$', self.read('memory.oom_control'), re.M)
        return int(m.group(1)) if m else 0

    def close(self):
        if hasattr(self, 'client'):
            self.client.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc.stdout.close()
        for _ in range(50):
            try:
                os.rmdir(self.cgroup)
                break
            except OSError:
                time.sleep(0.1)
        shutil.rmtree(self.tmp, ignore_errors=True)


class BudgetFlagTest(unittest.TestCase):
    def test_budget_is_reported_with_the_memory_parts(self):
        server = h.CorvidServer(extra_args=['--memory-budget', '64M'])
        server.start()
        try:
            text = server.client().get('/metrics').body.decode()
            self.assertEqual(metric(text, 'corvid_memory_budget_bytes'), 64 << 20)
            self.assertGreater(metric(text, 'corvid_memory_bytes{part="anon"}'), 0)
            self.assertIsNotNone(metric(text, 'corvid_memory_bytes{part="indexes"}'))
            self.assertIsNotNone(metric(text, 'corvid_memory_bytes{part="index_batches"}'))
        finally:
            server.stop()

    def test_a_malformed_budget_is_refused(self):
        for bad in ('abc', '1K', '-5', '12Q', ''):
            proc = subprocess.run([h.binary_path(), 'serve', '--listen', '127.0.0.1:0', '--memory-budget', bad],
                                  capture_output=True, timeout=30)
            self.assertEqual(proc.returncode, 2, bad)
            self.assertIn(b'--memory-budget', proc.stderr, bad)


@unittest.skipUnless(cgroup_usable(), 'needs a writable cgroup v1 memory controller at %s' % CGROUP_ROOT)
@unittest.skipIf(os.environ.get('CORVID_SKIP_RSS') == '1',
                 'a sanitizer build: its shadow memory does not fit a memory cap')
class UnderACapTest(unittest.TestCase):
    def test_the_default_budget_is_half_the_cgroup_limit(self):
        server = CappedServer(256)
        try:
            text = server.client.get('/metrics').body.decode()
            self.assertEqual(metric(text, 'corvid_memory_budget_bytes'), 128 << 20)
        finally:
            server.close()

    def test_both_index_kinds_build_under_a_cap_smaller_than_the_data(self):
        # 90,000 documents of ~1.5 KB of words from a 20,000-word vocabulary
        # (about 140 MB of JSON) under a 96 MiB cap: the store and the
        # indexes do not fit in it together, and the search index merges.
        docs, cap_mib = 90000, 96
        server = CappedServer(cap_mib)
        try:
            c = server.client
            rng = random.Random(26)
            total_score = 0
            for start in range(0, docs, 3000):
                lines = []
                for n in range(start, start + 3000):
                    score = n % 97
                    total_score += score
                    body = ' '.join('w%d' % int(20000 ** rng.random()) for _ in range(220))
                    lines.append(json.dumps({'id': 'd%d' % n, 'month': '2024-%02d' % (n % 12 + 1),
                                             'score': score, 'body': body, 'tag': 'common'}))
                r = c.post(h.bulk_path('docs'), ('\n'.join(lines) + '\n').encode(),
                           content_type='application/x-ndjson')
                self.assertEqual(r.status, 200, r.describe())
            time.sleep(2.5)  # the server trims its allocator once it is quiet for 2 s (http_server.cc)
            print('after the load: RssAnon %.1f MiB' % (server.rss_anon() / 1048576.0), file=sys.stderr)
            r = c.put('/indexes/by_month', json.dumps({
                'type': 'mapreduce', 'collection': 'docs', 'map': {'month': 'month', 'score': 'score'},
                'groupBy': ['month'], 'reduce': {'n': 'count()', 'total': 'sum(score)'}}))
            self.assertIn(r.status, (200, 201), r.describe())
            r = c.put('/indexes/text', json.dumps({
                'type': 'search', 'collection': 'docs',
                'fields': {'body': {'analyzer': 'english'}, 'tag': {'analyzer': 'keyword'}}}))
            self.assertIn(r.status, (200, 201), r.describe())
            last = c.last_etag()
            built_from = time.time()
            deadline = built_from + 600
            peak_anon = 0
            while True:
                peak_anon = max(peak_anon, server.rss_anon())
                self.assertIsNone(server.proc.poll(), 'the server died (OOM kills: %d)' % server.oom_kills())
                progress = json.loads(c.get('/admin/indexes').body)
                if all(i['lastIndexedEtag'] >= last for i in progress['indexes']):
                    break
                self.assertLess(time.time(), deadline, 'indexes not built within 600 s: %s' % progress)
                time.sleep(0.05)
            self.assertEqual(server.oom_kills(), 0)
            peak = int(server.read('memory.max_usage_in_bytes'))
            print('built %d documents in %.1f s under %d MiB (cgroup peak %.0f MiB, RssAnon peak %.1f MiB)' % (
                docs, time.time() - built_from, cap_mib, peak / 1048576.0, peak_anon / 1048576.0), file=sys.stderr)
            rows = json.loads(c.get('/indexes/by_month/results?limit=100').body)['rows']
            self.assertEqual(sum(row['n'] for row in rows), docs)
            self.assertEqual(sum(row['total'] for row in rows), total_score)
            hits = json.loads(c.get('/indexes/text/search?q=tag:common&limit=1').body)
            self.assertEqual(hits['total'], docs)
            # The process's own memory stays within its budget (half the
            # cap by default), sampled every 50 ms through the build.
            self.assertLess(peak_anon, (cap_mib << 20) // 2, 'RssAnon peaked at %.1f MiB' % (peak_anon / 1048576.0))
        finally:
            server.close()


if __name__ == '__main__':
    h.main()
