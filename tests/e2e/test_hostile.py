"""End-to-end tests: nothing a client sends may end the server or make it answer 5xx.

A chunked request with a 70 KB trailer used to abort the process. This file sends it, a seeded
stream of malformed and oversized raw HTTP, more idle connections than descriptors, and a slow
loris. CORVID_SEED replays the printed seed, CORVID_HOSTILE_N sets the count (default 3000),
CORVID_HOSTILE_CASE=i sends case i alone, CORVID_SKIP_RSS=1 skips the memory bound.
"""

import collections
import http.client
import json
import os
import random
import re
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corvid_harness import CorvidServer, CorvidTestCase, main, wait_for_close  # noqa: E402

SEED = int(os.environ.get('CORVID_SEED') or random.randrange(1 << 30))
TOTAL = int(os.environ.get('CORVID_HOSTILE_N') or 3000)
ONLY_CASE = os.environ.get('CORVID_HOSTILE_CASE')
THREADS = 4
KEY = 'secret'
# The fuzzed servers get small body limits so that "over the limit" is cheap to send.
DOC_LIMIT = 1 << 20
BULK_LIMIT = 4 << 20
LIMIT_ARGS = ['--max-doc-bytes', str(DOC_LIMIT), '--max-bulk-bytes', str(BULK_LIMIT)]
# Defaults of the header limits (no flag given).
HEADER_BYTES_LIMIT = 64 * 1024
HEADER_COUNT_LIMIT = 100
TARGET_LIMIT = 16 * 1024
CHUNK_EXTENSION_LIMIT = 4096
READ_TIMEOUT_S = 2.0          # quiet time after which a hostile exchange counts as unanswered
RSS_SLACK_KIB = 64 * 1024
SKIP_RSS = (os.environ.get('CORVID_SKIP_RSS') == '1'
            or os.environ.get('CORVID_SANITIZER_BUILD') == '1')
KNOWN_DOC = ('{"name":"known","n":12345678901234567890,"f":1.0,"s":"\u00fc\U0001F600\\u0041",'
             '"a":[1,[2,{"b":null}]]}').encode('utf-8')

print('test_hostile.py: CORVID_SEED=%d CORVID_HOSTILE_N=%d' % (SEED, TOTAL), flush=True)

# ---------------------------------------------------------------------------
# Raw exchanges: send bytes while reading, parse whatever comes back.

STATUS_RE = re.compile(r'^HTTP/1\.[01] (\d{3})(?: .*)?$')


class Reply:
    def __init__(self, status, headers, body, complete, head):
        self.status = status
        self.headers = headers      # lower-case names
        self.body = body
        self.complete = complete    # False: the connection ended inside the body
        self.head = head            # the answer to a HEAD: no body

    def json(self):
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            return None

    def __repr__(self):
        return '%d %r' % (self.status, self.body[:200])


class Outcome:
    """What came back on one connection."""

    def __init__(self):
        self.replies = []           # final (non-1xx) answers, in order
        self.interim = 0
        self.closed = False
        self.timed_out = False
        self.send_error = None
        self.connect_error = None
        self.malformed = None       # the server sent something that is not HTTP
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data, heads):
        self._buf += data
        self._parse(heads, eof=False)

    def finish(self, heads):
        self._parse(heads, eof=True)

    def _parse(self, heads, eof):
        buf = self._buf
        while self.malformed is None and self._pos < len(buf):
            pos = self._pos
            end = buf.find(b'\r\n\r\n', pos)
            if end < 0:
                if eof:
                    self.malformed = 'closed inside a response head: %r' % bytes(buf[pos:pos + 200])
                elif len(buf) - pos > 1 << 20:
                    self.malformed = 'response head over 1 MiB'
                return
            lines = bytes(buf[pos:end]).decode('latin-1').split('\r\n')
            m = STATUS_RE.match(lines[0])
            if not m:
                self.malformed = 'not an HTTP status line: %r' % lines[0][:200]
                return
            status = int(m.group(1))
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(':')
                if not sep:
                    self.malformed = 'bad response header line %r' % line[:200]
                    return
                headers[name.strip().lower()] = value.strip()
            start = end + 4
            if 100 <= status < 200:
                self.interim += 1
                self._pos = start
                continue
            idx = len(self.replies)
            head = bool(heads and idx < len(heads) and heads[idx])
            if head or status in (204, 304):
                length = 0
            elif 'content-length' in headers:
                try:
                    length = int(headers['content-length'])
                except ValueError:
                    self.malformed = 'bad Content-Length %r' % headers['content-length']
                    return
            elif eof:
                length = len(buf) - start       # framed by the close
            else:
                return
            if len(buf) - start < length:
                if eof:
                    self.replies.append(Reply(status, headers, bytes(buf[start:]), False, head))
                    self._pos = len(buf)
                return
            self.replies.append(Reply(status, headers, bytes(buf[start:start + length]), True, head))
            self._pos = start + length

    def describe(self):
        state = ('closed' if self.closed else 'timed out' if self.timed_out else 'open')
        extra = ''
        if self.send_error:
            extra += ', send error ' + self.send_error
        if self.connect_error:
            extra += ', connect error ' + self.connect_error
        if self.malformed:
            extra += ', malformed: ' + self.malformed
        return 'replies %r, %s%s' % (self.replies, state, extra)


def exchange(host, port, rounds, shut_wr=False, quiet=READ_TIMEOUT_S):
    """Plays `rounds` on one new connection and returns an Outcome.

    rounds: [(bytes, answers expected, [is HEAD per answer] or None)]; a round
    is sent once the previous one is fully answered (a round may hold several
    pipelined requests). Sending and reading interleave, so a server that
    answers early and closes never leaves us blocked in a send. shut_wr:
    shutdown(SHUT_WR) once everything is sent. Stops when every answer has
    come, the server closes, or `quiet` seconds pass with no progress."""
    out = Outcome()
    try:
        sock = socket.create_connection((host, port), timeout=5.0)
    except OSError as e:
        out.connect_error = repr(e)
        return out
    sel = selectors.DefaultSelector()
    try:
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ)
        heads, wanted, ri, data, sent, shut = [], 0, 0, b'', 0, False
        last = time.monotonic()
        while True:
            while sent >= len(data) and ri < len(rounds) and len(out.replies) >= wanted:
                data, expect, hd = rounds[ri]
                ri += 1
                sent = 0
                wanted += expect
                heads += list(hd) if hd else [False] * expect
            all_sent = sent >= len(data) and ri == len(rounds)
            if all_sent and shut_wr and not shut:
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                shut = True
            if (all_sent and len(out.replies) >= wanted) or out.closed or out.malformed:
                break
            want_write = sent < len(data)
            sel.modify(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if want_write else 0))
            left = last + quiet - time.monotonic()
            if left <= 0:
                out.timed_out = True
                break
            for _, mask in sel.select(left):
                if mask & selectors.EVENT_WRITE and want_write:
                    try:
                        sent += sock.send(memoryview(data)[sent:sent + (1 << 20)])
                        last = time.monotonic()
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError as e:   # the server closed: read what it said
                        out.send_error = repr(e)
                        sent, ri = len(data), len(rounds)
                if mask & selectors.EVENT_READ:
                    try:
                        chunk = sock.recv(1 << 20)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        chunk = b''
                    if not chunk:
                        out.closed = True
                        out.finish(heads)
                    else:
                        out.feed(chunk, heads)
                        last = time.monotonic()
        return out
    finally:
        sel.close()
        sock.close()


def one(server, data, **kwargs):
    """One request (or raw bytes expecting one answer) on a new connection."""
    return exchange(server.host, server.port, [(data, 1, None)], **kwargs)


def error_of(reply):
    """The `error` object of a JSON error answer, or None if it is not one."""
    ctype = reply.headers.get('content-type', '').split(';')[0].strip().lower()
    body = reply.json()
    if ctype != 'application/json' or not isinstance(body, dict):
        return None
    err = body.get('error')
    if (not isinstance(err, dict) or not isinstance(err.get('code'), str)
            or not isinstance(err.get('message'), str) or not err['message'].strip()):
        return None
    return err


# ---------------------------------------------------------------------------
# Request material

def request(method, target, headers=(), body=None, version=b'HTTP/1.1', length=True):
    """Raw request bytes. headers: byte strings without CRLF."""
    lines = [method + b' ' + target + b' ' + version] + list(headers)
    if body is not None and length:
        lines.append(b'Content-Length: %d' % len(body))
    return b'\r\n'.join(lines) + b'\r\n\r\n' + (body or b'')


def chunked(rng, body, ext=b'', trailers=()):
    """`body` in chunked framing with random chunk sizes."""
    out = bytearray()
    i = 0
    while i < len(body):
        n = min(len(body) - i, rng.choice((1, 7, 100, 4096, 65536)))
        out += b'%x' % n + ext + b'\r\n' + body[i:i + n] + b'\r\n'
        i += n
    out += b'0\r\n' + b''.join(t + b'\r\n' for t in trailers) + b'\r\n'
    return bytes(out)


def auth_headers(key):
    return [b'Host: x', ('Authorization: Bearer %s' % key).encode()] if key else [b'Host: x']


WORDS = ['alpha', 'beta', 'gamma', 'delta', 'river', 'quick', 'brown', 'fox', 'running', 'houses',
         '\u00fcber', 'na\u00efve', '\u65e5\u672c\u8a9e', '\U0001F600', 'stra\u00dfe', '\ufb01sh',
         '\u0130stanbul', 'caf\u00e9']


def words(rng, lo, hi):
    return ' '.join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def random_value(rng, depth=0):
    r = rng.random()
    if depth >= 4 or r < 0.3:
        return words(rng, 0, 6)
    if r < 0.45:
        return rng.choice((0, -1, 2 ** 63 - 1, -2 ** 63, 2 ** 64 - 1, 10 ** 30, rng.randint(-1000, 1000)))
    if r < 0.55:
        return rng.choice((0.5, -1.25e-7, 1.0, 1e308, 3.141592653589793))
    if r < 0.62:
        return rng.choice((True, False, None))
    if r < 0.8:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {'k%d' % i: random_value(rng, depth + 1) for i in range(rng.randint(0, 4))}


def random_doc(rng, big=False, hard=False):
    """A valid JSON object; hard: with a number that is hard to parse, written as is."""
    doc = {'title': words(rng, 1, 5), 'n': rng.randint(-10 ** 6, 10 ** 6)}
    for i in range(rng.randint(0, 6)):
        doc[rng.choice(('x', '\u00fc', 'emoji\U0001F600', 'nested', 'a.b')) + str(i)] = random_value(rng)
    if big:
        doc['pad'] = 'p' * rng.randint(10000, 100000)
    text = json.dumps(doc, ensure_ascii=rng.random() < 0.3,
                      separators=rng.choice(((',', ':'), (', ', ': ')))).encode('utf-8')
    if hard:
        text = text[:-1] + b',"h":' + rng.choice(VALID_HARD_NUMBERS) + b'}'
    return text


def search_doc(rng, i):
    return {'id': 'h%d' % i, 'title': words(rng, 1, 6), 'body': words(rng, 3, 30),
            'tags': [rng.choice(('red', 'green', 'blue', '')) for _ in range(rng.randint(0, 3))],
            'n': rng.randint(-100, 100), 'd': '2024-%02d-%02d' % (rng.randint(1, 12), rng.randint(1, 28))}


SEARCH_DEF = {'type': 'search', 'collection': 'hc',
              'fields': {'title': {'analyzer': 'standard', 'boost': 2.0}, 'body': {'analyzer': 'english'},
                         'tags': {'analyzer': 'keyword', 'facet': True}, 'n': {'type': 'number'},
                         'd': {'type': 'date'}},
              'store': ['title', 'n']}
MAPREDUCE_DEF = {'type': 'mapreduce', 'collection': 'hc',
                 'map': {'month': 'substr(d, 0, 7)', 'n': 'n'}, 'groupBy': ['month'],
                 'reduce': {'total': 'sum(n)', 'count': 'count()'}}

# Every document the stream manages to store (collection fz) is indexed by both kinds.
FZ_SEARCH_DEF = {'type': 'search', 'collection': 'fz',
                 'fields': {'s': {'analyzer': 'standard'}, 'title': {'analyzer': 'english'},
                            'n': {'type': 'number'}, 'h': {'type': 'number'}, 'd': {'type': 'date'},
                            'a': {'analyzer': 'keyword', 'facet': True}},
                 'store': '*'}
FZ_MAPREDUCE_DEF = {'type': 'mapreduce', 'collection': 'fz',
                    'map': {'n': 'n', 'h': 'h', 's': 's', 'len': 'len(s)'}, 'groupBy': ['n'],
                    'reduce': {'count': 'count()', 'total': 'sum(n)', 'top': 'max(h)', 'sum_h': 'sum(h)'}}


# ---------------------------------------------------------------------------
# The seeded generator. Each case is derived from (SEED, index) alone, so the
# same seed sends the same bytes whichever thread sends them.

KNOWN_METHODS = (b'GET', b'HEAD', b'PUT', b'POST', b'DELETE')


class Case:
    def __init__(self, index, rng):
        self.index = index
        self.keyed = rng.random() < 0.5        # which server: with --api-key or without
        r = rng.random()
        if self.keyed:
            self.auth = 'right' if r < 0.6 else 'none' if r < 0.85 else 'wrong'
        else:
            self.auth = 'none' if r < 0.9 else 'wrong'
        self.auth_header = {
            'right': b'Authorization: Bearer ' + KEY.encode(),
            'none': None,
            'wrong': rng.choice((b'Authorization: Bearer wrong', b'Authorization: Basic c2VjcmV0',
                                 b'Authorization: Bearer', b'Authorization: Bearer secret2',
                                 b'Authorization: bearer ' + b'k' * 2000))}[self.auth]
        self.family = None
        self.rounds = []
        self.shut_wr = False
        self.may_hang = False       # legitimately incomplete and left open: a timeout is fine
        self.allow_5xx = ()         # 501 for an unknown method, 505 for an unknown version
        self.target = None          # set when the case is one request to a known target
        self.clean_head = False     # well-formed line and headers: no key must mean exactly 401/403
        self.over_limit = False     # the body is over its limit: 413 is a fine answer too
        self.check = None           # fn(outcome) -> [problems], for requests with a known answer

    def headers(self, *extra):
        hdrs = [b'Host: x']
        if self.auth_header:
            hdrs.append(self.auth_header)
        return hdrs + [h for h in extra if h]

    def single(self, data, target, shut_wr=False, head=False):
        self.rounds = [(data, 1, [head])]
        self.target = target
        self.shut_wr = shut_wr

    @property
    def data(self):
        return b''.join(r[0] for r in self.rounds)

    def describe(self, limit=240):
        """One line: the case, and its bytes (head and tail when longer than `limit`)."""
        data = self.data
        if len(data) <= limit:
            shown = repr(data)
        else:
            shown = '%r ... %r' % (data[:limit * 2 // 3], data[-(limit // 3):])
        return '#%d %s on the %s server, auth %s, %d bytes%s: %s' % (
            self.index, self.family, 'keyed' if self.keyed else 'open', self.auth, len(data),
            ', then SHUT_WR' if self.shut_wr else '', shown)


def body_route(rng, case):
    """(method, target, content-type header, a small valid body, body limit)."""
    kind = rng.choice(('doc', 'doc', 'bulk', 'search', 'analyze', 'indexdef'))
    if kind == 'doc':
        return (b'PUT', b'/docs/fz/d%d' % case.index, b'Content-Type: application/json',
                b'{"a":1}', DOC_LIMIT)
    if kind == 'bulk':
        return (b'POST', b'/docs/fz/_bulk', b'Content-Type: application/x-ndjson',
                b'{"id":"b%d"}\n' % case.index, BULK_LIMIT)
    if kind == 'search':
        return b'POST', b'/indexes/hx/search', b'Content-Type: application/json', b'{"q":"alpha"}', DOC_LIMIT
    if kind == 'analyze':
        return (b'POST', b'/admin/analyze', b'Content-Type: application/json',
                b'{"analyzer":"standard","text":"hello"}', DOC_LIMIT)
    definition = dict(SEARCH_DEF, collection='fz')
    return (b'PUT', b'/indexes/hz%d' % rng.randrange(4), b'Content-Type: application/json',
            json.dumps(definition).encode(), DOC_LIMIT)


def reply_problem(replies, i, what, status, body=None):
    if len(replies) <= i or not replies[i].complete:
        return ['%s: no complete answer' % what]
    r = replies[i]
    if r.status not in (status if isinstance(status, tuple) else (status,)):
        return ['%s: status %d, expected %s: %r' % (what, r.status, status, r.body[:300])]
    if body is not None and r.body != body:
        return ['%s: body differs: got %r, sent %r' % (what, r.body[:200], body[:200])]
    return []


def check_put_get(doc_id, body):
    """PUT answered 200/201 with an etag; the GET after it returns the body and etag."""
    def check(out):
        p = reply_problem(out.replies, 0, 'well-formed PUT', (200, 201))
        if p:
            return p
        put = out.replies[0]
        etag = put.headers.get('etag', '')
        if not re.fullmatch(r'"\d+"', etag):
            return ['well-formed PUT: ETag header %r' % etag]
        expected = {'collection': 'fz', 'id': doc_id, 'etag': int(etag[1:-1])}
        if put.json() != expected:
            return ['well-formed PUT: body %r, expected %r' % (put.body[:200], expected)]
        p = reply_problem(out.replies, 1, 'GET after a well-formed PUT', 200, body)
        if not p and out.replies[1].headers.get('etag') != etag:
            p = ['GET after PUT: ETag %r, PUT said %r' % (out.replies[1].headers.get('etag'), etag)]
        return p
    return check


def check_health(index):
    def check(out):
        p = reply_problem(out.replies, index, 'GET /health', 200)
        if not p and out.replies[index].json() != {'status': 'ok'}:
            p = ['GET /health: body %r' % out.replies[index].body[:200]]
        return p
    return check


def fam_wellformed(rng, case):
    if case.keyed:
        case.auth, case.auth_header = 'right', b'Authorization: Bearer ' + KEY.encode()
    r = rng.random()
    if r < 0.7:
        doc_id = 'w%d' % case.index
        body = random_doc(rng, big=rng.random() < 0.05, hard=rng.random() < 0.15)
        target = b'/docs/fz/' + doc_id.encode()
        put = request(b'PUT', target, case.headers(b'Content-Type: application/json'), body)
        get = request(b'GET', target, case.headers())
        if rng.random() < 0.5:
            case.rounds = [(put, 1, None), (get, 1, None)]
        else:
            case.rounds = [(put + get, 2, None)]
        case.check = check_put_get(doc_id, body)
    elif r < 0.85:
        q = urllib.parse.quote(words(rng, 1, 3))
        target = ('/indexes/hx/search?q=%s&limit=%d' % (q, rng.randint(0, 50))).encode()
        case.single(request(b'GET', target, case.headers()), target)

        def check(out):
            p = reply_problem(out.replies, 0, 'well-formed search', 200)
            if not p:
                body = out.replies[0].json()
                if not isinstance(body, dict) or not {'total', 'hits', 'stale', 'indexEtag'} <= set(body):
                    p = ['well-formed search: answer %r' % out.replies[0].body[:300]]
            return p
        case.check = check
    else:
        case.single(request(b'GET', b'/health', case.headers()), b'/health')
        case.check = check_health(0)


TAILS = (
    b'PUT /docs/fz/t HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{"a":',
    b'GARBAGE\r\n\r\n',
    b'GET /docs/fz/%zz HTTP/1.1\r\nHost: x\r\n\r\n',
    b'GET /health HTTP/1.1\r\nBad Header Line\r\n\r\n',
    b'GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ' + b'h' * 70000 + b'\r\n\r\n',
    b'PUT /docs/fz/t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n',
    b'PUT /docs/fz/t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX: '
    + b'y' * 70000 + b'\r\n\r\n',
)


def fam_pipelined(rng, case):
    if case.keyed:
        case.auth, case.auth_header = 'right', b'Authorization: Bearer ' + KEY.encode()
    if rng.random() < 0.25:
        n = rng.randint(10, 40)
        data = request(b'GET', b'/health', case.headers()) * n
        case.rounds = [(data, n, None)]
        checks = [check_health(i) for i in range(n)]
        case.check = lambda out: [p for c in checks for p in c(out)][:3]
        return
    doc_id = 'p%d' % case.index
    body = random_doc(rng, hard=rng.random() < 0.15)
    target = b'/docs/fz/' + doc_id.encode()
    data = (request(b'PUT', target, case.headers(b'Content-Type: application/json'), body)
            + request(b'GET', target, case.headers()) + request(b'GET', b'/health', case.headers()))
    expect = 3
    if rng.random() < 0.6:      # a bad request after three good ones: they are answered first
        data += rng.choice(TAILS)
        expect = 4
        case.shut_wr = True
    case.rounds = [(data, expect, None)]
    put_get, health = check_put_get(doc_id, body), check_health(2)
    case.check = lambda out: put_get(out) + health(out)


def fam_chunked(rng, case):
    method, target, ctype, body, limit = body_route(rng, case)
    te = b'Transfer-Encoding: chunked'
    extra = []
    kind = rng.choice(('valid', 'bad_size', 'huge_size', 'missing_crlf', 'ext', 'long_ext',
                       'trailers', 'big_trailer', 'many_trailers', 'fat_trailers', 'bad_trailer',
                       'te_variant', 'te_and_cl', 'unterminated', 'data_too_long', 'tiny_chunks',
                       'over_limit', 'long_size_line'))
    shut = False
    if kind == 'valid':
        payload = chunked(rng, body)
    elif kind == 'bad_size':
        size = rng.choice((b'zz', b'', b' 2', b'2 ', b'-2', b'0x2', b'+2', b'2.0', b'\x002', b'2\t', b'g'))
        payload = size + b'\r\n' + body + b'\r\n0\r\n\r\n'
        shut = True
    elif kind == 'huge_size':
        size = rng.choice((b'ffffffff', b'ffffffffffffffff', b'fffffffffffffffff', b'1' + b'0' * 17,
                           b'7fffffffffffffff', b'-1', b'8000000000000000', b'%x' % (limit + 1), b'ffff'))
        payload = size + b'\r\n' + body
        shut = True
    elif kind == 'missing_crlf':
        payload = rng.choice((b'%x\r\n' % len(body) + body + b'0\r\n\r\n',
                              b'%x\r\n' % len(body) + body + b'\n0\r\n\r\n',
                              b'%x\n' % len(body) + body + b'\n0\n\n',
                              b'%x\r\n' % len(body) + body + b'\r\n0\r\n'))
        shut = True
    elif kind == 'ext':
        payload = chunked(rng, body, ext=rng.choice((b';a=b', b';a', b';a="q;x"', b' ;a=b', b';a=b;c=d')))
    elif kind == 'long_ext':
        n = rng.choice((100, 4000, 5000, 70000, 300000))
        payload = chunked(rng, body, ext=rng.choice((b';' + b'e' * n, b';a=b' * (n // 4))))
    elif kind == 'trailers':
        payload = chunked(rng, body, trailers=[b'X-T%d: %d' % (i, i) for i in range(rng.randint(1, 5))])
    elif kind == 'big_trailer':
        n = rng.choice((65000, 65536, 70000, 200000, 1 << 20))
        payload = chunked(rng, body, trailers=[b'X: ' + b'y' * n])
    elif kind == 'many_trailers':
        n = rng.choice((99, 101, 150, 1000, 5000))
        payload = chunked(rng, body, trailers=[b'X-T%d: v' % i for i in range(n)])
    elif kind == 'fat_trailers':
        payload = chunked(rng, body, trailers=[b'X-T%d: ' % i + b'f' * 4000 for i in range(20)])
    elif kind == 'bad_trailer':
        payload = chunked(rng, body, trailers=[rng.choice((b'no colon', b'Content-Length: 5',
                                                           b'Transfer-Encoding: chunked', b': x',
                                                           b'X-N: a\x00b', b' folded'))])
    elif kind == 'te_variant':
        te = rng.choice((b'Transfer-Encoding: chunked, chunked', b'Transfer-Encoding: gzip, chunked',
                         b'Transfer-Encoding: chunked, gzip', b'Transfer-Encoding: CHUNKED',
                         b'Transfer-Encoding: chunked ', b'Transfer-Encoding: identity',
                         b'Transfer-Encoding: chunked;q=1', b'Transfer-Encoding: ' + b'x' * 5000,
                         b'Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked'))
        payload = chunked(rng, body)
        shut = True
    elif kind == 'te_and_cl':
        payload = chunked(rng, body)
        extra.append(b'Content-Length: %d' % rng.choice((0, 2, len(payload), len(payload) + 10)))
        shut = True
    elif kind == 'unterminated':
        payload = chunked(rng, body)[:-5]
        shut = True
    elif kind == 'data_too_long':
        payload = b'2\r\n' + body + b'xx\r\n0\r\n\r\n'
        shut = True
    elif kind == 'tiny_chunks':
        padded = body[:-1] + b' ' * rng.randint(100, 5000) + body[-1:]
        payload = b''.join(b'1\r\n' + padded[i:i + 1] + b'\r\n' for i in range(len(padded))) + b'0\r\n\r\n'
    elif kind == 'over_limit':
        big = b'{"pad":"' + b'p' * (limit + 1000) + b'"}'
        payload = chunked(rng, big)
        case.over_limit = True
    else:  # long_size_line: leading zeros make the size line long but the size small
        zeros = b'0' * rng.choice((100, 4000, 5000, 70000))
        payload = zeros + b'%x\r\n' % len(body) + body + b'\r\n0\r\n\r\n'
    data = request(method, target, case.headers(ctype, te, *extra), length=False) + payload
    case.single(data, target, shut_wr=shut)
    case.family = 'chunked/' + kind


def fam_headers(rng, case):
    target = rng.choice((b'/health', b'/collections', b'/docs/fz/h%d' % case.index))
    method = b'PUT' if target.startswith(b'/docs') else b'GET'
    body = b'{"h":1}' if method == b'PUT' else None
    kind = rng.choice(('cl_twice', 'cl_conflict', 'cl_list', 'huge_value', 'huge_name', 'near_limit',
                       'many', 'dup_host', 'no_host', 'obs_fold', 'no_colon', 'space_colon', 'empty_name',
                       'nul', 'high_bytes', 'ctl_name', 'bare_cr', 'huge_auth', 'expect', 'upgrade',
                       'ctype'))
    hdrs = case.headers()
    length = True
    shut = False
    if kind in ('cl_twice', 'cl_conflict', 'cl_list'):
        body = body or b'{"h":1}'
        n = len(body)
        hdrs += {'cl_twice': [b'Content-Length: %d' % n] * 2,
                 'cl_conflict': [b'Content-Length: %d' % n, b'Content-Length: %d' % (n + 5)],
                 'cl_list': [b'Content-Length: %d, %d' % (n, n)]}[kind]
        length = False
        shut = kind == 'cl_conflict'
    elif kind == 'huge_value':
        hdrs.append(b'X-Big: ' + b'h' * rng.choice((65000, 70000, 200000, 1 << 20)))
    elif kind == 'huge_name':
        hdrs.append(b'X' * rng.choice((5000, 70000)) + b': v')
    elif kind == 'near_limit':   # well under the limits: answered as usual
        hdrs.append(b'X-Big: ' + b'h' * (HEADER_BYTES_LIMIT - 20000))
        if target == b'/health':
            case.check = check_health(0)
    elif kind == 'many':
        hdrs += [b'X-H%d: v%d' % (i, i) for i in range(rng.choice((90, 101, 150, 1000, 5000)))]
    elif kind == 'dup_host':
        hdrs.append(b'Host: y')
    elif kind == 'no_host':
        hdrs = hdrs[1:]
    else:
        hdrs.append({'obs_fold': b'X-A: a\r\n  continued', 'no_colon': b'Bad Header Line',
                     'space_colon': b'Host : x', 'empty_name': b': x', 'nul': b'X-N: a\x00b',
                     'high_bytes': b'X-U: \xff\xfe\xc0\xaf', 'ctl_name': b'X\x01Y: z',
                     'bare_cr': b'X-A: a\rb: c',
                     'huge_auth': b'Authorization: Bearer ' + b'k' * rng.choice((10000, 70000)),
                     'expect': rng.choice((b'Expect: 100-continue', b'Expect: 999-weird')),
                     'upgrade': rng.choice((b'Connection: Upgrade\r\nUpgrade: h2c',
                                            b'Connection: Upgrade\r\nUpgrade: websocket',
                                            b'Connection: close, keep-alive, ' + b'x' * 3000)),
                     'ctype': rng.choice((b'Content-Type: ' + b'a' * 70000,
                                          b'Content-Type: multipart/form-data; boundary=x',
                                          b'Content-Type: application/json; charset=latin1'))}[kind])
    case.single(request(method, target, hdrs, body, length=length), target, shut_wr=shut)
    case.family = 'headers/' + kind


def fam_target_long(rng, case):
    n = rng.choice((TARGET_LIMIT - 300, TARGET_LIMIT + 1, 20000, 65000, 100000, 300000))
    shape = rng.choice(('id', 'param', 'segments', 'query', 'empties', 'params'))
    target = {'id': b'/docs/fz/' + b'a' * n,
              'param': b'/health?p=' + b'x' * n,
              'segments': b'/a' * (n // 2),
              'query': b'/indexes/hx/search?q=' + b'a%20' * (n // 4),
              'empties': b'/changes?' + b'&' * n,
              'params': b'/collections?' + b'a=1&' * (n // 4)}[shape]
    case.single(request(b'GET', target, case.headers()), target)
    case.family = 'target_long/' + shape


ODD_TARGETS = (
    b'docs/fz/x', b'*', b'http://x/health', b'http://x/docs/fz/x', b'https://x:1/health', b'//docs//fz//x',
    b'/docs/fz/%', b'/docs/fz/%G0', b'/docs/fz/%0', b'/docs/fz/a%00b', b'/docs/%00/x', b'/docs/fz/%C0%AF',
    b'/docs/fz/%ED%A0%80', b'/docs/fz/%FF%FE', b'/docs/fz/%F4%90%80%80', b'/docs/../../../etc/passwd',
    b'/docs/fz/..', b'/docs/fz/.', b'/docs/./fz/x', b'/./health', b'/health/', b'/health/..', b'/%68ealth',
    b'/health?', b'/health#frag', b'/health?%', b'/health?a=%FF', b'/health?%FF=1', b'/health?a=1&&&=&=&a',
    b'/docs/fz/\xff\xfe', b'/docs/fz/a\x01b', b'/docs/fz/a\tb', b'/', b'', b'?', b'/?a=1', b'/docs',
    b'/docs/fz', b'/docs/fz/x/y/z', b'/indexes/%2e%2e', b'/indexes/..', b'/indexes/hx/../hm/results',
    b'/admin', b'/admin/indexes/nope/pause', b'/admin/analyze?x', b'/docs/fz/' + b'%' * 100,
    b'/docs/fz/' + b'%25' * 200, b'/docs/fz/_bulk', b'/docs/fz/%5Fbulk', b'/docs/' + b'c' * 600 + b'/x',
    b'/docs/fz/' + b'i' * 600, b'/metrics?%ZZ', b'/changes?since=%', b'/docs/fz/x?%%%', b'/docs/fz/a b',
    b'/docs/fz/%2F..%2F..', b'/indexes/hx/search?q=%', b'/docs/fz?limit=%FF', b'/\\docs\\fz\\x')


def fam_target_odd(rng, case):
    target = rng.choice(ODD_TARGETS)
    method = rng.choice((b'GET', b'GET', b'PUT', b'POST', b'DELETE', b'HEAD'))
    body = b'{"o":1}' if method in (b'PUT', b'POST') else None
    ctype = b'Content-Type: application/json' if body else None
    case.single(request(method, target, case.headers(ctype), body), target, head=method == b'HEAD')
    case.family = 'target_odd'


H2_PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'
TLS_HELLO = (b'\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03' + bytes(range(32)) + b'\x00\x00\x20'
             + b'\xc0\x2b' * 16 + b'\x01\x00\x00\x58')


def fam_method_version(rng, case):
    r = rng.random()
    if r < 0.2:
        data = rng.choice((H2_PREFACE, TLS_HELLO, b'GET /health\r\n\r\n',
                           b'\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n',
                           b'GET /health HTTP/1.1\nHost: x\n\n', b'GET  /health  HTTP/1.1\r\nHost: x\r\n\r\n',
                           b'GET /health HTTP/1.1 extra\r\nHost: x\r\n\r\n', b' GET /health HTTP/1.1\r\n\r\n',
                           b'\x00' * 100, b'\r\n' * 5000))
        case.rounds = [(data, 1, None)]
        case.shut_wr = True
        case.allow_5xx = (501, 505)
        case.family = 'method_version/raw'
        return
    method = rng.choice(KNOWN_METHODS + (b'get', b'put', b'Get', b'PATCH', b'OPTIONS', b'TRACE', b'CONNECT',
                                         b'PROPFIND', b'FOO', b'G\x00T', b'M' * 1000, b'\xffGET', b'GET GET'))
    version = rng.choice((b'HTTP/1.1', b'HTTP/1.0', b'HTTP/2.0', b'HTTP/2', b'HTTP/1.2', b'HTTP/0.9',
                          b'HTTP/3.0', b'http/1.1', b'HTTP/1.10', b'HTTP/11', b'HTTP/', b'FTP/1.1',
                          b'HTTP/1.1\x00', b'HTTP/9.9', b''))
    target = rng.choice((b'/health', b'/collections', b'/docs/fz/m%d' % case.index, b'/indexes'))
    body = b'{"m":1}' if method.upper() in (b'PUT', b'POST') else None
    hdrs = case.headers()
    if version == b'HTTP/1.0' and rng.random() < 0.5:
        hdrs.append(b'Connection: keep-alive')
    allow = []
    if method not in KNOWN_METHODS:
        allow.append(501)
    if version not in (b'HTTP/1.1', b'HTTP/1.0'):
        allow.append(505)
    case.allow_5xx = tuple(allow)
    case.single(request(method, target, hdrs, body, version=version), target,
                head=method == b'HEAD', shut_wr=version == b'')
    case.family = 'method_version'


def fam_half_close(rng, case):
    method, target, ctype, body, _ = body_route(rng, case)
    if rng.random() < 0.3:
        data = request(method, target, case.headers(ctype, b'Transfer-Encoding: chunked'), length=False)
        data += chunked(rng, body)
    else:
        data = request(method, target, case.headers(ctype), body)
    cut = rng.choice((0, 1, rng.randrange(len(data)), data.index(b'\r\n\r\n') + 2, len(data) - 1, len(data)))
    case.single(data[:cut], target, shut_wr=True)
    case.family = 'half_close'


def fam_body_length(rng, case):
    method, target, ctype, body, limit = body_route(rng, case)
    kind = rng.choice(('short', 'short', 'long', 'zero', 'over', 'over', 'bad'))
    hdrs = case.headers(ctype)
    shut = False
    if kind == 'short':
        hdrs.append(b'Content-Length: %d' % (len(body) + rng.choice((1, 10, 1000, 100000))))
        shut = rng.random() < 0.94
        case.may_hang = not shut        # the server waits for the rest, as it should
    elif kind == 'long':
        hdrs.append(b'Content-Length: %d' % (len(body) - 1))
        body += rng.choice((b'}', b'xx', b'GET /health HTTP/1.1\r\n\r\n', b'\r\n\r\n\x00'))
    elif kind == 'zero':
        hdrs.append(b'Content-Length: 0')
    elif kind == 'over':      # refused from the headers alone: no need to send the body
        hdrs.append(b'Content-Length: %d' % rng.choice((limit + 1, 2 * limit, 10 ** 10, 2 ** 63 - 1, 2 ** 63,
                                                        2 ** 64 - 1, 2 ** 64, 10 ** 30)))
        case.over_limit = True
    else:
        hdrs.append(b'Content-Length: ' + rng.choice((b'-1', b'abc', b'05', b'+5', b'0x5', b'5.0', b'',
                                                      b' 5 ', b'5 5', b'1e3', b'\xff')))
        body = body[:5].ljust(5, b' ')
        shut = True
    case.single(request(method, target, hdrs, length=False) + body, target, shut_wr=shut)
    case.family = 'body_length/' + kind


def deep(rng):
    n = rng.choice((257, 1000, 100000))
    return rng.choice(('[' * n, '{"a":' * n, '[' * n + ']' * n, '{"a":[' * (n // 2), '{"d":' + '[' * n + '1'
                       + ']' * n + '}')).encode()


BROKEN_JSON = (b'{"a":', b'{', b'}', b'{"a" 1}', b"{'a':1}", b'{"a":1,}', b'{"a":tru}', b'{"a":"\\x"}',
               b'{"a":1}x', b'[', b'', b' ', b'\xef\xbb\xbf{}', b'{"a":"\x01"}', b'null', b'{"a":01}',
               b'{"a":-}', b'{"a":NaN}', b'{"a":1e400}', b'{"a":-1e-400}', b'{"a":1,"a":2}', b'"str"',
               b'{"s":"\xff"}', b'{"s":"\xc0\xaf"}', b'{"s":"\xed\xa0\x80"}', b'{"s":"\xf4\x90\x80\x80"}',
               b'{"s":"\xe2\x82"}', b'{"\xff":1}', b'{"s":"\\ud800"}', b'{"s":"\\udc00x"}', b'{"a":[1,2}',
               b'{"a":1}\x00', b'\x00', b'{"a":' + b' ' * 100000 + b'1}', b'{"a":"\\u00"}')


# Numbers that are hard for a parser. The store must accept those within a double's range
# (http-choices.md), and what it stores, the indexers read back.
VALID_HARD_NUMBERS = (b'0.' + b'0' * 300 + b'1', b'0.' + b'0' * 1000 + b'1', b'0.' + b'0' * 5000 + b'1',
                      b'1' * 300 + b'.5', b'2.2250738585072011e-308', b'4.9e-324', b'1.7976931348623157e308',
                      b'123456789012345678901234567890', b'-0.0e-0', b'1E+2', b'1e-0000000000000000000001',
                      b'0.' + b'0' * 5000 + b'1e5000')
HARD_NUMBERS = (b'0.' + b'0' * 300 + b'1', b'0.' + b'0' * 1000 + b'1', b'0.' + b'0' * 100000 + b'1',
                b'1' * 300 + b'.5', b'-' + b'1' * 400 + b'.5e-300', b'1' + b'0' * 5000 + b'e-5000',
                b'0.' + b'0' * 5000 + b'1e5000', b'2.2250738585072011e-308', b'2.2250738585072012e-308',
                b'4.9e-324', b'5e-325', b'1.7976931348623157e308', b'1.7976931348623158e308',
                b'123456789012345678901234567890', b'-0.0e-0', b'9' * 1000, b'9' * 100000,
                b'1e' + b'9' * 50, b'-' + b'1' * 400 + b'.5e-99999', b'1E+2', b'1e-0000000000000000000001')


def hostile_json(rng, limit):
    r = rng.random()
    if r < 0.35:
        return rng.choice(BROKEN_JSON)
    if r < 0.55:
        return deep(rng)
    if r < 0.7:
        return b'{"n":' + rng.choice(HARD_NUMBERS) + b'}'
    if r < 0.95:
        return rng.choice((b'{"s":"' + b'x' * rng.choice((100000, 300000)) + b'"}',
                           b'{"s":"' + b'\\u0000' * 100000 + b'"}',
                           b'{"s":"' + b'\\ud800' * 20000 + b'"}',
                           b'{' + b','.join(b'"k%d":%d' % (i, i) for i in range(50000)) + b'}',
                           b'{"s":"' + '\u0301'.encode() * 100000 + b'"}'))
    return b'{"pad":"' + b'p' * (limit + 1000) + b'"}'


def fam_json(rng, case):
    method, target, ctype, _, limit = body_route(rng, case)
    body = hostile_json(rng, limit)
    if target == b'/docs/fz/_bulk':
        body += b'\n'
    case.over_limit = len(body) > limit
    if rng.random() < 0.2:
        data = request(method, target, case.headers(ctype, b'Transfer-Encoding: chunked'), length=False)
        data += chunked(rng, body)
    else:
        data = request(method, target, case.headers(ctype), body)
    case.single(data, target)
    case.clean_head = True
    case.family = 'json'


def fam_bulk(rng, case):
    lines = []
    for k in range(rng.choice((1, 5, 50, 2000))):
        r = rng.random()
        if r < 0.7:
            lines.append(b'{"id":"b%d_%d","v":%d}' % (case.index, k, k))
        else:
            lines.append(rng.choice((b'{}', b'{"id":5}', b'{"id":null}', b'{"id":""}',
                                     b'{"id":"' + b'i' * 600 + b'"}', b'{"id":"_bulk"}',
                                     b'{"id":"x","_deleted":"yes"}', b'{"id":"x","_deleted":true}', b'[]',
                                     b'x', b'{"id":"\xff"}', b'', b'\r', b'{"id":"x"}\r', b'{"id":"a\x00"}',
                                     b'{"id":"x","d":' + b'[' * 1000 + b']' * 1000 + b'}',
                                     b'{"id":"x"', b'null')))
    if rng.random() < 0.1:
        lines.insert(rng.randrange(len(lines) + 1), b'{"id":"x","d":' + b'[' * 100000 + b'}')
    if rng.random() < 0.05:
        lines.append(b'{"id":"big","pad":"' + b'p' * (DOC_LIMIT + 100) + b'"}')
    if rng.random() < 0.03:
        lines += [b'{"id":"fill%d","pad":"' % i + b'p' * 500000 + b'"}' for i in range(9)]
    sep = rng.choice((b'\n', b'\r\n', b'\n\n'))
    body = sep.join(lines) + rng.choice((sep, b''))
    case.over_limit = len(body) > BULK_LIMIT
    ctype = rng.choice((b'Content-Type: application/x-ndjson', b'Content-Type: application/json', None))
    target = rng.choice((b'/docs/fz/_bulk', b'/docs/fz/%5Fbulk'))
    case.single(request(b'POST', target, case.headers(ctype), body), target)
    case.clean_head = True
    case.family = 'bulk'


QUERIES = ('(' * 100, '(' * 4000, '(' * 50000, '(' * 4000 + 'a' + ')' * 4000, ')' * 1000,
           'a AND ' * 1000 + 'a', 'NOT ' * 2000 + 'a', '"' * 1001, '"unterminated', 'a' * 5000 + '~2',
           'alpha~2', '*' * 1000, '?' * 1000, 'a*' * 1000, '*a*b*c*d*e*f*g*h*i*j*k', 'title:[a TO',
           'n:[1 TO 2', 'n:{* TO *}', 'n:>=', 'd:[9999-99-99 TO *]', 'a^99999999999999999999', 'a^0', 'a^-1',
           'a^1e999', '"a b"~99999999999999', 'a~99999', 'field:', ':', '\\', 'a\\', '+-+-a', '-' * 1000,
           '_exists_:', 'nope:x', 'tags:""', '\x00', '\U0001F600' * 1000, 'title:(' * 2000 + 'a' + ')' * 2000,
           'n:[' + '9' * 400 + ' TO *]', '"' + 'alpha ' * 2000 + '"~5', 'AND', 'OR OR OR',
           'alpha^' + '9' * 400)
BIG_NUMBERS = ('99999999999999999999999', '-1', '0', '1e3', 'abc', '10001', '10000', '', '1.5', '-0',
               '18446744073709551616', '9223372036854775808')


def fam_query(rng, case):
    r = rng.random()
    if r < 0.25:    # POST search with wrong types
        body = {'q': rng.choice(QUERIES)}
        for key in rng.sample(('limit', 'offset', 'fields', 'sort', 'facets', 'highlight', 'op', 'minEtag',
                               'waitMs', 'searchAfter', 'filter', 'extra'), rng.randint(0, 4)):
            body[key] = rng.choice((5, -1, 1.5, 1e300, 'x', [], {}, True, None, [1, [2]], '(' * 1000,
                                    10 ** 25, -(10 ** 25)))
        if 'waitMs' in body and 'minEtag' in body:
            body['waitMs'] = -1     # never a legitimate long wait
        if rng.random() < 0.3:
            body['q'] = '(' * rng.choice((50000, 200000))
        data = json.dumps(body).encode()
        target = rng.choice((b'/indexes/hx/search', b'/indexes/hm/search', b'/indexes/nope/search'))
        case.single(request(b'POST', target, case.headers(b'Content-Type: application/json'), data), target)
        case.clean_head = True
        case.family = 'query/post'
        return
    params = []
    route = rng.choice(('search', 'search', 'search', 'results', 'changes', 'list'))
    if route == 'search':
        path = rng.choice(('/indexes/hx/search', '/indexes/hm/search'))
        params.append(('q', rng.choice(QUERIES)))
        for key in rng.sample(('limit', 'offset', 'sort', 'fields', 'highlight', 'facets', 'op', 'filter',
                               'searchAfter', 'limt', 'minEtag'), rng.randint(0, 4)):
            params.append((key, rng.choice(BIG_NUMBERS + ('-', '--n', 'n,n,n', ',', 'nope', '_score', '*',
                                                          '-_score', 'body', 'tags', 'xor', '[', '[1,"a"]',
                                                          '[' * 1000, '(' * 1000))))
        if rng.random() < 0.3:
            params.append(('waitMs', rng.choice(('-1', '0', 'abc', '1.5', '-99999999999999999999'))))
    elif route == 'results':
        path = rng.choice(('/indexes/hm/results', '/indexes/hx/results'))
        for key in rng.sample(('month', 'month.gte', 'month.gt', 'month.lt', 'groupLevel', 'sort', 'limit',
                               'offset', 'nope', 'total.gte'), rng.randint(1, 4)):
            params.append((key, rng.choice(BIG_NUMBERS + ('2024-01', '-total', '---', '\uffff'))))
    elif route == 'changes':
        path = '/changes'
        if rng.random() < 0.1:
            params += [('since', '0'), ('waitMs', '99999999999999999999')]   # data exists: answers at once
        else:
            params += [('since', rng.choice(BIG_NUMBERS)), ('limit', rng.choice(BIG_NUMBERS))]
            if rng.random() < 0.5:
                params.append(('waitMs', rng.choice(('-1', 'abc', '0', '1.5', '-99999999999999999999'))))
            if rng.random() < 0.3:
                params.append(('collection', rng.choice(('', 'fz', 'x' * 600, '\ud7ff'))))
    else:
        path = '/docs/fz'
        params += [('after', rng.choice(('', 'z' * 600, '\x00'))), ('limit', rng.choice(BIG_NUMBERS))]
    raw_parens = rng.random() < 0.3   # unencoded parentheses: a deep query in a short target
    query = '&'.join('%s=%s' % (urllib.parse.quote(k), urllib.parse.quote(v, safe='()' if raw_parens else ''))
                     for k, v in params)
    target = (path + '?' + query).encode()
    case.single(request(b'GET', target, case.headers()), target)
    case.clean_head = len(target) < 8000
    case.family = 'query/' + route


def mutate_definition(rng):
    definition = json.loads(json.dumps(rng.choice((SEARCH_DEF, MAPREDUCE_DEF))))
    definition['collection'] = 'fz'
    bad = (5, -1, 1e300, 'x', '', [], {}, True, None, [1, [2]], 'x' * 100000, 10 ** 25, 0, 1e-300)
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.3:
            definition[rng.choice(('type', 'collection', 'fields', 'store', 'map', 'groupBy', 'reduce',
                                   'extra'))] = rng.choice(bad)
        elif r < 0.55 and 'fields' in definition and isinstance(definition['fields'], dict):
            field = rng.choice(('title', 'body', 'tags', 'n', 'new', ''))
            spec = definition['fields'].setdefault(field, {})
            if isinstance(spec, dict):
                spec[rng.choice(('analyzer', 'boost', 'type', 'facet', 'extra'))] = rng.choice(
                    bad + ('klingon', 'keyword', 'number', 1e30, 1e31, float('1e308')))
        elif r < 0.8:
            definition['map'] = {'m': rng.choice((
                '(' * 50000 + 'a' + ')' * 50000, 'substr(' * 5000, 'a+' * 50000 + 'a', "'unterminated",
                'substr(d, 0, ' + '9' * 400 + ')', 'date_trunc(\'x\', d)', 'unwind(unwind(unwind(a)))',
                'if(', '\x00', '1/0', 'lower(' * 2000 + 'a' + ')' * 2000, 'nope(a)', 'a.' * 5000 + 'b',
                'concat(' + ','.join(['a'] * 10000) + ')'))}
            definition['groupBy'] = rng.choice((['m'], ['nope'], 'm', [5], [], ['m'] * 1000))
            definition['reduce'] = rng.choice(({'c': 'count()'}, {'s': 'sum(' * 3000}, {'s': 5}, [],
                                               {'x': 'median(m)'}))
            definition['type'] = 'mapreduce'
            definition.pop('fields', None)
            definition.pop('store', None)
        else:
            definition['fields'] = {'f%d' % i: {'analyzer': 'standard'} for i in range(rng.choice((0, 2000)))}
    return json.dumps(definition).encode()


def fam_index_def(rng, case):
    name = rng.choice((b'hz0', b'hz1', b'hz2', b'hz3', b'..', b'.x', b'-x', b'a' * 200, b'%00', b'%2F',
                       b'a%20b', b'%FF'))
    if rng.random() < 0.1:
        body = rng.choice((b'[]', b'"x"', b'5', b'null', deep(rng)))
    else:
        body = mutate_definition(rng)
    target = b'/indexes/' + name
    case.single(request(b'PUT', target, case.headers(b'Content-Type: application/json'), body), target)
    case.clean_head = b'%FF' not in name and b'%00' not in name
    case.family = 'index_def'


def fam_analyze(rng, case):
    text = rng.choice(('hello', '', 'x' * 200000, words(rng, 1000, 5000), '\u0301' * 50000,
                       '\u65e5\u672c\u8a9e' * 30000, '\U0001F600' * 20000, '\x00' * 1000,
                       'a\u200db' * 10000, '\ufdfa' * 10000))
    doc = {'analyzer': rng.choice(('standard', 'english', 'folding', 'keyword', 'german', 'klingon', '', 5,
                                   None, [], 'standard' * 1000)),
           'text': rng.choice((text, text, 5, None, ['a'], {'a': 1}, True))}
    if rng.random() < 0.2:
        del doc[rng.choice(('analyzer', 'text'))]
    if rng.random() < 0.1:
        doc['extra'] = 1
    body = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode()
    if rng.random() < 0.15:
        body = body.replace(b'hello', b'he\xffllo').replace(b'"text"', b'"te\xc0xt"')
    if rng.random() < 0.1:
        body = b'{"analyzer":"standard","text":"\\ud800' + b'x' * 100 + b'"}'
    case.single(request(b'POST', b'/admin/analyze', case.headers(b'Content-Type: application/json'), body),
                b'/admin/analyze')
    case.clean_head = True
    case.family = 'analyze'


def fam_mutate(rng, case):
    method, target, ctype, body, _ = body_route(rng, case)
    if rng.random() < 0.3:
        head = request(method, target, case.headers(ctype, b'Transfer-Encoding: chunked'), length=False)
        data = bytearray(head + chunked(rng, body, trailers=[b'X-T: 1']))
    else:
        data = bytearray(request(method, target, case.headers(ctype), body))
    for _ in range(rng.randint(1, 5)):
        if not data:
            break
        i = rng.randrange(len(data))
        op = rng.random()
        if op < 0.3:
            data[i] = rng.randrange(256)
        elif op < 0.55:
            data[i:i] = rng.choice((b'\r\n', b'\r', b'\n', b'\x00', b':', b' ', b'%', b'\xff', b'chunked',
                                    b'\r\n\r\n', b'0\r\n', b'9' * 30, b';' * 50))
        elif op < 0.75:
            del data[i:i + rng.randint(1, 20)]
        elif op < 0.9:
            j = min(len(data), i + rng.randint(1, 200))
            data[i:i] = data[i:j] * rng.randint(2, 50)
        else:
            del data[i:]
    case.rounds = [(bytes(data), 1, None)]
    case.shut_wr = True
    case.allow_5xx = (501, 505)   # a mutation may leave an unknown method or version
    case.family = 'mutate'


def fam_random(rng, case):
    data = rng.randbytes(rng.randint(1, 3000))
    if rng.random() < 0.5:
        data = rng.choice((b'GET ', b'PUT /docs/fz/r HTTP/1.1\r\n',
                           b'POST /docs/fz/_bulk HTTP/1.1\r\nHost: x\r\n')) + data
    case.rounds = [(data, 1, None)]
    case.shut_wr = True
    case.allow_5xx = (501, 505)
    case.family = 'random'


FAMILIES = ((fam_wellformed, 12), (fam_chunked, 13), (fam_headers, 9), (fam_target_long, 4),
            (fam_target_odd, 7), (fam_method_version, 6), (fam_pipelined, 6), (fam_half_close, 5),
            (fam_body_length, 6), (fam_json, 9), (fam_bulk, 5), (fam_query, 8), (fam_index_def, 3),
            (fam_analyze, 3), (fam_random, 2), (fam_mutate, 2))


def make_case(index):
    rng = random.Random('%d:%d' % (SEED, index))
    case = Case(index, rng)
    fam = rng.choices([f for f, _ in FAMILIES], weights=[w for _, w in FAMILIES])[0]
    case.family = fam.__name__[4:]
    fam(rng, case)
    return case


def case_problems(case, out):
    """Everything wrong with how the server answered `case` (empty: fine)."""
    if out.connect_error:
        return ['could not connect: ' + out.connect_error]
    problems = []
    if out.malformed:
        problems.append('the answer is not HTTP: ' + out.malformed)
    for r in out.replies:
        if r.status >= 500 and r.status not in case.allow_5xx:
            problems.append('answered %d: %r' % (r.status, r.body[:300]))
        elif r.status >= 400 and r.complete and not r.head and error_of(r) is None:
            problems.append('answered %d without the error JSON: %r' % (r.status, r.body[:300]))
    if out.timed_out and not case.may_hang:
        problems.append('neither answered nor closed within %.0f s (%d answers)'
                        % (READ_TIMEOUT_S, len(out.replies)))
    if case.keyed and case.auth != 'right' and case.target is not None:
        allowed = {401} if case.auth == 'none' else {401, 403}
        if case.over_limit:
            allowed.add(413)
        is_health = b'health' in urllib.parse.unquote_to_bytes(case.target).lower()
        # The web console's files need no key either (API.md): GET / and
        # /ui/<file>, whatever form the target takes.
        path = urllib.parse.unquote_to_bytes(case.target).split(b'?')[0].split(b'#')[0]
        if b'://' in path:
            path = b'/' + path.split(b'://', 1)[1].partition(b'/')[2]
        is_console = path == b'/' or (path.startswith(b'/ui/') and path.count(b'/') == 2)
        for r in out.replies:
            if is_console:
                continue
            if 200 <= r.status < 300 and not is_health:
                problems.append('answered %d without the API key' % r.status)
            elif case.clean_head and r.status not in allowed:
                problems.append('answered %d, expected %s for a request without the right key'
                                % (r.status, sorted(allowed)))
    if case.check is not None and not problems:
        problems += case.check(out)
    return problems


# ---------------------------------------------------------------------------
# Helpers on server processes

def rss_kib(pid):
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1])
    raise AssertionError('no VmRSS for pid %d' % pid)


def cpu_seconds(pid):
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rpartition(')')[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def client_for(server, key):
    return server.client(timeout=30.0, api_key=key)


def health_status(server, timeout=5.0):
    out = exchange(server.host, server.port, [(request(b'GET', b'/health', [b'Host: x']), 1, None)],
                   quiet=timeout)
    return out.replies[0].status if out.replies else None


def raise_own_fd_limit(at_least):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < at_least:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class FdLimitedServer(CorvidServer):
    """A server whose RLIMIT_NOFILE is `fd_limit` (soft and hard) from exec on."""

    def __init__(self, fd_limit, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fd_limit = fd_limit

    def start(self):
        # The harness owns the Popen call; give it a preexec_fn for this start only.
        real_popen = subprocess.Popen
        limit = self.fd_limit

        def popen(*args, **kwargs):
            kwargs['preexec_fn'] = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
            return real_popen(*args, **kwargs)
        subprocess.Popen = popen
        try:
            return super().start()
        finally:
            subprocess.Popen = real_popen


# ---------------------------------------------------------------------------
# 1. The issue's request, byte for byte.

ISSUE_REQUEST = (b'PUT /docs/c/1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n'
                 b'2\r\n{}\r\n0\r\nX: ' + b'y' * 70000 + b'\r\n\r\n')


class TrailerCrashRegressionTest(unittest.TestCase):
    """A 70 KB chunked trailer aborted the process. Each test has its own server."""

    def start_server(self, args=()):
        server = CorvidServer(list(args))
        self.addCleanup(server.cleanup)
        server.start()
        return server

    def assertSurvives(self, server, data, key, allowed=(400, 401, 431)):
        out = one(server, data, quiet=10.0)
        time.sleep(0.3)
        self.assertTrue(server.running(), 'the server died on the request; its answer %s; stderr:\n%s'
                        % (out.describe(), server.stderr_tail()))
        if out.replies:
            reply = out.replies[0]
            self.assertIn(reply.status, allowed, out.describe())
            self.assertIsNotNone(error_of(reply), 'not the error JSON: ' + out.describe())
        else:
            self.assertTrue(out.closed, 'neither answered nor closed: ' + out.describe())
        self.assertEqual(health_status(server), 200)
        client = client_for(server, key)
        try:
            resp = client.get('/docs/c/1')
            self.assertEqual(resp.status, 404, 'a refused request wrote its document: ' + resp.describe())
        finally:
            client.close()
        server.stop()   # and it still shuts down cleanly (exit code 0)
        return out

    def test_issue_request(self):
        server = self.start_server()
        self.assertSurvives(server, ISSUE_REQUEST, None)

    def test_issue_request_with_the_right_key(self):
        server = self.start_server(['--api-key', KEY])
        data = ISSUE_REQUEST.replace(b'Host: x\r\n', b'Host: x\r\nAuthorization: Bearer secret\r\n')
        self.assertSurvives(server, data, KEY, allowed=(400, 431))

    def test_issue_request_without_the_key(self):
        server = self.start_server(['--api-key', KEY])
        self.assertSurvives(server, ISSUE_REQUEST, KEY)

    def test_small_trailers_are_ignored(self):
        # The positive control: a trailer within the limits is accepted and ignored.
        server = self.start_server()
        data = (b'PUT /docs/c/1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n'
                b'2\r\n{}\r\n0\r\nX: small\r\nY: also\r\n\r\n')
        out = one(server, data)
        self.assertTrue(out.replies and out.replies[0].status == 201, out.describe())
        client = client_for(server, None)
        try:
            resp = client.get('/docs/c/1')
            self.assertEqual((resp.status, resp.body), (200, b'{}'), resp.describe())
        finally:
            client.close()
        server.stop()


# ---------------------------------------------------------------------------
# The limits, one by one, with their exact answers.

class LimitsTest(CorvidTestCase):
    server_args = ['--api-key', KEY] + LIMIT_ARGS
    client_kwargs = {'api_key': KEY}

    def setUp(self):
        super().setUp()
        if not self.server.running():   # an earlier test killed it (its tearDown said so): go on with a fresh one
            self.server.kill()
            self.server.start()
            type(self).c = self.server.client(**self.client_kwargs)

    def tearDown(self):
        self.assertTrue(self.server.running(), 'the server died; stderr:\n' + self.server.stderr_tail())
        self.assertEqual(health_status(self.server), 200)

    def send(self, data, **kwargs):
        return one(self.server, data, **kwargs)

    def assertRawError(self, out, status, code, closed=None):
        self.assertTrue(out.replies, 'no answer: ' + out.describe())
        reply = out.replies[0]
        self.assertEqual(reply.status, status, out.describe())
        err = error_of(reply)
        self.assertIsNotNone(err, 'not the error JSON: ' + out.describe())
        self.assertEqual(err['code'], code, out.describe())
        if closed:
            self.assertTrue(out.closed or reply.headers.get('connection', '').lower() == 'close',
                            'connection kept open after ' + out.describe())

    def assertAbsent(self, coll, doc_id):
        resp = self.c.get('/docs/%s/%s' % (coll, doc_id))
        self.assertEqual(resp.status, 404, resp.describe())

    def put_chunked(self, doc_id, payload, headers=(), key=KEY):
        return self.send(request(b'PUT', b'/docs/lim/' + doc_id.encode(),
                                 auth_headers(key) + [b'Transfer-Encoding: chunked'] + list(headers),
                                 length=False) + payload)

    # -- header block ----------------------------------------------------------
    def test_header_bytes_over_limit_431(self):
        big = b'X-Big: ' + b'h' * (HEADER_BYTES_LIMIT + 4000)
        out = self.send(request(b'GET', b'/collections', auth_headers(KEY) + [big]))
        self.assertRawError(out, 431, 'headers_too_large')

    def test_header_count_over_limit_431(self):
        hdrs = auth_headers(KEY) + [b'X-H%d: v' % i for i in range(150)]
        self.assertRawError(self.send(request(b'GET', b'/collections', hdrs)), 431, 'headers_too_large')

    def test_header_count_under_limit_ok(self):
        hdrs = auth_headers(KEY) + [b'X-H%d: v' % i for i in range(HEADER_COUNT_LIMIT - 10)]
        out = self.send(request(b'GET', b'/collections', hdrs))
        self.assertTrue(out.replies and out.replies[0].status == 200, out.describe())

    def test_trailer_count_over_limit_431(self):
        payload = b'2\r\n{}\r\n0\r\n' + b''.join(b'X-T%d: v\r\n' % i for i in range(150)) + b'\r\n'
        self.assertRawError(self.put_chunked('tc', payload), 431, 'headers_too_large')
        self.assertAbsent('lim', 'tc')

    def test_trailer_bytes_over_limit_431(self):
        payload = b'2\r\n{}\r\n0\r\n' + b''.join(b'X-T%d: ' % i + b'f' * 4000 + b'\r\n'
                                                 for i in range(20)) + b'\r\n'
        self.assertRawError(self.put_chunked('tb', payload), 431, 'headers_too_large')
        self.assertAbsent('lim', 'tb')

    # -- request target ------------------------------------------------------------
    def test_target_over_limit_414(self):
        target = b'/changes?x=' + b'a' * (TARGET_LIMIT + 1000)
        self.assertRawError(self.send(request(b'GET', target, auth_headers(KEY))), 414, 'uri_too_long')

    def test_target_under_limit_ok(self):
        target = b'/changes?x=' + b'a' * (TARGET_LIMIT - 1000)
        out = self.send(request(b'GET', target, auth_headers(KEY)))
        self.assertTrue(out.replies and out.replies[0].status == 200, out.describe())

    # -- chunk framing -------------------------------------------------------------
    def test_long_chunk_extension_400(self):
        payload = b'2;' + b'e' * (CHUNK_EXTENSION_LIMIT + 1000) + b'\r\n{}\r\n0\r\n\r\n'
        self.assertRawError(self.put_chunked('ext', payload), 400, 'bad_request', closed=True)
        self.assertAbsent('lim', 'ext')

    def test_chunk_size_line_beyond_the_buffer_431(self):
        # A chunk-size line is buffered whole before it is parsed; what the
        # server holds of it is bounded by its read buffer (header limit +
        # 64 KiB), past which the request is refused (docs/http-choices.md).
        payload = b'0' * (HEADER_BYTES_LIMIT + 70 * 1024) + b'2\r\n{}\r\n0\r\n\r\n'
        self.assertRawError(self.put_chunked('size', payload), 431, 'headers_too_large', closed=True)
        self.assertAbsent('lim', 'size')

    def test_leading_zeros_in_a_chunk_size_accepted(self):
        # RFC 9112: chunk-size = 1*HEXDIG, so 000...02 is 2.
        out = self.put_chunked('zeros', b'0' * 5000 + b'2\r\n{}\r\n0\r\n\r\n')
        self.assertTrue(out.replies and out.replies[0].status == 201, out.describe())

    def test_short_chunk_extension_accepted(self):
        out = self.put_chunked('okext', b'2;a=b\r\n{}\r\n0\r\n\r\n')
        self.assertTrue(out.replies and out.replies[0].status == 201, out.describe())

    def test_chunk_size_overflow_rejected(self):
        for size in (b'fffffffffffffffff', b'1' + b'0' * 20, b'-2'):
            with self.subTest(size=size):
                out = self.put_chunked('ovf', size + b'\r\n{}\r\n0\r\n\r\n')
                self.assertTrue(out.replies, out.describe())
                self.assertIn(out.replies[0].status, (400, 413), out.describe())
        self.assertAbsent('lim', 'ovf')

    # -- bodies --------------------------------------------------------------------
    def test_chunked_document_over_limit_413(self):
        body = b'{"pad":"' + b'p' * (DOC_LIMIT + 100000) + b'"}'
        out = self.put_chunked('big', chunked(random.Random(1), body), [b'Content-Type: application/json'])
        self.assertRawError(out, 413, 'body_too_large', closed=True)
        self.assertAbsent('lim', 'big')

    def test_chunked_bulk_over_limit_413(self):
        line = b'{"id":"%d","pad":"' + b'p' * 100000 + b'"}\n'
        body = b''.join(line % i for i in range(BULK_LIMIT // 100000 + 5))
        data = request(b'POST', b'/docs/lim/_bulk', auth_headers(KEY) + [b'Transfer-Encoding: chunked'],
                       length=False) + chunked(random.Random(2), body)
        self.assertRawError(self.send(data), 413, 'body_too_large', closed=True)
        self.assertAbsent('lim', '0')

    def test_content_length_over_limit_413_before_the_body(self):
        # Only the head is sent: the answer must come from it alone.
        head = request(b'PUT', b'/docs/lim/cl', auth_headers(KEY) + [b'Content-Length: %d' % (DOC_LIMIT + 1)],
                       length=False)
        self.assertRawError(self.send(head, quiet=3.0), 413, 'body_too_large', closed=True)

    def test_413_names_the_limit_of_its_route(self):
        # The message named "the limit of 0 bytes" when Content-Length was
        # over the bulk limit (refused before the route's limit was known).
        doc = 'for a document (--max-doc-bytes)'
        bulk = 'for a bulk body (--max-bulk-bytes)'
        for method, target, size, limit, what in ((b'PUT', b'/docs/lim/cl', DOC_LIMIT + 1, DOC_LIMIT, doc),
                                                  (b'PUT', b'/docs/lim/cl', BULK_LIMIT + 1, DOC_LIMIT, doc),
                                                  (b'PUT', b'/docs/lim/cl', 1 << 62, DOC_LIMIT, doc),
                                                  (b'POST', b'/docs/lim/_bulk', BULK_LIMIT + 1, BULK_LIMIT, bulk),
                                                  (b'POST', b'/docs/lim/%5Fbulk', 1 << 40, BULK_LIMIT, bulk),
                                                  (b'POST', b'/indexes/i/search', BULK_LIMIT + 1, 1 << 20,
                                                   'not a document')):
            with self.subTest(method=method, target=target, size=size):
                head = request(method, target, auth_headers(KEY) + [b'Content-Length: %d' % size], length=False)
                out = self.send(head, quiet=3.0)
                self.assertRawError(out, 413, 'body_too_large', closed=True)
                message = error_of(out.replies[0])['message']
                self.assertIn('exceeds the limit of %d bytes (Content-Length %d)' % (limit, size), message)
                self.assertIn(what, message)
        self.assertAbsent('lim', 'cl')

    def test_unauthorized_before_too_large(self):
        # API.md: 401/403 for a missing or wrong key; a client without the
        # key learns nothing of the limits (it got 413 first), and its body
        # is still never read.
        for key, status in ((None, 401), ('wrong', 403)):
            for method, target, size in ((b'PUT', b'/docs/lim/u', DOC_LIMIT + 1),
                                         (b'PUT', b'/docs/lim/u', BULK_LIMIT + 1),
                                         (b'POST', b'/docs/lim/_bulk', BULK_LIMIT + 1),
                                         (b'POST', b'/indexes/i/search', 1 << 40)):
                with self.subTest(key=key, target=target, size=size):
                    head = request(method, target, auth_headers(key) + [b'Content-Length: %d' % size],
                                   length=False) + b'{"a":"' + b'x' * 100
                    t0 = time.monotonic()
                    out = self.send(head, quiet=3.0)
                    self.assertRawError(out, status, 'unauthorized' if status == 401 else 'forbidden', closed=True)
                    self.assertLess(time.monotonic() - t0, 2.5, 'answered only after waiting for the body')
        self.assertAbsent('lim', 'u')

    # -- malformed -----------------------------------------------------------------
    def test_malformed_http_400_and_closed(self):
        auth = b'Authorization: Bearer ' + KEY.encode() + b'\r\n'   # so that the key is not what fails
        for data in (b'GET /health HTTP/1.1\r\nBad Header Line\r\n\r\n',
                     b'GET /collections HTTP/1.1\r\nHost: x\r\n' + auth + b'Content-Length: abc\r\n\r\n',
                     b'PUT /docs/lim/m HTTP/1.1\r\nHost: x\r\n' + auth
                     + b'Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n'):
            with self.subTest(data=data[:40]):
                self.assertRawError(self.send(data), 400, 'bad_request', closed=True)

    def test_json_too_deep_400(self):
        for body in (b'{"a":' * 256 + b'{}' + b'}' * 256, b'[' * 100000, b'{"a":' + b'[' * 100000 + b'}'):
            with self.subTest(size=len(body)):
                out = self.send(request(b'PUT', b'/docs/lim/deep', auth_headers(KEY)
                                        + [b'Content-Type: application/json'], body))
                self.assertRawError(out, 400, 'too_deep')
        self.assertAbsent('lim', 'deep')

    def test_deep_field_path_in_a_definition_costs_its_size(self):
        # A path of 100,000 components (200 KB of definition) was once
        # expanded into every dotted prefix: 10 GB and minutes for one
        # request (the hostile stream's 'a.' * 5000 took 0.8 s under ASan).
        path = 'a.' * 100000 + 'b'
        definitions = (
            {'type': 'mapreduce', 'collection': 'deep', 'map': {'m': path}, 'groupBy': ['m'],
             'reduce': {'c': 'count()'}},
            {'type': 'search', 'collection': 'deep', 'fields': {path: {'analyzer': 'standard'}}})
        rss_before = rss_kib(self.server.proc.pid)
        for n, definition in enumerate(definitions):
            with self.subTest(type=definition['type']):
                body = json.dumps(definition).encode()
                t0 = time.monotonic()
                out = self.send(request(b'PUT', b'/indexes/deep%d' % n, auth_headers(KEY)
                                        + [b'Content-Type: application/json'], body))
                elapsed = time.monotonic() - t0
                self.assertTrue(out.replies, 'no answer: ' + out.describe())
                self.assertIn(out.replies[0].status, (200, 201), out.describe())
                self.assertLess(elapsed, 5.0, 'a %d-byte definition took %.1f s' % (len(body), elapsed))
        grown = rss_kib(self.server.proc.pid) - rss_before
        print('\ndeep field paths: RSS grew %d KiB' % grown)
        self.assertLess(grown, 64 * 1024, 'two 200 KB definitions grew RSS by %d KiB' % grown)
        for n in range(len(definitions)):
            self.assertIn(self.c.delete('/indexes/deep%d' % n).status, (200, 204))

    # -- the key is checked from the head, before the body is read ----------------------
    def test_unauthenticated_body_not_read(self):
        cases = ((None, 401, b'PUT', b'/docs/lim/u', b'Content-Length: %d' % (DOC_LIMIT - 10)),
                 (b'wrong', 403, b'PUT', b'/docs/lim/u', b'Content-Length: %d' % (DOC_LIMIT - 10)),
                 (None, 401, b'POST', b'/docs/lim/_bulk', b'Content-Length: %d' % (BULK_LIMIT - 10)),
                 (None, 401, b'PUT', b'/docs/lim/u', b'Transfer-Encoding: chunked'))
        for key, status, method, target, framing in cases:
            with self.subTest(key=key, target=target, framing=framing):
                hdrs = auth_headers(key.decode() if key else None) + [framing]
                # The head and the start of the body; the rest never comes.
                data = request(method, target, hdrs, length=False) + (b'1000\r\n' if b'chunked' in framing
                                                                     else b'') + b'{"a":"' + b'x' * 100
                t0 = time.monotonic()
                out = self.send(data, quiet=3.0)
                self.assertRawError(out, status, 'unauthorized' if status == 401 else 'forbidden')
                self.assertLess(time.monotonic() - t0, 2.5, 'answered only after waiting for the body')
                self.assertTrue(out.closed or out.replies[0].headers.get('connection', '').lower() == 'close',
                                'the connection stays open for a body no one will read: ' + out.describe())
        self.assertAbsent('lim', 'u')

    def test_unauthenticated_large_body_401_and_closed(self):
        body = b'{"id":"u"}\n' * (3 * 1024 * 1024 // 11)
        out = self.send(request(b'POST', b'/docs/lim/_bulk', [b'Host: x'], body), quiet=10.0)
        self.assertRawError(out, 401, 'unauthorized', closed=True)


class StoredHostileDocumentsTest(CorvidTestCase):
    """What the store accepts, the indexers read back: hard numbers must not crash them
    (`{"n":0.<700 zeros>1}` once killed the map/reduce indexer)."""

    def call(self, method, *args):
        """self.c.<method>(*args), failing with the exit code if the server died."""
        try:
            return getattr(self.c, method)(*args)
        except (OSError, http.client.HTTPException):
            time.sleep(0.3)
            if not self.server.running():
                self.fail('the server died (exit code %s) indexing the documents; stderr:\n%s'
                          % (self.server.proc.returncode, self.server.stderr_tail()))
            raise

    def test_hard_numbers_indexed(self):
        c = self.coll()
        definitions = {c + '_m': dict(FZ_MAPREDUCE_DEF, collection=c),
                       c + '_s': dict(FZ_SEARCH_DEF, collection=c)}
        for name, definition in definitions.items():
            resp = self.call('put', '/indexes/' + name, json.dumps(definition))
            self.assertEqual(resp.status, 201, resp.describe())
        accepted = 0
        for i, number in enumerate(HARD_NUMBERS):
            resp = self.call('put', '/docs/%s/n%d' % (c, i), b'{"n":' + number + b',"s":"x"}')
            self.assertIn(resp.status, (200, 201, 400), resp.describe())
            accepted += resp.status != 400
        self.assertGreater(accepted, len(HARD_NUMBERS) // 2, 'most of these numbers are valid JSON doubles')
        etag = self.call('last_etag')
        time.sleep(0.5)
        for name, route in ((c + '_m', 'results?'), (c + '_s', 'search?q=*&')):
            self.assertTrue(self.server.running(), 'the server died indexing the documents; stderr:\n'
                            + self.server.stderr_tail())
            resp = self.call('get', '/indexes/%s/%sminEtag=%d&waitMs=10000' % (name, route, etag))
            self.assertEqual(resp.status, 200, resp.describe())
            self.assertFalse(resp.json['stale'], resp.describe())
        resp = self.call('get', '/indexes/%s_s/search?q=*&limit=0' % c)
        self.assertEqual(resp.json['total'], accepted, resp.describe())


# ---------------------------------------------------------------------------
# 2 and 3. The seeded hostile stream against a keyed and an open server.

class HostileStreamTest(unittest.TestCase):
    RECENT = 12     # requests remembered per server for the report of a death

    @classmethod
    def setUpClass(cls):
        cls.servers = {}
        try:
            for keyed in (True, False):
                args = (['--api-key', KEY] if keyed else []) + LIMIT_ARGS
                server = CorvidServer(args)
                cls.servers[keyed] = server
                server.start()
        except BaseException:
            for server in cls.servers.values():
                server.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            for server in cls.servers.values():
                if server.running():
                    server.stop()
        finally:
            for server in cls.servers.values():
                server.cleanup()

    def prepare(self, server, key):
        """Indexes, documents, the known document and a warm-up; returns (etag, rss)."""
        client = client_for(server, key)
        try:
            for name, definition in (('hx', SEARCH_DEF), ('hm', MAPREDUCE_DEF),
                                     ('fzs', FZ_SEARCH_DEF), ('fzm', FZ_MAPREDUCE_DEF)):
                resp = client.put('/indexes/' + name, json.dumps(definition))
                self.assertEqual(resp.status, 201, resp.describe())
            rng = random.Random(SEED)
            docs = b''.join(json.dumps(search_doc(rng, i)).encode() + b'\n' for i in range(60))
            resp = client.post('/docs/hc/_bulk', docs, content_type='application/x-ndjson')
            self.assertEqual(resp.status, 200, resp.describe())
            resp = client.put('/docs/known_intact/k1', KNOWN_DOC)
            self.assertEqual(resp.status, 201, resp.describe())
            etag = resp.header('ETag')
        finally:
            client.close()
        # Warm-up: the kinds of work the stream does, from 4 connections at once,
        # so that the baseline RSS already holds the allocator's working set.
        errors = []

        def warm(t):
            c = client_for(server, key)
            r = random.Random(t)
            bulk = b''.join(b'{"id":"b%d","p":"%s"}\n' % (k, b'p' * 2000) for k in range(300))
            try:
                for i in range(25):
                    answers = [c.put('/docs/warm/%d_%d' % (t, i), random_doc(r, big=i % 3 == 0)),
                               c.get('/docs/warm/%d_%d' % (t, i)),
                               c.get('/indexes/hx/search?facets=tags&highlight=body&q=' + WORDS[i % 8]),
                               c.post('/admin/analyze',
                                      json.dumps({'analyzer': 'english', 'text': words(r, 100, 500)}))]
                    if i % 5 == 0:
                        answers += [c.post('/docs/warm/_bulk', bulk, content_type='application/x-ndjson'),
                                    c.put('/docs/warm/big', b'{"pad":"' + b'p' * (DOC_LIMIT - 100) + b'"}')]
                    errors.extend(a.describe() for a in answers if a.status not in (200, 201))
            except Exception as e:    # reported below, in the test's thread
                errors.append(repr(e))
            finally:
                c.close()
        threads = [threading.Thread(target=warm, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [], 'warm-up requests failed')
        time.sleep(1.0)
        return etag, rss_kib(server.proc.pid)

    def run_stream(self, indices):
        """Sends the cases; returns (problems, {keyed: death report}, outcome counts)."""
        problems = []
        counts = collections.Counter()
        recent = {keyed: collections.deque(maxlen=self.RECENT) for keyed in self.servers}
        lock = threading.Lock()
        stop = threading.Event()
        deaths = {}     # keyed -> report
        done = [0]

        def worker(mine):
            for i in mine:
                if stop.is_set():
                    return
                case = make_case(i)
                server = self.servers[case.keyed]
                with lock:
                    recent[case.keyed].append(case.describe(160))
                out = exchange(server.host, server.port, case.rounds, shut_wr=case.shut_wr)
                found = case_problems(case, out)
                state = ('%d' % out.replies[-1].status if out.replies
                         else 'closed' if out.closed else 'timeout' if out.timed_out else 'other')
                with lock:
                    counts[(case.family.split('/')[0], state)] += 1
                    done[0] += 1
                    if done[0] % 100 == 0 or found or not out.replies:
                        for keyed, srv in self.servers.items():
                            if not srv.running() and keyed not in deaths:
                                deaths[keyed] = (
                                    'the %s server died (exit code %s), seen after case #%d; the last '
                                    'requests sent to it (one of the latest killed it, or, for a '
                                    'background indexer, stored the document that did):\n  %s\n'
                                    'replay: CORVID_SEED=%d CORVID_HOSTILE_CASE=<n>\nstderr tail:\n%s'
                                    % ('keyed' if keyed else 'open', srv.proc.returncode, i,
                                       '\n  '.join(recent[keyed]), SEED, srv.stderr_tail(1500)))
                                stop.set()
                    if found and not stop.is_set():   # after a death, only the death counts
                        problems.append('%s\n    -> %s\n    got %s\n    replay: CORVID_SEED=%d '
                                        'CORVID_HOSTILE_CASE=%d' % (case.describe(), '; '.join(found),
                                                                     out.describe()[:500], SEED, i))

        threads = [threading.Thread(target=worker, args=(indices[t::THREADS],)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return problems, deaths, counts

    def test_hostile_stream(self):
        prepared = {keyed: self.prepare(server, KEY if keyed else None)
                    for keyed, server in self.servers.items()}
        indices = [int(ONLY_CASE)] if ONLY_CASE is not None else list(range(TOTAL))
        t0 = time.monotonic()
        problems, deaths, counts = self.run_stream(indices)
        elapsed = time.monotonic() - t0
        summary = collections.defaultdict(list)
        for (family, state), n in sorted(counts.items()):
            summary[family].append('%s:%d' % (state, n))
        print('\nhostile stream: %d cases in %.1f s (seed %d)' % (sum(counts.values()), elapsed, SEED))
        for family in sorted(summary):
            print('  %-15s %s' % (family, ' '.join(summary[family])))
        failures = list(deaths.values())
        if problems:
            failures.append('%d requests were answered wrongly; the first ones:\n%s'
                            % (len(problems), '\n'.join(problems[:15])))
        # 3. Afterwards: still serving, the known document intact, memory back near the baseline.
        time.sleep(3.0)
        for keyed, server in self.servers.items():
            name = 'keyed' if keyed else 'open'
            if not server.running():
                if keyed not in deaths:
                    failures.append('the %s server is not running; stderr:\n%s'
                                    % (name, server.stderr_tail()))
                continue
            status = health_status(server)
            if status != 200:
                failures.append('%s server: GET /health answered %s after the stream' % (name, status))
            etag, rss_before = prepared[keyed]
            client = client_for(server, KEY if keyed else None)
            try:
                resp = client.get('/docs/known_intact/k1')
            finally:
                client.close()
            if resp.status != 200 or resp.body != KNOWN_DOC or resp.header('ETag') != etag:
                failures.append('%s server: the known document changed: %s (ETag %s, was %s)'
                                % (name, resp.describe(), resp.header('ETag'), etag))
            rss_after = rss_kib(server.proc.pid)
            print('%s server: RSS %d KiB after warm-up, %d KiB after the stream'
                  % (name, rss_before, rss_after))
            if not SKIP_RSS and rss_after > rss_before + RSS_SLACK_KIB:
                failures.append('%s server: RSS grew from %d KiB to %d KiB (more than %d MiB) over the '
                                'stream' % (name, rss_before, rss_after, RSS_SLACK_KIB // 1024))
        if failures:
            self.fail('seed %d:\n%s' % (SEED, '\n\n'.join(failures)))


# ---------------------------------------------------------------------------
# 4. More connections than descriptors: no busy accept loop, no death.

class ConnectionExhaustionTest(unittest.TestCase):
    FD_LIMIT = 256
    CONNECTIONS = 400

    def test_idle_connections_beyond_the_descriptor_limit(self):
        raise_own_fd_limit(self.CONNECTIONS + 200)
        server = FdLimitedServer(self.FD_LIMIT, [])
        self.addCleanup(server.cleanup)
        server.start()
        self.assertEqual(health_status(server), 200)
        held = []
        try:
            for _ in range(self.CONNECTIONS):
                held.append(socket.create_connection((server.host, server.port), timeout=5.0))
            time.sleep(0.5)
            cpu0 = cpu_seconds(server.proc.pid)
            time.sleep(2.0)
            used = cpu_seconds(server.proc.pid) - cpu0
            print('\n%d idle connections held: the server used %.2f s of CPU in 2 s'
                  % (self.CONNECTIONS, used))
            self.assertTrue(server.running(), 'the server died holding %d connections; stderr:\n%s'
                            % (self.CONNECTIONS, server.stderr_tail()))
            self.assertLess(used, 0.3, 'the server used %.2f s of CPU in 2 s while %d idle connections '
                                       'were held under a %d descriptor limit (a busy accept loop?)'
                            % (used, self.CONNECTIONS, self.FD_LIMIT))
            # A new request now is answered (idle connections reclaimed) or waits; nothing else.
            out = exchange(server.host, server.port, [(request(b'GET', b'/health', [b'Host: x']), 1, None)])
            print('a new request meanwhile: ' + out.describe())
            self.assertIsNone(out.connect_error, out.describe())
            if out.replies:
                self.assertIn(out.replies[0].status, (200, 503), out.describe())
            self.assertIsNone(out.malformed, out.describe())
            self.assertTrue(server.running(), 'the server died; stderr:\n' + server.stderr_tail())
        finally:
            for sock in held:
                sock.close()
        t0 = time.monotonic()
        status = health_status(server, timeout=2.0)
        took = time.monotonic() - t0
        print('after closing them, GET /health answered %s in %.2f s' % (status, took))
        self.assertEqual(status, 200, 'GET /health within 2 s of closing the connections: %s after %.1f s; '
                                      'stderr:\n%s' % (status, took, server.stderr_tail()))
        server.stop()


# ---------------------------------------------------------------------------
# 5. Slow loris: a header trickling in is cut off by the header deadline.

class SlowLorisTest(CorvidTestCase):
    server_args = ['--header-timeout-ms', '1000', '--idle-timeout-ms', '30000']

    def test_trickled_header_cut_off(self):
        idle = self.server.connect()
        idle_opened = time.monotonic()
        trickle = self.server.connect()
        self.addCleanup(idle.close)
        self.addCleanup(trickle.close)
        request_bytes = b'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ' + b's' * 200 + b'\r\n\r\n'
        t0 = time.monotonic()
        closed_after = None
        for byte in request_bytes:
            try:
                trickle.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - t0
                break
            if wait_for_close(trickle, 0.2) is not None:   # one byte every 200 ms
                closed_after = time.monotonic() - t0
                break
            if time.monotonic() - t0 > 6.0:
                break
        self.assertIsNotNone(closed_after, 'a header trickling in for %.1f s was not cut off'
                             % (time.monotonic() - t0))
        self.assertLess(closed_after, 3.0, 'cut off only after %.1f s' % closed_after)
        self.assertGreater(closed_after, 0.8, 'cut off after %.2f s, before the 1 s header deadline'
                           % closed_after)
        # The connection that sent nothing is governed by the 30 s idle timeout.
        time.sleep(max(0.0, idle_opened + 1.5 - time.monotonic()))
        self.assertIsNone(wait_for_close(idle, 0.05), 'an idle connection was closed after 1.5 s '
                                                      '(--idle-timeout-ms 30000)')
        idle.sendall(b'GET /health HTTP/1.1\r\nHost: x\r\n\r\n')
        data = b''
        idle.settimeout(5.0)
        while b'"ok"' not in data:
            chunk = idle.recv(4096)
            self.assertTrue(chunk, 'the idle connection closed instead of answering')
            data += chunk
        self.assertTrue(data.startswith(b'HTTP/1.1 200'), data[:200])


if __name__ == '__main__':
    main()
