"""The `corvid` command line (API.md, Command line; issue 30): import of
NDJSON, JSON arrays and CSV; a bad line stops the import with its line
number after everything before it was written, and re-running after the
fix rewrites the same documents (generated ids come from the file's hash
and the line); export equal to what was imported; status, index, search
and results; --help for every command; CORVID_URL / CORVID_API_KEY.
"""
import csv
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import urllib.parse

from corvid_harness import CorvidServer, binary_path, main

COMMANDS = ['serve', 'import', 'export', 'status', 'index', 'search', 'results', 'backup', 'restore', 'verify']


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix='corvid-cli-')
        cls.server = CorvidServer(['--listen', '127.0.0.1:0', '--max-doc-bytes', '4096'])
        cls.server.start()
        cls.url = 'http://127.0.0.1:%d' % cls.server.port

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.server.cleanup()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def corvid(self, *args, env=None, expect=0):
        e = dict(os.environ, CORVID_URL=self.url)
        e.pop('CORVID_API_KEY', None)
        e.update(env or {})
        proc = subprocess.run([binary_path()] + list(args), capture_output=True, text=True, timeout=120, env=e)
        if expect is not None:
            self.assertEqual(proc.returncode, expect, 'corvid %s\nstdout: %s\nstderr: %s'
                             % (' '.join(args), proc.stdout[-3000:], proc.stderr[-3000:]))
        return proc

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, 'w', encoding='utf-8', newline='') as f:
            f.write(text)
        return path

    def exported(self, coll):
        out = self.corvid('export', coll).stdout
        return {d['id']: d for d in (json.loads(line) for line in out.splitlines())}

    def count(self, coll):
        c = self.server.client()
        listing = {x['name']: x['count'] for x in c.get('/collections').json['collections']}
        c.close()
        return listing.get(coll, 0)

    # -- import / export -------------------------------------------------------
    def test_export_of_documents_too_large_for_one_page(self):
        """A page of 1,000 documents can exceed --max-response-bytes (the
        server answers 400 response_too_large): export asks again with
        fewer, and exports every document."""
        server = CorvidServer(['--listen', '127.0.0.1:0', '--max-response-bytes', '20000'])
        server.start()
        self.addCleanup(server.cleanup)
        self.addCleanup(server.stop)
        c = server.client()
        docs = {'d%02d' % i: {'id': 'd%02d' % i, 'text': ('%02d' % i) * 1500} for i in range(30)}
        body = ''.join(json.dumps(d) + '\n' for d in docs.values())
        self.assertEqual(c.post('/docs/big/_bulk', body, content_type='application/x-ndjson').status, 200)
        self.assertEqual(c.get('/docs/big?limit=1000').status, 400)  # one page would be too large
        c.close()
        proc = self.corvid('export', 'big', env={'CORVID_URL': 'http://127.0.0.1:%d' % server.port})
        got = {d['id']: d for d in (json.loads(line) for line in proc.stdout.splitlines())}
        self.assertEqual(got, docs)

    def test_import_ndjson_array_csv_and_export(self):
        docs = [{'id': 'n%d' % i, 'k': 'k%d' % (i % 3), 'v': i, 'x': 1.25, 'big': 12345678901234567890,
                 't': 'caf\u00e9 \u2603 "q" %d' % i} for i in range(3000)]
        nd = ''.join(json.dumps(d, ensure_ascii=False) + '\n' + ('\n' if i == 10 else '') for i, d in enumerate(docs))
        nd += '{"k": "no id", "v": 7}\n'
        path = self.write('a.ndjson', nd)
        out = self.corvid('import', path, '--collection', 'nd', '--batch-bytes', '20000').stdout
        self.assertIn('imported 3001 documents', out)
        got = self.exported('nd')
        self.assertEqual(len(got), 3001)
        for d in docs:
            self.assertEqual(got[d['id']], d)
        generated = [k for k in got if not k.startswith('n')]
        self.assertEqual(len(generated), 1)
        self.assertEqual(got[generated[0]]['k'], 'no id')
        # Exported, then imported elsewhere: the same documents.
        out_path = os.path.join(self.tmp, 'nd.out')
        self.corvid('export', 'nd', '-o', out_path)
        self.corvid('import', out_path, '-c', 'nd2')
        self.assertEqual(self.exported('nd2'), got)

        arr = [{'id': 'a%d' % i, 'nested': {'l': [1, 2, {'z': None}]}, 'b': True} for i in range(50)] + [{'v': 1}]
        path = self.write('b.json', json.dumps(arr, indent=2))
        self.corvid('import', path, '-c', 'arr')
        got = self.exported('arr')
        self.assertEqual(len(got), 51)
        self.assertEqual(got['a7'], arr[7])

        rows = [['id', 'name', 'score', 'note', 'zip'],
                ['c1', 'Ada', '7', 'hello, world', '02139'],
                ['c2', 'Bob', '-1.5e3', 'multi\nline "quoted"', ''],
                ['c3', 'Cy', '3.25', 'x', '1e5']]
        buf = io.StringIO()
        csv.writer(buf).writerows(rows)
        path = self.write('c.csv', buf.getvalue())
        self.corvid('import', path, '-c', 'csv')
        got = self.exported('csv')
        self.assertEqual(got['c1'], {'id': 'c1', 'name': 'Ada', 'score': 7, 'note': 'hello, world', 'zip': '02139'})
        self.assertEqual(got['c2'], {'id': 'c2', 'name': 'Bob', 'score': -1500.0, 'note': 'multi\nline "quoted"',
                                     'zip': ''})
        self.assertEqual(got['c3']['zip'], 100000.0)

        path = self.write('idf.ndjson', '{"sku": "s1", "n": 1}\n{"sku": "s2", "n": 2}\n')
        self.corvid('import', path, '-c', 'idf', '--id-field', 'sku')
        self.assertEqual(self.exported('idf'), {'s1': {'id': 's1', 'sku': 's1', 'n': 1},
                                                's2': {'id': 's2', 'sku': 's2', 'n': 2}})

    def test_export_writes_each_documents_id_as_its_id(self):
        """docs/cli.md: every exported line imports back to the same id, also
        for a document whose own "id" field is not its id (PUT /docs/C/ID
        keeps the body as sent)."""
        c = self.server.client()
        bodies = {'x': '{"id":"other","v":1}', 'y': '{"v":[1,2], "id" : 5 ,"w":true}',
                  'z': '{"id":{"a":[1,{"id":"in"}]},"w":2}', 'u': '{"v":"no id"}', 'v': '{"id":"v","ok":true}',
                  'q"\u00e9': '{"id":null}', 'm': '{\n  "v": [1,\r\n 2],\n  "id": "m"\n}'}
        for doc_id, body in bodies.items():
            resp = c.put('/docs/mism/%s' % urllib.parse.quote(doc_id, safe=''), body)
            self.assertEqual(resp.status, 201, resp.describe())
        c.close()
        proc = self.corvid('export', 'mism')
        self.assertIn('4 of them had an "id" field that was not their id', proc.stderr)
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        self.assertEqual({d['id']: d for d in lines}, {
            'x': {'id': 'x', 'v': 1}, 'y': {'v': [1, 2], 'id': 'y', 'w': True},
            'z': {'id': 'z', 'w': 2}, 'u': {'id': 'u', 'v': 'no id'}, 'v': {'id': 'v', 'ok': True},
            'q"\u00e9': {'id': 'q"\u00e9'}, 'm': {'v': [1, 2], 'id': 'm'}})
        self.assertEqual(len(proc.stdout.splitlines()), len(bodies), 'one line per document: %r' % proc.stdout)
        path = self.write('mism.ndjson', proc.stdout)
        self.corvid('import', path, '-c', 'mism2')
        self.assertEqual(self.exported('mism2'), {d['id']: d for d in lines})

    def test_csv_row_with_an_empty_id_gets_a_generated_id(self):
        # API.md: a document without an id gets a generated unique id; an
        # empty id cell is no id (it was sent as "id": "" and stopped the
        # import with 400 invalid_id). Id column first (sent unparsed),
        # later, and named by --id-field; and a CSV without an id column.
        generated = re.compile(r'^[0-9a-f]{16}-(\d+)$')
        cases = (('e1', [], [['id', 'name', 'n'], ['x1', 'Ada', '1'], ['', 'Bob', '2'], ['x3', 'Cy', '3'],
                             ['', 'Di', '4']]),
                 ('e2', [], [['name', 'id', 'n'], ['Ada', 'x1', '1'], ['Bob', '', '2'], ['Cy', 'x3', '3'],
                             ['Di', '', '4']]),
                 ('e3', ['--id-field', 'sku'], [['name', 'sku', 'n'], ['Ada', 'x1', '1'], ['Bob', '', '2'],
                                               ['Cy', 'x3', '3'], ['Di', '', '4']]),
                 ('e4', [], [['name', 'n'], ['Ada', '1'], ['Bob', '2'], ['Cy', '3'], ['Di', '4']]))
        for coll, flags, rows in cases:
            with self.subTest(coll=coll):
                buf = io.StringIO()
                csv.writer(buf).writerows(rows)
                path = self.write(coll + '.csv', buf.getvalue())
                out = self.corvid('import', path, '-c', coll, *flags).stdout
                self.assertIn('imported 4 documents', out)
                self.corvid('import', path, '-c', coll, *flags)  # again: the same ids, nothing added
                got = self.exported(coll)
                self.assertEqual(len(got), 4, got)
                by_name = {d['name']: d for d in got.values()}
                for name, line in (('Bob', 3), ('Di', 5)) + ((('Ada', 2), ('Cy', 4)) if coll == 'e4' else ()):
                    doc = by_name[name]
                    m = generated.match(doc['id'])
                    self.assertTrue(m, doc)
                    self.assertEqual(int(m.group(1)), line, doc)
                    self.assertEqual(set(doc), {'id', 'name', 'n'}, doc)   # no empty id or sku field
                if coll != 'e4':
                    self.assertEqual(by_name['Ada']['id'], 'x1')
                    self.assertEqual(by_name['Cy']['n'], 3)
                if coll == 'e3':
                    self.assertEqual(by_name['Cy'], {'id': 'x3', 'name': 'Cy', 'sku': 'x3', 'n': 3})

    def test_bad_line_stops_and_a_rerun_resumes(self):
        lines = [json.dumps({'k': i, 'pad': 'p' * 50}) for i in range(2000)]  # no ids: generated
        good = lines[:]
        lines[1499] = '{"k": 1499, "pad": '  # torn
        path = self.write('bad.ndjson', '\n'.join(lines) + '\n')
        proc = self.corvid('import', path, '-c', 'resume', '--batch-bytes', '10000', expect=1)
        self.assertIn('line 1500', proc.stderr)
        self.assertEqual(self.count('resume'), 1499)
        # The same file again (as after a failure that was not the file's):
        # its id-less records get the same ids, so nothing is duplicated.
        proc = self.corvid('import', path, '-c', 'resume', '--batch-bytes', '7000', expect=1)
        self.assertIn('line 1500', proc.stderr)
        self.assertEqual(self.count('resume'), 1499)
        path = self.write('good.ndjson', '\n'.join(good) + '\n')
        self.corvid('import', path, '-c', 'resume2', '--batch-bytes', '10000')
        self.corvid('import', path, '-c', 'resume2', '--batch-bytes', '7000')
        self.assertEqual(self.count('resume2'), 2000)

        # Lines that open with their id go out unparsed: the server finds
        # what is wrong with them, and the import names the same line.
        with_ids = ['{"id": "w%d", "k": %d}' % (i, i) for i in range(3000)]
        with_ids[2222] = '{"id": "w2222", "k": '
        path = self.write('ids.ndjson', '\n'.join(with_ids) + '\n')
        proc = self.corvid('import', path, '-c', 'withids', '--batch-bytes', '5000', expect=1)
        self.assertIn('line 2223', proc.stderr)
        self.assertEqual(self.count('withids'), 2222)

        for text, line in (('{"id": "a"}\n[1, 2]\n', 2), ('{"id": "a"}\n{"id": "b"}\n{"id": 5}\n', 3),
                           ('\n\n{"id": "a"} {"id": "b"}\n', 3),
                           ('{"id": ""}\n', 1), ('{"id": "a", "id": "b"}\n', 1)):
            path = self.write('bad2.ndjson', text)
            proc = self.corvid('import', path, '-c', 'bad2', expect=1)
            self.assertIn('line %d' % line, proc.stderr)

    def test_a_line_the_server_refuses_names_its_line(self):
        # --max-doc-bytes 4096: line 30 is too large for the server, which
        # refuses the whole bulk; the 29 before it are written anyway.
        lines = [json.dumps({'id': 'r%d' % i, 'pad': 'x' * (6000 if i == 29 else 10)}) for i in range(60)]
        path = self.write('big.ndjson', '\n'.join(lines) + '\n')
        proc = self.corvid('import', path, '-c', 'refused', expect=1)
        self.assertIn('line 30', proc.stderr)
        self.assertEqual(self.count('refused'), 29)

    # -- status, index, search, results -----------------------------------------
    def test_indexes_search_results_status(self):
        path = self.write('s.ndjson', ''.join(json.dumps({'id': 's%d' % i, 'k': 'k%d' % (i % 4), 'v': i,
                                                          't': 'red fox' if i % 2 else 'blue whale'}) + '\n'
                                              for i in range(400)))
        self.corvid('import', path, '-c', 'idx')
        sdef = self.write('s.json', json.dumps({'type': 'search', 'collection': 'idx', 'fields': {'t': {}},
                                                'store': ['t']}))
        mdef = self.write('m.json', json.dumps({'type': 'mapreduce', 'collection': 'idx', 'map': {'k': 'k', 'v': 'v'},
                                                'groupBy': ['k'], 'reduce': {'n': 'count()', 's': 'sum(v)'}}))
        self.assertIn('created', self.corvid('index', 'create', 'cs', '--file', sdef).stdout)
        self.corvid('index', 'create', 'cm', '-f', mdef)
        out = self.corvid('status').stdout  # live until every index is idle
        for name in ('cs', 'cm'):
            self.assertRegex(out, r'(?m)^%s\s+\w+\s+idle\s' % name)
        self.assertIn('100.0%', out)
        listing = self.corvid('index', 'list').stdout
        self.assertRegex(listing, r'(?m)^cs\s+search\s+idx\s+idle')
        res = json.loads(self.corvid('search', 'cs', 'fox', '--limit', '5', '--json').stdout)
        self.assertEqual(res['total'], 200)
        table = self.corvid('search', 'cs', 'whale', '--limit', '3').stdout
        self.assertIn('3 of 200 hits', table)
        self.assertIn('t=blue whale', table)
        rows = json.loads(self.corvid('results', 'cm', '--json').stdout)['rows']
        self.assertEqual([(r['k'], r['n']) for r in rows], [('k0', 100), ('k1', 100), ('k2', 100), ('k3', 100)])
        self.assertEqual(json.loads(self.corvid('results', 'cm', '--group-level', '0', '--json').stdout)['rows'],
                         [{'n': 400, 's': sum(range(400))}])
        self.assertRegex(self.corvid('results', 'cm').stdout, r'(?m)^k\s+n\s+s\n')
        self.corvid('index', 'pause', 'cs')
        self.assertRegex(self.corvid('status', '--once').stdout, r'(?m)^cs\s+search\s+paused')
        self.corvid('index', 'resume', 'cs')
        self.corvid('index', 'reset', 'cm')
        self.assertEqual(json.loads(self.corvid('index', 'show', 'cm').stdout)['definition']['type'], 'mapreduce')
        self.corvid('index', 'delete', 'cm')
        proc = self.corvid('index', 'show', 'cm', expect=1)
        self.assertIn('404', proc.stderr)

    # -- help, keys, usage --------------------------------------------------------
    def test_help_usage_and_keys(self):
        out = self.corvid('--help').stdout
        for cmd in COMMANDS:
            self.assertRegex(out, r'(?m)^\s+%s\s' % cmd)
            help_text = self.corvid(cmd, '--help').stdout
            if cmd != 'serve':  # API.md: the other commands, each with --url and --api-key
                self.assertIn('--url', help_text, cmd)
                self.assertIn('--api-key', help_text, cmd)
        for sub in ('list', 'show', 'create', 'pause', 'resume', 'reset', 'delete'):
            self.corvid('index', sub, '--help')
        self.corvid('import', expect=2)
        self.corvid('import', '/nonexistent/file', '-c', 'x', expect=2)
        self.corvid('frobnicate', expect=2)
        # A server that is not there: exit 1, saying so.
        proc = self.corvid('status', '--once', '--url', 'http://127.0.0.1:1', expect=1)
        self.assertIn('127.0.0.1:1', proc.stderr)

        keyed = CorvidServer(['--listen', '127.0.0.1:0', '--api-key', 'sekrit'])
        try:
            keyed.start()
            url = 'http://127.0.0.1:%d' % keyed.port
            proc = self.corvid('index', 'list', '--url', url, expect=1)
            self.assertIn('401', proc.stderr)
            self.corvid('index', 'list', '--url', url, '--api-key', 'sekrit')
            self.corvid('status', '--once', env={'CORVID_URL': url, 'CORVID_API_KEY': 'sekrit'})
            path = self.write('k.ndjson', '{"id": "k1"}\n')
            self.corvid('import', path, '-c', 'k', env={'CORVID_URL': url, 'CORVID_API_KEY': 'sekrit'})
            keyed.stop()
        finally:
            keyed.cleanup()


if __name__ == '__main__':
    main()
