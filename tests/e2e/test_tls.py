"""HTTPS (API.md, Server: `--tls-cert FILE --tls-key FILE`; docs/http-choices.md).

A self-signed P-256 certificate for 127.0.0.1 is made by the test with the
openssl command (scripts/setup.sh installs it). Checked, with the client
verifying the certificate:
- documents, a bulk, a search index and its query, HEAD, and a streamed
  (chunked) backup that `corvid restore` accepts, all over one keep-alive
  TLS connection;
- plain HTTP on the HTTPS port gets a plain 400 `https_required` and is
  closed; garbage after a TLS record header, a client hello cut short and
  connections that never handshake are closed (within --header-timeout-ms)
  and counted in corvid_requests_rejected_total{reason="tls_handshake"},
  and the server goes on serving;
- --read-key over HTTPS: reads 200, writes 403;
- the `corvid` command line over https://: `status`, `import`, `export`
  and `backup` trusting the certificate with --cacert (or $CORVID_CACERT),
  refused with a verification error without it (exit 1), accepted with
  --insecure;
- a certificate that cannot be loaded, a key that does not match it, or
  only one of the two flags: `corvid serve` exits non-zero naming the file;
- SIGTERM with idle TLS connections open exits 0 (tearDownClass).
"""
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

from corvid_harness import (CorvidServer, CorvidTestCase, binary_path, bulk_path, doc_path,
                            main, read_responses, wait_for_close)


def make_certificate(directory, name='server'):
    cert = os.path.join(directory, name + '-cert.pem')
    key = os.path.join(directory, name + '-key.pem')
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
                    '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=localhost',
                    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'],
                   check=True, capture_output=True)
    return cert, key


class TlsCase(CorvidTestCase):
    """A server with a fresh certificate; self.tls verifies it."""

    extra_server_args = []

    @classmethod
    def setUpClass(cls):
        cls.cert_dir = tempfile.mkdtemp(prefix='corvid-tls-')
        cls.cert, cls.key = make_certificate(cls.cert_dir)
        cls.tls = ssl.create_default_context(cafile=cls.cert)  # verifies the chain and 127.0.0.1
        cls.server_args = ['--tls-cert', cls.cert, '--tls-key', cls.key] + cls.extra_server_args
        cls.client_kwargs = dict(cls.client_kwargs, tls_context=cls.tls)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.cert_dir, ignore_errors=True)

    def rejected_tls(self):
        text = self.c.get('/metrics').body.decode()
        for line in text.splitlines():
            if line.startswith('corvid_requests_rejected_total{reason="tls_handshake"}'):
                return int(float(line.split()[-1]))
        self.fail('no tls_handshake counter in /metrics')


class HttpsTest(TlsCase):
    extra_server_args = ['--header-timeout-ms', '1500', '--idle-timeout-ms', '3000']

    def test_documents_search_and_backup_over_one_connection(self):
        coll = self.coll()
        self.assertStatus(self.c.get('/health'), 200)
        sock = self.c.sock
        self.assertIsInstance(sock, ssl.SSLSocket)
        self.assertIn(sock.version(), ('TLSv1.2', 'TLSv1.3'))
        resp = self.c.put(doc_path(coll, 'a'), json.dumps({'title': 'red fox', 'n': 1}))
        self.assertStatus(resp, 201)
        lines = ''.join(json.dumps({'id': 'd%d' % i, 'title': 'doc %d %s' % (i, 'fox' if i % 3 == 0 else 'dog'),
                                    'n': i, 'pad': 'p' * 200}) + '\n' for i in range(3000))
        resp = self.c.post(bulk_path(coll), lines, content_type='application/x-ndjson')
        self.assertStatus(resp, 200)
        last = resp.json.get('lastEtag') or self.c.last_etag()
        got = self.c.get(doc_path(coll, 'a'))
        self.assertStatus(got, 200)
        self.assertEqual(got.json, {'title': 'red fox', 'n': 1})
        self.assertEqual(self.c.request('HEAD', doc_path(coll, 'd7')).status, 200)
        definition = {'type': 'search', 'collection': coll,
                      'fields': {'title': {'analyzer': 'standard'}, 'n': {'type': 'number'}}}
        self.assertIn(self.c.put('/indexes/tls_' + coll, json.dumps(definition)).status, (200, 201))
        ans = self.c.get('/indexes/tls_%s/search?q=fox&limit=5&minEtag=%d&waitMs=30000' % (coll, last))
        self.assertStatus(ans, 200)
        self.assertFalse(ans.json['stale'], ans.describe())
        self.assertEqual(ans.json['total'], 1 + 1000)
        self.assertIs(self.c.sock, sock, 'the keep-alive connection was not reused')

        # A streamed answer (chunked) over TLS: a backup that restores.
        backup = self.c.get('/admin/backup')
        self.assertStatus(backup, 200)
        self.assertIs(self.c.sock, sock)
        path = os.path.join(self.cert_dir, 'backup.corvid')
        with open(path, 'wb') as f:
            f.write(backup.body)
        target = os.path.join(self.cert_dir, 'restored')
        proc = subprocess.run([binary_path(), 'restore', '--from', path, '--data', target],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        restored = CorvidServer(['--listen', '127.0.0.1:0'], data_dir=target)
        try:
            restored.start()
            rc = restored.client()
            self.assertEqual(rc.get(doc_path(coll, 'd2999')).json['n'], 2999)
            rc.close()
            restored.stop()
        finally:
            restored.cleanup()

    def test_plain_http_on_the_https_port(self):
        before = self.rejected_tls()
        with socket.create_connection((self.server.host, self.server.port), timeout=10) as s:
            s.sendall(b'GET /health HTTP/1.1\r\nHost: x\r\n\r\n')
            responses = read_responses(s, 1)
            self.assertEqual(len(responses), 1)
            status, _headers, body = responses[0]
            self.assertEqual(status, 400)
            self.assertEqual(json.loads(body)['error']['code'], 'https_required')
            self.assertIsNotNone(wait_for_close(s, 5), 'connection left open after the 400')
        self.assertEqual(self.rejected_tls(), before + 1)
        self.assertStatus(self.c.get('/health'), 200)

    def test_hostile_handshakes(self):
        before = self.rejected_tls()
        # A TLS record header followed by garbage.
        with socket.create_connection((self.server.host, self.server.port), timeout=10) as s:
            s.sendall(b'\x16\x03\x01\x00\x40' + os.urandom(64))
            self.assertIsNotNone(wait_for_close(s, 5), 'garbage handshake left open')
        # A client hello cut short, then silence: closed by the header deadline.
        hello = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = self.tls.wrap_bio(hello[0], hello[1], server_hostname='127.0.0.1')
        try:
            obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        client_hello = hello[1].read()
        self.assertGreater(len(client_hello), 40)
        with socket.create_connection((self.server.host, self.server.port), timeout=10) as s:
            s.sendall(client_hello[:len(client_hello) // 2])
            t0 = time.monotonic()
            self.assertIsNotNone(wait_for_close(s, 10), 'half a client hello kept the connection open')
            self.assertLess(time.monotonic() - t0, 8)
        # Connections that never say anything.
        silent = [socket.create_connection((self.server.host, self.server.port), timeout=10) for _ in range(20)]
        try:
            for s in silent:
                self.assertIsNotNone(wait_for_close(s, 10), 'a silent connection outlived the header deadline')
        finally:
            for s in silent:
                s.close()
        self.assertGreaterEqual(self.rejected_tls(), before + 2)
        # Still serving, over a fresh connection.
        fresh = self.server.client(tls_context=self.tls)
        try:
            self.assertStatus(fresh.get('/health'), 200)
        finally:
            fresh.close()

    def test_certificate_is_verified_by_the_client(self):
        # A client trusting another certificate refuses this server: the
        # server presents the certificate it was given.
        other_cert, _ = make_certificate(self.cert_dir, 'other')
        other = self.server.client(tls_context=ssl.create_default_context(cafile=other_cert), retry=False)
        try:
            with self.assertRaises(ssl.SSLCertVerificationError):
                other.get('/health')
        finally:
            other.close()
        self.assertStatus(self.c.get('/health'), 200)

    def test_command_line_over_https(self):
        url = 'https://127.0.0.1:%d' % self.server.port
        coll = self.coll()

        def corvid(*args, env=None):
            full = dict(os.environ)
            full.pop('CORVID_CACERT', None)
            full.update(env or {})
            return subprocess.run([binary_path()] + list(args), capture_output=True, text=True,
                                  timeout=120, env=full)

        # Not trusted: refused, and the message says why.
        proc = corvid('status', '--once', '--url', url)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn('certificate verify failed', proc.stderr)
        # Trusted through --cacert, $CORVID_CACERT, or not checked (-k).
        for args, env in ((['--cacert', self.cert], None), ([], {'CORVID_CACERT': self.cert}),
                          (['--insecure'], None)):
            proc = corvid('status', '--once', '--url', url, *args, env=env)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            self.assertNotIn('certificate', proc.stderr)
        lines = os.path.join(self.cert_dir, 'cli.ndjson')
        with open(lines, 'w') as f:
            for k in range(500):
                f.write(json.dumps({'id': 'c%03d' % k, 'n': k}) + '\n')
        proc = corvid('import', lines, '--collection', coll, '--url', url, '--cacert', self.cert)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        proc = corvid('export', coll, '--url', url, '--cacert', self.cert)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        exported = [json.loads(line) for line in proc.stdout.splitlines()]
        self.assertEqual(sorted(d['n'] for d in exported), list(range(500)))
        path = os.path.join(self.cert_dir, 'cli-backup.corvid')
        proc = corvid('backup', '--url', url, '-o', path, '--cacert', self.cert)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        target = os.path.join(self.cert_dir, 'cli-restored')
        proc = corvid('restore', '--from', path, '--data', target)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        proc = corvid('verify', '--data', target)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)


class HttpsReadKeyTest(TlsCase):
    extra_server_args = ['--api-key', 'admin-key', '--read-key', 'reader']

    def test_read_key_reads_and_is_refused_writes(self):
        coll = self.coll()
        admin = self.server.client(tls_context=self.tls, api_key='admin-key')
        reader = self.server.client(tls_context=self.tls, api_key='reader')
        try:
            self.assertStatus(admin.put(doc_path(coll, 'x'), '{"v": 1}'), 201)
            self.assertStatus(reader.get(doc_path(coll, 'x')), 200)
            self.assertError(reader.put(doc_path(coll, 'y'), '{"v": 2}'), 403, 'forbidden')
            self.assertError(self.c.get(doc_path(coll, 'x')), 401, 'unauthorized')
        finally:
            admin.close()
            reader.close()


class TlsFlagsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix='corvid-tls-flags-')
        self.cert, self.key = make_certificate(self.dir)
        self.other_cert, self.other_key = make_certificate(self.dir, 'other')

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def serve(self, *flags):
        return subprocess.run([binary_path(), 'serve', '--data', os.path.join(self.dir, 'data'),
                               '--listen', '127.0.0.1:0'] + list(flags),
                              capture_output=True, text=True, timeout=60)

    def test_bad_flags_exit_non_zero_with_a_message(self):
        cases = [
            (['--tls-cert', self.cert], 'go together'),
            (['--tls-key', self.key], 'go together'),
            (['--tls-cert', os.path.join(self.dir, 'missing.pem'), '--tls-key', self.key], 'missing.pem'),
            (['--tls-cert', self.key, '--tls-key', self.key], self.key),
            (['--tls-cert', self.cert, '--tls-key', self.other_key], 'matching the certificate'),
        ]
        for flags, needle in cases:
            with self.subTest(flags=flags):
                proc = self.serve(*flags)
                self.assertNotEqual(proc.returncode, 0, proc.stdout + proc.stderr)
                self.assertNotIn('corvid listening', proc.stdout)
                self.assertIn(needle, proc.stderr)


if __name__ == '__main__':
    main()
