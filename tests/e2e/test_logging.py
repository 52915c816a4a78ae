"""Structured logs (issue 30; docs/logging.md): `corvid serve --log-format
text|json --log-level LEVEL --slow-ms N [--access-log]`.

With --log-format json every line the server writes on stderr is one JSON
object with ts, level, event and msg, from start-up to shutdown; the
events a user relies on appear with their fields: server.start (version,
data, listen), server.listening, index.created / paused / resumed / reset /
replacing / replaced / deleted, index.caught_up, index.document_error
(rate-limited: at most 10 per index per 10 s, the rest counted in
`suppressed`), http.slow_request over --slow-ms, server.draining,
server.stopped. No per-request line unless --access-log. --log-level warn
drops info lines; text lines start with an ISO timestamp and the level.
"""
import json
import os
import re
import subprocess
import unittest

from corvid_harness import CorvidServer, binary_path, bulk_path, main


def log_lines(server):
    """The server's stderr lines, without the harness's own markers."""
    with open(server.stderr_path, 'rb') as f:
        raw = f.read().decode('utf-8')
    return [line for line in raw.split('\n') if line and not line.startswith('==== start')]


def bulk(c, coll, docs):
    body = ''.join(json.dumps(d) + '\n' for d in docs)
    r = c.post(bulk_path(coll), body, content_type='application/x-ndjson')
    assert r.status == 200, r.describe()


class LoggingTest(unittest.TestCase):
    def run_server(self, args, work):
        server = CorvidServer(['--listen', '127.0.0.1:0'] + args)
        try:
            server.start()
            c = server.client()
            work(c)
            c.close()
            server.stop()
            return log_lines(server)
        finally:
            server.cleanup()

    def test_json_lines_and_events(self):
        def work(c):
            bulk(c, 'c', [{'id': 'd%d' % i, 'k': 'k%d' % (i % 7), 'n': i, 't': 'red fox %d' % i}
                          for i in range(5000)])
            # 40 documents the map/reduce index cannot sum: index errors.
            bulk(c, 'c', [{'id': 'bad%d' % i, 'k': 'kb', 'n': 'not a number'} for i in range(40)])
            self.assertEqual(c.put('/indexes/m', json.dumps({
                'type': 'mapreduce', 'collection': 'c', 'map': {'k': 'k', 'v': 'n'}, 'groupBy': ['k'],
                'reduce': {'s': 'sum(v)'}})).status, 201)
            self.assertEqual(c.put('/indexes/s', json.dumps({
                'type': 'search', 'collection': 'c', 'fields': {'t': {}}})).status, 201)
            last = c.last_etag()
            for name in ('m', 's'):
                r = c.get('/indexes/%s/%s?minEtag=%d&waitMs=60000' % (
                    name, 'results' if name == 'm' else 'search?q=fox', last))
                self.assertEqual(r.status, 200, r.describe())
            for action in ('pause', 'resume', 'reset'):
                self.assertEqual(c.post('/admin/indexes/s/%s' % action, '').status, 200)
            self.assertEqual(c.put('/indexes/s', json.dumps({
                'type': 'search', 'collection': 'c', 'fields': {'t': {'analyzer': 'english'}}})).status, 200)
            r = c.get('/indexes/s/search?q=fox&minEtag=%d&waitMs=60000' % last)
            self.assertEqual(r.status, 200, r.describe())
            self.assertEqual(c.delete('/indexes/m').status, 200)

        lines = self.run_server(['--log-format', 'json', '--log-level', 'debug', '--slow-ms', '1'], work)
        events = []
        for line in lines:
            try:
                obj = json.loads(line)
            except ValueError:
                self.fail('a stderr line is not JSON: %r' % line)
            self.assertIsInstance(obj, dict, line)
            for key in ('ts', 'level', 'event', 'msg'):
                self.assertIn(key, obj, line)
            self.assertRegex(obj['ts'], r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$')
            self.assertIn(obj['level'], ('debug', 'info', 'warn', 'error'), line)
            events.append(obj)
        names = [e['event'] for e in events]
        by = lambda name: [e for e in events if e['event'] == name]
        self.assertEqual(names[0], 'server.start', names)
        start = events[0]
        self.assertTrue(start['version'] and start['data'] and start['listen'], start)
        self.assertEqual(names[-1], 'server.stopped', names)  # workers may log while the server drains
        self.assertEqual(names.count('server.draining'), 1, names)
        for needed in ('server.listening', 'index.created', 'index.caught_up', 'index.paused', 'index.resumed',
                       'index.reset', 'index.replacing', 'index.deleted', 'http.slow_request',
                       'index.document_error'):
            self.assertIn(needed, names)
        self.assertEqual(sorted(e['index'] for e in by('index.created')), ['m', 's'])
        caught = [e for e in by('index.caught_up') if e['index'] == 'm']
        self.assertTrue(caught and caught[0]['docs'] == 5040, caught)
        errors = by('index.document_error')
        self.assertTrue(all(e['index'] == 'm' and e['id'].startswith('bad') for e in errors), errors)
        # rate-limited: 40 errors in one batch, at most 10 lines per 10 s
        self.assertLessEqual(len(errors), 10, errors)
        slow = by('http.slow_request')
        self.assertTrue(any(e['route'] and e['status'] == 200 and e['ms'] >= 1 for e in slow), slow)
        self.assertNotIn('http.request', names)  # no access log unless asked

    def test_access_log_text_format_and_level(self):
        def work(c):
            self.assertEqual(c.put('/docs/c/a', '{"x": 1}').status, 201)
            self.assertEqual(c.get('/docs/c/a').status, 200)
            self.assertEqual(c.get('/docs/c/missing').status, 404)

        lines = self.run_server(['--access-log'], work)
        stamp = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARN|ERROR) [a-z_.]+: ')
        for line in lines:
            self.assertRegex(line, stamp)
        requests = [line for line in lines if ' http.request: ' in line]
        self.assertEqual(len(requests), 3, lines)
        self.assertIn('status=404', requests[2])
        self.assertIn('path=/docs/c/missing', requests[2])

        lines = self.run_server(['--log-level', 'warn', '--log-format', 'json'], work)
        self.assertEqual([json.loads(line)['event'] for line in lines], [], lines)

    def test_tombstone_retention_takes_decimals(self):
        # API.md, Server: 0, seconds, or a number with s, m, h or d; 1.5h
        # was refused (integers only). server.start logs the seconds.
        for value, seconds in (('1.5h', 5400), ('0.5d', 43200), ('2.5', 3), ('0.1h', 360), ('90m', 5400),
                               ('0', 0), ('0.0s', 0), ('0.25', 1), ('7d', 604800), ('1.000h', 3600)):
            with self.subTest(value=value):
                lines = self.run_server(['--log-format', 'json', '--tombstone-retention', value], lambda c: None)
                start = json.loads(lines[0])
                self.assertEqual(start['event'], 'server.start', lines[0])
                self.assertEqual(start['tombstone_retention_s'], seconds, lines[0])
        for value in ('-1', '-1.5h', '1.5.h', '1.', '.5', 'h', '1e3', ' 1h', '1,5h', '1.5x', '1.-5h', '0x10',
                      '1.' + '1' * 19, '99999999999999d'):
            with self.subTest(value=value):
                proc = subprocess.run([binary_path(), 'serve', '--listen', '127.0.0.1:0', '--tombstone-retention',
                                       value], capture_output=True, text=True, timeout=30)
                self.assertEqual(proc.returncode, 2, (value, proc.stderr))
                self.assertIn('--tombstone-retention must be', proc.stderr)

    def test_bad_flag_values(self):
        for args in (['--log-format', 'xml'], ['--log-level', 'loud'], ['--slow-ms', '-1'], ['--log-format']):
            proc = subprocess.run([binary_path(), 'serve', '--listen', '127.0.0.1:0'] + args,
                                  capture_output=True, text=True, timeout=30)
            self.assertEqual(proc.returncode, 2, (args, proc.stderr))


if __name__ == '__main__':
    main()
