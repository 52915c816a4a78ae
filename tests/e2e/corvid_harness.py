"""Harness for Corvid's end-to-end tests.

Starts the real `corvid` binary on a free port (`--listen 127.0.0.1:0`, port
read from its `corvid listening on HOST:PORT` stdout line), gives the tests a
small keep-alive HTTP client, and stops the server with SIGTERM (asserting
exit code 0) or kills it with SIGKILL and restarts it on the same data
directory. Python 3 standard library only.

The binary comes from `--binary PATH` on the command line (stripped before
unittest sees argv; this is what ctest passes), else $CORVID_BINARY, else
<repo>/build/corvid.
"""

import atexit
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

STARTUP_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 30.0
LISTEN_LINE_RE = re.compile(r'^corvid listening on (\S+):(\d+)$')
ERROR_JSON_TYPES = ('application/json',)

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_live_processes = []  # every Popen we started; killed at exit if still running


def _kill_leftovers():
    for proc in _live_processes:
        if proc.poll() is None:
            try:
                proc.kill()
                proc.wait(5)
            except Exception:
                pass


atexit.register(_kill_leftovers)


# ---------------------------------------------------------------------------
# Command line


def strip_binary_arg(argv):
    """Removes `--binary PATH` / `--binary=PATH` from argv in place.

    Returns PATH, or None when the argument is absent."""
    path = None
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == '--binary' and i + 1 < len(argv):
            path = argv[i + 1]
            del argv[i:i + 2]
            continue
        if arg.startswith('--binary='):
            path = arg[len('--binary='):]
            del argv[i]
            continue
        i += 1
    return path


def binary_path():
    path = os.environ.get('CORVID_BINARY') or os.path.join(_REPO_ROOT, 'build', 'corvid')
    return os.path.abspath(path)


def main():
    """Entry point of every test file: strips --binary, then runs unittest."""
    path = strip_binary_arg(sys.argv)
    if path:
        os.environ['CORVID_BINARY'] = os.path.abspath(path)
    unittest.main(verbosity=2)


# ---------------------------------------------------------------------------
# Paths


def q(text):
    """Percent-encodes a path segment completely (`/` included), as UTF-8."""
    if isinstance(text, bytes):
        return urllib.parse.quote_from_bytes(text, safe='')
    return urllib.parse.quote(text, safe='')


def doc_path(collection, doc_id):
    return '/docs/%s/%s' % (q(collection), q(doc_id))


def bulk_path(collection):
    return '/docs/%s/_bulk' % q(collection)



def fetch_docs(server, collection, ids, threads=4):
    """GETs every id of `collection` through `server` (anything with
    .client(timeout=...)) on `threads` connections; returns
    id -> (status, body, etag or None)."""
    ids = list(ids)
    out = {}
    lock = threading.Lock()
    errors = []

    def work(part):
        client = server.client(timeout=30)
        local = {}
        try:
            for doc_id in part:
                resp = client.get(doc_path(collection, doc_id))
                etag = resp.header('ETag')
                local[doc_id] = (resp.status, resp.body,
                                 int(etag.strip('"')) if resp.status == 200 and etag else None)
        except Exception as e:
            errors.append(repr(e))
        finally:
            client.close()
        with lock:
            out.update(local)

    workers = [threading.Thread(target=work, args=(ids[i::threads],)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise AssertionError('GETs through %s:%s failed: %s' % (server.host, server.port, errors[:3]))
    return out

# ---------------------------------------------------------------------------
# HTTP client


class Response:
    """One HTTP answer: status, headers (case-insensitive), raw body, parsed JSON."""

    def __init__(self, method, path, status, reason, headers, body):
        self.method = method
        self.path = path
        self.status = status
        self.reason = reason
        self.headers = headers  # http.client.HTTPMessage
        self.body = body
        self.json = None
        if body:
            try:
                self.json = json.loads(body)
            except (ValueError, UnicodeDecodeError):
                self.json = None

    def header(self, name):
        return self.headers.get(name) if self.headers is not None else None

    def describe(self):
        body = self.body if len(self.body) <= 600 else self.body[:600] + b'...'
        return '%s %s -> %s %s, body %r' % (self.method, self.path[:200], self.status,
                                             self.reason, body)

    __repr__ = describe


_RETRYABLE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
              ConnectionAbortedError, http.client.CannotSendRequest,
              http.client.BadStatusLine)


class CorvidClient:
    """A keep-alive HTTP/1.1 client for one server.

    retry: resend once when a reused connection turns out to be closed by the
    server (idle timeout, `Connection: close` after an error). Crash tests
    pass retry=False so that no write is ever sent twice.
    reconnect_idle_s: open a fresh connection when the current one has been
    idle this long (servers started with a short --idle-timeout-ms).
    tls_context: an ssl.SSLContext: speak HTTPS (servers with --tls-cert)."""

    def __init__(self, host, port, timeout=30.0, api_key=None, retry=True,
                 reconnect_idle_s=None, tls_context=None):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.api_key = api_key
        self.retry = retry
        self.reconnect_idle_s = reconnect_idle_s
        self.tls_context = tls_context
        self._conn = None
        self._used = False
        self._last_use = 0.0

    def close(self):
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self._used = False

    def _connection(self):
        if (self._conn is not None and self.reconnect_idle_s is not None
                and time.monotonic() - self._last_use > self.reconnect_idle_s):
            self.close()
        if self._conn is None and self.tls_context is not None:
            self._conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                                     context=self.tls_context)
            self._used = False
        elif self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._used = False
        return self._conn

    @property
    def sock(self):
        return self._conn.sock if self._conn is not None else None

    def request(self, method, path, body=None, headers=None, content_type='application/json'):
        """Sends one request; returns a Response.

        body: bytes, str (UTF-8 encoded) or None. content_type: sent when a
        body is given and headers do not name Content-Type; None omits it.
        headers: dict; a value of None removes that header."""
        if isinstance(body, str):
            body = body.encode('utf-8')
        hdrs = {}
        if body is not None and content_type is not None:
            hdrs['Content-Type'] = content_type
        if self.api_key is not None:
            hdrs['Authorization'] = 'Bearer ' + self.api_key
        for key, value in (headers or {}).items():
            for existing in list(hdrs):
                if existing.lower() == key.lower():
                    del hdrs[existing]
            if value is not None:
                hdrs[key] = value
        attempts = 2 if self.retry else 1
        for attempt in range(attempts):
            conn = self._connection()
            reused = self._used
            try:
                conn.request(method, path, body=body, headers=hdrs)
                resp = conn.getresponse()
                data = resp.read()
            except _RETRYABLE:
                self.close()
                if attempt + 1 < attempts and reused:
                    continue
                raise
            except Exception:
                self.close()
                raise
            self._used = True
            self._last_use = time.monotonic()
            if resp.will_close:
                self.close()
            return Response(method, path, resp.status, resp.reason, resp.msg, data)
        raise AssertionError('unreachable')

    # Conveniences.
    def get(self, path, headers=None):
        return self.request('GET', path, headers=headers)

    def put(self, path, body, headers=None, content_type='application/json'):
        return self.request('PUT', path, body, headers, content_type)

    def post(self, path, body, headers=None, content_type='application/json'):
        return self.request('POST', path, body, headers, content_type)

    def delete(self, path, headers=None):
        return self.request('DELETE', path, headers=headers)

    def last_etag(self):
        resp = self.get('/collections')
        if resp.status != 200 or not isinstance(resp.json, dict):
            raise AssertionError('GET /collections failed: ' + resp.describe())
        return resp.json['lastEtag']

    def all_changes(self, since=0, page=10000):
        """Pages through /changes from `since`; returns (results, lastEtag)."""
        results = []
        last = None
        while True:
            resp = self.get('/changes?since=%d&limit=%d' % (since, page))
            if resp.status != 200 or not isinstance(resp.json, dict):
                raise AssertionError('GET /changes failed: ' + resp.describe())
            batch = resp.json['results']
            last = resp.json['lastEtag']
            results.extend(batch)
            if not batch:
                return results, last
            since = batch[-1]['etag']


# ---------------------------------------------------------------------------
# Raw sockets, for requests http.client will not send


class RawResult:
    def __init__(self):
        self.status = None      # None: no HTTP response came back
        self.headers = None
        self.body = b''
        self.json = None
        self.closed = False     # the server closed the connection afterwards
        self.error = None       # exception text when reading failed
        self.send_error = None

    def describe(self):
        return 'raw -> status %s, body %r, closed %s, error %s, send_error %s' % (
            self.status, self.body[:300], self.closed, self.error, self.send_error)

    __repr__ = describe


def raw_exchange(host, port, data, timeout=15.0, concurrent_send=False, method='GET',
                 check_closed=True):
    """Sends raw bytes, reads at most one HTTP response.

    concurrent_send: send from a thread while reading, so that a server
    answering early (e.g. 413 before the body is read) and closing does not
    leave us blocked in sendall. check_closed: after the response, wait up
    to 3 s to see whether the server closes the connection."""
    result = RawResult()
    sock = socket.create_connection((host, port), timeout=timeout)
    sender = None
    try:
        if concurrent_send:
            def send():
                try:
                    sock.sendall(data)
                except OSError as e:
                    result.send_error = repr(e)
            sender = threading.Thread(target=send, daemon=True)
            sender.start()
        else:
            try:
                sock.sendall(data)
            except OSError as e:
                result.send_error = repr(e)
        resp = http.client.HTTPResponse(sock, method=method)
        try:
            resp.begin()
            result.status = resp.status
            result.headers = resp.msg
            result.body = resp.read()
            try:
                result.json = json.loads(result.body) if result.body else None
            except ValueError:
                result.json = None
        except (http.client.HTTPException, OSError) as e:
            result.error = repr(e)
            result.closed = True
            return result
        if check_closed:
            result.closed = wait_for_close(sock, 3.0) is not None
        return result
    finally:
        try:
            sock.close()
        except OSError:
            pass
        if sender is not None:
            sender.join(timeout)


def read_responses(sock, count, timeout=10.0):
    """Reads `count` HTTP/1.1 responses (Content-Length framed) from a socket.

    Returns [(status, headers dict with lower-case names, body)]."""
    sock.settimeout(timeout)
    buf = b''
    out = []
    while len(out) < count:
        while b'\r\n\r\n' not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError('connection closed after %d of %d responses' % (len(out), count))
            buf += chunk
        head, buf = buf.split(b'\r\n\r\n', 1)
        lines = head.decode('iso-8859-1').split('\r\n')
        status = int(lines[0].split(' ')[1])
        headers = {}
        for ln in lines[1:]:
            name, _, value = ln.partition(':')
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get('content-length', '0'))
        while len(buf) < length:
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError('connection closed inside a response body')
            buf += chunk
        out.append((status, headers, buf[:length]))
        buf = buf[length:]
    return out


def wait_for_close(sock, timeout):
    """Reads (and discards) until the peer closes or resets the connection.

    Returns the seconds it took, or None if still open after `timeout`."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return None
        except OSError:
            return time.monotonic() - start
        if not chunk:
            return time.monotonic() - start


# ---------------------------------------------------------------------------
# Server process


class CorvidServer:
    """One `corvid serve` process on a data directory that outlives restarts."""

    def __init__(self, extra_args=(), data_dir=None, binary=None):
        self.binary = binary or binary_path()
        self.extra_args = list(extra_args)
        self._tmp = tempfile.mkdtemp(prefix='corvid-e2e-')
        if data_dir is None:
            data_dir = os.path.join(self._tmp, 'data')
            os.mkdir(data_dir)
        self.data_dir = data_dir
        self.stderr_path = os.path.join(self._tmp, 'stderr.log')
        self.proc = None
        self.host = None
        self.port = None
        self.stdout_lines = []
        self._stdout_thread = None
        self.starts = 0

    # -- lifecycle --------------------------------------------------------
    def start(self):
        if not os.path.exists(self.binary):
            raise AssertionError('corvid binary not found at %s (pass --binary PATH or set '
                                 'CORVID_BINARY)' % self.binary)
        assert self.proc is None or self.proc.poll() is not None, 'server already running'
        args = [self.binary, 'serve', '--data', self.data_dir, '--listen', '127.0.0.1:0']
        args += self.extra_args
        self.starts += 1
        stderr = open(self.stderr_path, 'ab')
        stderr.write(('\n==== start %d: %s\n' % (self.starts, ' '.join(args))).encode())
        stderr.flush()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=stderr, cwd=self._tmp)
        stderr.close()
        _live_processes.append(self.proc)
        self.stdout_lines = []
        ready = threading.Event()
        found = {}
        proc = self.proc
        lines = self.stdout_lines

        def read_stdout():
            for raw in proc.stdout:
                line = raw.decode('utf-8', 'replace').rstrip('\r\n')
                lines.append(line)
                if 'port' not in found:
                    m = LISTEN_LINE_RE.match(line)
                    if m:
                        found['host'] = m.group(1)
                        found['port'] = int(m.group(2))
                        ready.set()
            ready.set()  # EOF: the process exited or closed stdout

        self._stdout_thread = threading.Thread(target=read_stdout, daemon=True)
        self._stdout_thread.start()
        ready.wait(STARTUP_TIMEOUT_S)
        if 'port' not in found:
            rc = self.proc.poll()
            if rc is None:
                self.proc.kill()
                self.proc.wait()
            raise AssertionError(
                'corvid did not print "corvid listening on HOST:PORT" within %.0f s '
                '(exit code %s); stdout %r; stderr tail:\n%s'
                % (STARTUP_TIMEOUT_S, rc, lines[:10], self.stderr_tail()))
        self.host = found['host']
        self.port = found['port']
        if self.host != '127.0.0.1':
            raise AssertionError('server listens on %r, expected 127.0.0.1' % self.host)
        return self

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=STOP_TIMEOUT_S):
        """Waits for exit; returns the exit code (None on timeout)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT_S, expect_code=0):
        """Sends `sig`, waits for exit and asserts the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            rc = None if self.proc is None else self.proc.returncode
            raise AssertionError('server not running at stop (exit code %s); stderr tail:\n%s'
                                 % (rc, self.stderr_tail()))
        self.proc.send_signal(sig)
        rc = self.wait(timeout)
        if rc is None:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError('corvid did not exit within %.0f s of %s; stderr tail:\n%s'
                                 % (timeout, signal.Signals(sig).name, self.stderr_tail()))
        self._finish_stdout()
        if expect_code is not None and rc != expect_code:
            raise AssertionError('corvid exited with %s after %s, expected %s; stderr tail:\n%s'
                                 % (rc, signal.Signals(sig).name, expect_code,
                                    self.stderr_tail()))
        return rc

    def kill(self):
        """SIGKILL, no questions asked."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
            self._finish_stdout()

    def restart(self):
        """kill -9 (if running) and start again on the same data directory.

        A server that has already died of a crash (a sanitizer report, a
        fatal signal) fails the restart with its stderr: a kill -9 must not
        hide it."""
        crash = self.crash_report()
        if crash:
            raise AssertionError(crash)
        self.kill()
        return self.start()

    def crash_report(self):
        """A description with the stderr tail if the process ended by itself
        in a crash: a fatal signal other than the harness's SIGKILL/SIGTERM,
        a sanitizer's exit code 66, or a sanitizer report; else None."""
        if self.proc is None or self.proc.poll() is None:
            return None
        rc = self.proc.returncode
        tail = self.stderr_tail(20000)
        # Only this start's output: the log is shared by every start.
        tail = tail[tail.rfind('\n==== start ') + 1:] if '\n==== start ' in tail else tail
        crashed = (rc < 0 and -rc not in (signal.SIGKILL, signal.SIGTERM)) or rc == 66 \
            or 'Sanitizer' in tail or 'runtime error:' in tail
        if not crashed:
            return None
        return 'corvid (%s) crashed, exit code %s; stderr tail:\n%s' % (self.binary, rc, tail)

    def cleanup(self):
        crash = self.crash_report()
        if crash:
            # A test that failed on a refused connection says why here.
            print('\n' + crash, file=sys.stderr)
        self.kill()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def _finish_stdout(self):
        if self._stdout_thread is not None:
            self._stdout_thread.join(5)

    def stderr_tail(self, max_bytes=4000):
        try:
            with open(self.stderr_path, 'rb') as f:
                data = f.read()
        except OSError:
            return '<no stderr>'
        return data[-max_bytes:].decode('utf-8', 'replace')

    # -- clients ------------------------------------------------------------
    def client(self, **kwargs):
        return CorvidClient(self.host, self.port, **kwargs)

    def raw(self, data, **kwargs):
        return raw_exchange(self.host, self.port, data, **kwargs)

    def connect(self, timeout=15.0):
        return socket.create_connection((self.host, self.port), timeout=timeout)


# ---------------------------------------------------------------------------
# unittest base


class CorvidTestCase(unittest.TestCase):
    """One server per test class (started in setUpClass, SIGTERM'd and
    checked for exit code 0 in tearDownClass); `self.c` is a keep-alive
    client. Tests use their own collections (`self.coll()`) so they do not
    see each other's documents."""

    server_args = []
    client_kwargs = {}
    maxDiff = 4000

    @classmethod
    def setUpClass(cls):
        cls.server = CorvidServer(cls.server_args)
        try:
            cls.server.start()
        except BaseException:
            cls.server.cleanup()
            raise
        cls.c = cls.server.client(**cls.client_kwargs)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        try:
            if cls.server.running():
                cls.server.stop()
            else:
                raise AssertionError('server died during the tests (exit code %s); stderr:\n%s'
                                     % (cls.server.proc.returncode, cls.server.stderr_tail()))
        finally:
            cls.server.cleanup()

    def setUp(self):
        self._coll_n = 0

    def coll(self, suffix=''):
        """A collection name unique to this test."""
        self._coll_n += 1
        return 'c_%s_%d%s' % (self._testMethodName[5:60], self._coll_n, suffix)

    # -- assertions ---------------------------------------------------------
    def assertStatus(self, resp, status):
        self.assertEqual(resp.status, status, resp.describe())

    def assertJsonContentType(self, resp):
        ctype = resp.header('Content-Type') or ''
        self.assertTrue(ctype.split(';')[0].strip().lower() == 'application/json',
                        'Content-Type %r, expected application/json: %s'
                        % (ctype, resp.describe()))

    def assertError(self, resp, status, code):
        """`status` and `{"error": {"code": code, "message": "<non-empty>"}}`.

        code may be a tuple of acceptable codes. Returns the error object."""
        codes = code if isinstance(code, tuple) else (code,)
        self.assertEqual(resp.status, status, resp.describe())
        self.assertJsonContentType(resp)
        body = resp.json
        self.assertIsInstance(body, dict, 'error body is not a JSON object: ' + resp.describe())
        self.assertEqual(list(body.keys()), ['error'], resp.describe())
        err = body['error']
        self.assertIsInstance(err, dict, resp.describe())
        self.assertIn(err.get('code'), codes, resp.describe())
        self.assertIsInstance(err.get('message'), str, resp.describe())
        self.assertTrue(err['message'].strip(), 'empty error message: ' + resp.describe())
        for key in ('offset', 'line'):
            if key in err:
                self.assertTrue(isinstance(err[key], int) and not isinstance(err[key], bool)
                                and err[key] >= 0, '%s not a count: %s'
                                % (key, resp.describe()))
        return err

    def assertEtagHeader(self, resp, etag):
        self.assertEqual(resp.header('ETag'), '"%d"' % etag, resp.describe())

    def assertIsEtag(self, value, context=''):
        self.assertTrue(isinstance(value, int) and not isinstance(value, bool) and value > 0,
                        'not an etag: %r %s' % (value, context))

    def putOk(self, collection, doc_id, body, status=None, headers=None):
        """PUT that must succeed (201/200 or exactly `status`); returns etag."""
        resp = self.c.put(doc_path(collection, doc_id), body, headers=headers)
        if status is None:
            self.assertIn(resp.status, (200, 201), resp.describe())
        else:
            self.assertEqual(resp.status, status, resp.describe())
        self.assertIsInstance(resp.json, dict, resp.describe())
        self.assertEqual(resp.json, {'collection': collection, 'id': doc_id,
                                     'etag': resp.json.get('etag')}, resp.describe())
        self.assertIsEtag(resp.json['etag'], resp.describe())
        self.assertEtagHeader(resp, resp.json['etag'])
        return resp.json['etag']

    def assertServerHealthy(self):
        """/health answers and a fresh PUT/GET round-trips, on a new connection."""
        client = self.server.client(timeout=15.0, **self.client_kwargs)
        try:
            resp = client.get('/health')
            self.assertEqual(resp.status, 200, 'server unhealthy: ' + resp.describe())
            self.assertEqual(resp.json, {'status': 'ok'}, resp.describe())
            body = b'{"probe":true,"n":12345678901234567890}'
            resp = client.put(doc_path('health_probe', 'p'), body)
            self.assertIn(resp.status, (200, 201), 'probe PUT failed: ' + resp.describe())
            resp = client.get(doc_path('health_probe', 'p'))
            self.assertEqual(resp.status, 200, resp.describe())
            self.assertEqual(resp.body, body, resp.describe())
        finally:
            client.close()
        self.assertTrue(self.server.running(), 'server exited; stderr:\n'
                        + self.server.stderr_tail())


def nested_object(levels):
    """A JSON object nested `levels` deep (`{}` is level 1)."""
    return '{"a":' * (levels - 1) + '{}' + '}' * (levels - 1)


def nested_array_in_object(levels):
    """`{"a":[[...]]}`: one object and levels-1 arrays, `levels` deep."""
    return '{"a":' + '[' * (levels - 1) + ']' * (levels - 1) + '}'
