"""End-to-end tests: bad input gets a clear 4xx and the server keeps serving.

Malformed JSON, non-objects, empty bodies, invalid UTF-8, nesting limits,
bodies over the limits (413), wrong Content-Type (415), bad query
parameters and headers, idle and slow connections, garbage on the wire,
and the API key. After every test a fresh connection checks /health and a
PUT/GET round trip. Run: python3 test_bad_input.py --binary build/corvid
"""

import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corvid_harness import (CorvidTestCase, binary_path, bulk_path, doc_path, main,  # noqa: E402
                            nested_array_in_object, nested_object, q, wait_for_close)

MAX_DOC = 1048576
MAX_BULK = 4194304
IDLE_MS = 1000


def padded_doc(size):
    """A valid JSON object of exactly `size` bytes."""
    head = b'{"pad":"'
    tail = b'"}'
    return head + b'p' * (size - len(head) - len(tail)) + tail


def request_bytes(method, path, body=b'', content_type='application/json', extra=b''):
    head = ('%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n' % (method, path)).encode()
    if content_type:
        head += b'Content-Type: ' + content_type.encode() + b'\r\n'
    head += b'Content-Length: %d\r\n' % len(body) + extra + b'\r\n'
    return head + body


class BadInputTest(CorvidTestCase):
    server_args = ['--max-doc-bytes', str(MAX_DOC), '--max-bulk-bytes', str(MAX_BULK),
                   '--idle-timeout-ms', str(IDLE_MS)]
    client_kwargs = {'reconnect_idle_s': 0.4}

    def tearDown(self):
        self.assertServerHealthy()

    def assertRejected(self, resp, status, code, collection, doc_id):
        err = self.assertError(resp, status, code)
        got = self.c.get(doc_path(collection, doc_id))
        self.assertError(got, 404, 'not_found')
        return err

    # -- JSON ----------------------------------------------------------------
    def test_malformed_json(self):
        c = self.coll()
        cases = [(b'{"a": @}', 6), (b'{"a":1,}', 7), (b'{"a":1', 6), (b'{"a" 1}', 5),
                 (b"{'a':1}", 1), (b'{"a":1}x', 7), (b'{"a":1}{}', 7), (b'{"a":01}', None),
                 (b'{"a":NaN}', 5), (b'{"a":Infinity}', 5), (b'{"a":tru}', None),
                 (b'{"a":"unterminated}', None), (b'{"a":"bad\\x"}', None),
                 (b'{"a":"ctl\x01"}', None), (b'{"a":1}// c', None), (b'{"a":[1,2}', 9),
                 (b'{"a":.5}', 5), (b'{"a":-}', None), (b'{', 1), (b'}', 0)]
        for i, (body, offset) in enumerate(cases):
            with self.subTest(body=body):
                resp = self.c.put(doc_path(c, 'm%d' % i), body)
                err = self.assertRejected(resp, 400, 'invalid_json', c, 'm%d' % i)
                self.assertIn('offset', err, resp.describe())
                self.assertLessEqual(err['offset'], len(body), resp.describe())
                if offset is not None:
                    self.assertEqual(err['offset'], offset, resp.describe())
        self.assertIsNone(self.collection_count(c))

    def test_not_an_object(self):
        c = self.coll()
        for i, body in enumerate([b'[1,2]', b'[]', b'"str"', b'42', b'-1.5', b'null', b'true',
                                  b'false', b'[{"a":1}]']):
            with self.subTest(body=body):
                resp = self.c.put(doc_path(c, 'n%d' % i), body)
                self.assertRejected(resp, 400, 'not_an_object', c, 'n%d' % i)

    def test_empty_body(self):
        c = self.coll()
        resp = self.c.put(doc_path(c, 'e'), b'')
        self.assertRejected(resp, 400, 'empty_body', c, 'e')
        resp = self.c.put(doc_path(c, 'e'), None, content_type=None)
        self.assertRejected(resp, 400, 'empty_body', c, 'e')
        resp = self.c.post(bulk_path(c), b'', content_type='application/x-ndjson')
        self.assertError(resp, 400, 'empty_body')
        resp = self.c.put(doc_path(c, 'ws'), b'  \n ')
        self.assertRejected(resp, 400, ('empty_body', 'invalid_json'), c, 'ws')
        self.assertIsNone(self.collection_count(c))

    def test_invalid_utf8(self):
        c = self.coll()
        bad = [b'\xff', b'\xfe', b'\x80', b'\xc0\xaf', b'\xe0\x80\xaf', b'\xed\xa0\x80',
               b'\xf4\x90\x80\x80', b'\xf8\x88\x80\x80\x80', b'a\xe2\x82', b'\xc3']
        for i, seq in enumerate(bad):
            with self.subTest(seq=seq):
                body = b'{"ok":"fine","s":"x' + seq + b'y"}'
                resp = self.c.put(doc_path(c, 'u%d' % i), body)
                self.assertRejected(resp, 400, 'invalid_utf8', c, 'u%d' % i)
        resp = self.c.put(doc_path(c, 'key'), b'{"k\xff":1}')
        self.assertRejected(resp, 400, 'invalid_utf8', c, 'key')
        resp = self.c.put(doc_path(c, 'nested'), b'{"a":[{"b":["\xc3\x28"]}]}')
        self.assertRejected(resp, 400, 'invalid_utf8', c, 'nested')
        # Valid multi-byte sequences next to the limits are fine.
        good = '{"s":"\u007f\u0080\u07ff\u0800\uffff\U00010000\U0010ffff"}'.encode()
        etag = self.putOk(c, 'good', good, status=201)
        resp = self.c.get(doc_path(c, 'good'))
        self.assertEqual(resp.body, good)
        self.assertEtagHeader(resp, etag)

    def test_lone_surrogate_escapes(self):
        # The bytes are ASCII, but a \u escape that spells half a surrogate
        # pair decodes to something that is not UTF-8: refused like raw
        # invalid UTF-8, with the offset of the escape, never stored.
        c = self.coll()
        cases = [(b'{"a":"\\udc00"}', 6), (b'{"a":"\\ud800"}', 6), (b'{"a":"x\\uDFFFy"}', 7),
                 (b'{"\\udc00":1}', 2), (b'{"a":{"b":["ok","\\ud800\\u0041"]}}', 17)]
        for i, (body, offset) in enumerate(cases):
            with self.subTest(body=body):
                resp = self.c.put(doc_path(c, 's%d' % i), body)
                err = self.assertRejected(resp, 400, 'invalid_utf8', c, 's%d' % i)
                self.assertEqual(err.get('offset'), offset, resp.describe())
        # In bulk: the error names the line, and nothing is written.
        resp = self.c.post(bulk_path(c), b'{"id":"b1"}\n{"id":"b2","\\udc00":1}\n',
                           content_type='application/x-ndjson')
        err = self.assertError(resp, 400, 'invalid_utf8')
        self.assertEqual((err.get('line'), err.get('offset')), (2, 12), resp.describe())
        self.assertError(self.c.get(doc_path(c, 'b1')), 404, 'not_found')
        self.assertIsNone(self.collection_count(c))
        # In an index definition: refused, and no index is created.
        name = 'sur_' + c
        for body in (b'{"type":"search","collection":"x","fields":{"t\\udc00":{"analyzer":"keyword"}}}',
                     b'{"type":"mapreduce","collection":"x","map":{"k":"\'\\udc00\'"},'
                     b'"groupBy":["k"],"reduce":{"n":"count()"}}'):
            with self.subTest(body=body):
                self.assertError(self.c.put('/indexes/' + name, body), 400, 'invalid_utf8')
                self.assertError(self.c.get('/indexes/' + name), 404, 'not_found')
        # A pair is one character: the document is stored as sent and the
        # index sees its 4-byte UTF-8.
        self.assertIn(self.c.put('/indexes/' + name, json.dumps({
            'type': 'mapreduce', 'collection': c, 'map': {'k': 'k'}, 'groupBy': ['k'],
            'reduce': {'n': 'count()'}})).status, (200, 201))
        body = b'{"k":"\\ud83d\\ude00"}'
        etag = self.putOk(c, 'pair', body, status=201)
        self.assertEqual(self.c.get(doc_path(c, 'pair')).body, body)
        resp = self.c.get('/indexes/%s/results?minEtag=%d&waitMs=10000' % (name, etag))
        self.assertStatus(resp, 200)
        self.assertEqual(resp.json['rows'], [{'k': '\U0001F600', 'n': 1}], resp.describe())
        self.assertStatus(self.c.delete('/indexes/' + name), 200)

    def test_duplicate_keys(self):
        # A key twice in one object (compared decoded) is 400 duplicate_key
        # naming the key and the offset of its second occurrence, never
        # stored, as Elasticsearch refuses duplicate fields.
        c = self.coll()
        cases = [(b'{"a":1,"b":2,"a":3}', 13, '"a"', 'the top-level object'),
                 (b'{"x":{"k":1,"k":2}}', 12, '"k"', "the object at 'x'"),
                 (b'{"a":[{"k":1},{"k":2,"\\u006b":3}]}', 21, '"k"', "the object at 'a[1]'"),
                 (b'{"a":{"b":1},"a":2}', 13, '"a"', 'the top-level object'),
                 (b'{"q\\"\\n":1,"q\\"\\n":2}', 11, r'"q\"\n"', 'the top-level object')]
        for i, (body, offset, key, where) in enumerate(cases):
            with self.subTest(body=body):
                resp = self.c.put(doc_path(c, 'k%d' % i), body)
                err = self.assertRejected(resp, 400, 'duplicate_key', c, 'k%d' % i)
                self.assertEqual(err.get('offset'), offset, resp.describe())
                self.assertEqual(err['message'], 'duplicate key %s at offset %d in %s' % (key, offset, where),
                                 resp.describe())
        # Keys of different objects, and one key at different levels, are fine.
        for i, body in enumerate([b'{"x":{"k":1},"y":{"k":2},"z":[{"k":1},{"k":1}]}',
                                  b'{"k":{"k":{"k":1}},"j":[{"k":[{"k":1}]}]}']):
            self.putOk(c, 'ok%d' % i, body, status=201)
            self.assertEqual(self.c.get(doc_path(c, 'ok%d' % i)).body, body)
        # In a bulk: 400 naming the line, the offset within it, and nothing written.
        d = self.coll('bulk')
        lines = [b'{"id":"b1","v":{"k":1}}', b'{"id":"b2","v":{"k":1}}',
                 b'{"id":"b3","v":[{"k":1,"w":2,"k":3}]}', b'{"id":"b4"}']
        resp = self.c.post(bulk_path(d), b'\n'.join(lines) + b'\n', content_type='application/x-ndjson')
        err = self.assertError(resp, 400, 'duplicate_key')
        self.assertEqual((err.get('line'), err.get('offset')), (3, 29), resp.describe())
        self.assertEqual(err['message'], "line 3: duplicate key \"k\" at offset 29 in the object at 'v[0]'",
                         resp.describe())
        self.assertError(self.c.get(doc_path(d, 'b1')), 404, 'not_found')
        self.assertIsNone(self.collection_count(d))
        resp = self.c.post(bulk_path(d), b'\n'.join(lines[:2] + lines[3:]) + b'\n',
                           content_type='application/x-ndjson')
        self.assertStatus(resp, 200)
        self.assertEqual(resp.json['count'], 3, resp.describe())
        # An index definition keeps its own answer, which names the field.
        resp = self.c.put('/indexes/dup_' + c, b'{"type":"mapreduce","collection":"x","map":{"k":"k"},'
                          b'"groupBy":["k"],"reduce":{"n":"count()"},"map":{"k":"k"}}')
        err = self.assertError(resp, 400, 'invalid_definition')
        self.assertIn('map: the key appears twice in its object', err['message'], resp.describe())
        self.assertError(self.c.get('/indexes/dup_' + c), 404, 'not_found')

    def test_nesting_limit(self):
        c = self.coll()
        for name, text in (('obj256', nested_object(256)), ('arr256', nested_array_in_object(256))):
            body = text.encode()
            etag = self.putOk(c, name, body, status=201)
            resp = self.c.get(doc_path(c, name))
            self.assertEqual(resp.body, body)
            self.assertEtagHeader(resp, etag)
        for name, text in (('obj257', nested_object(257)), ('arr257', nested_array_in_object(257))):
            resp = self.c.put(doc_path(c, name), text.encode())
            self.assertRejected(resp, 400, 'too_deep', c, name)

    def test_extreme_nesting(self):
        c = self.coll()
        resp = self.c.put(doc_path(c, 'deep'), nested_array_in_object(100000).encode())
        self.assertRejected(resp, 400, 'too_deep', c, 'deep')
        resp = self.c.put(doc_path(c, 'deepobj'), nested_object(100000).encode())
        self.assertRejected(resp, 400, 'too_deep', c, 'deepobj')
        # Unclosed: depth runs out before the end of input.
        resp = self.c.put(doc_path(c, 'open'), b'{"a":' + b'[' * 100000)
        self.assertRejected(resp, 400, ('too_deep', 'invalid_json'), c, 'open')
        body = ('\n'.join(['{"id":"ok"}', '{"id":"d","v":' + '[' * 100000 + ']' * 100000 + '}']))
        resp = self.c.post(bulk_path(c), body.encode(), content_type='application/x-ndjson')
        err = self.assertError(resp, 400, 'too_deep')
        self.assertEqual(err.get('line'), 2, resp.describe())
        self.assertError(self.c.get(doc_path(c, 'ok')), 404, 'not_found')

    # -- sizes -----------------------------------------------------------------
    def test_doc_body_limit(self):
        c = self.coll()
        etag = self.putOk(c, 'at-limit', padded_doc(MAX_DOC), status=201)
        resp = self.c.get(doc_path(c, 'at-limit'))
        self.assertEqual(len(resp.body), MAX_DOC)
        self.assertEtagHeader(resp, etag)
        for size in (MAX_DOC + 1, 3 * MAX_DOC):
            with self.subTest(size=size):
                raw = self.server.raw(request_bytes('PUT', doc_path(c, 'over'), padded_doc(size)),
                                      concurrent_send=True, method='PUT')
                self.assertEqual(raw.status, 413, raw.describe())
                self.assertEqual(raw.json['error']['code'], 'body_too_large', raw.describe())
                self.assertIn('limit of %d bytes (Content-Length %d)' % (MAX_DOC, size),
                              raw.json['error']['message'], raw.describe())
                self.assertTrue(raw.closed, 'connection not closed after 413: ' + raw.describe())
                self.assertError(self.c.get(doc_path(c, 'over')), 404, 'not_found')

    def test_413_reaches_a_client_that_sends_the_whole_body(self):
        # A plain client (http.client) sends the whole body before reading:
        # the server must still deliver the 413 (lingering close), not a reset.
        c = self.coll()
        try:
            resp = self.c.put(doc_path(c, 'over'), padded_doc(MAX_DOC + 100))
        except OSError as e:
            self.fail('client saw %r instead of a 413 answer' % e)
        self.assertError(resp, 413, 'body_too_large')
        self.assertError(self.c.get(doc_path(c, 'over')), 404, 'not_found')

    def test_chunked_bodies(self):
        c = self.coll()
        body = b'{"chunked":true,"n":12345}'
        chunks = b'5\r\n' + body[:5] + b'\r\n' + (b'%x\r\n' % (len(body) - 5)) + body[5:] + \
            b'\r\n0\r\n\r\n'
        head = ('PUT %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                'Transfer-Encoding: chunked\r\n\r\n' % doc_path(c, 'ch')).encode()
        raw = self.server.raw(head + chunks, method='PUT', check_closed=False)
        self.assertEqual(raw.status, 201, raw.describe())
        self.assertEqual(self.c.get(doc_path(c, 'ch')).body, body)
        # A chunked body over the limit: 413, not stored.
        big = padded_doc(MAX_DOC + 4096)
        parts = [big[i:i + 65536] for i in range(0, len(big), 65536)]
        chunks = b''.join(b'%x\r\n' % len(p) + p + b'\r\n' for p in parts) + b'0\r\n\r\n'
        head = ('PUT %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                'Transfer-Encoding: chunked\r\n\r\n' % doc_path(c, 'chbig')).encode()
        raw = self.server.raw(head + chunks, method='PUT', concurrent_send=True)
        self.assertEqual(raw.status, 413, raw.describe())
        self.assertEqual(raw.json['error']['code'], 'body_too_large', raw.describe())
        self.assertNotIn('Content-Length', raw.json['error']['message'], 'no Content-Length was sent')
        self.assertError(self.c.get(doc_path(c, 'chbig')), 404, 'not_found')

    def test_bulk_body_limit(self):
        c = self.coll()
        lines = [b'{"id":"%06d","pad":"' % i + b'b' * 990 + b'"}' for i in range(MAX_BULK // 1015 - 1)]
        body = b'\n'.join(lines) + b'\n'
        # Pad the last line so that the body is exactly the limit.
        fill = MAX_BULK - len(body)
        self.assertGreaterEqual(fill, 0)
        lines[-1] = lines[-1][:-2] + b'b' * fill + b'"}'
        body = b'\n'.join(lines) + b'\n'
        self.assertEqual(len(body), MAX_BULK)
        resp = self.c.post(bulk_path(c), body, content_type='application/x-ndjson')
        self.assertStatus(resp, 200)
        self.assertEqual(resp.json['count'], len(lines))
        self.assertEqual(self.c.get(doc_path(c, '%06d' % (len(lines) - 1))).body, lines[-1])
        over = body + b'\n'
        raw = self.server.raw(request_bytes('POST', bulk_path(c + 'o'), over,
                                            'application/x-ndjson'),
                              concurrent_send=True, method='POST')
        self.assertEqual(raw.status, 413, raw.describe())
        self.assertEqual(raw.json['error']['code'], 'body_too_large', raw.describe())
        self.assertIsNone(self.collection_count(c + 'o'))

    def test_bulk_limit_for_encoded_bulk_path(self):
        # /docs/{c}/%5Fbulk is the bulk endpoint: it gets the bulk body limit,
        # not the document limit its still-encoded path used to get.
        c = self.coll()
        lines = [b'{"id":"%d","pad":"' % i + b'e' * 1000 + b'"}' for i in range(1500)]
        body = b'\n'.join(lines) + b'\n'
        self.assertGreater(len(body), MAX_DOC)
        for i, path in enumerate(('/docs/%s/%%5Fbulk' % q(c), '/docs/%s/%%5fbulk' % q(c))):
            with self.subTest(path=path):
                resp = self.c.post(path, body, content_type='application/x-ndjson')
                self.assertStatus(resp, 200)
                self.assertEqual(resp.json['count'], len(lines))
        self.assertEqual(self.c.get(doc_path(c, '1499')).body, lines[-1])

    def test_bulk_line_over_doc_limit(self):
        # A bulk line is a document: one over --max-doc-bytes inside a bulk
        # under the bulk limit is rejected (413, or 400 naming line 2) and
        # nothing is written; otherwise bulk bypasses the document limit.
        c = self.coll()
        big_line = b'{"id":"big","pad":"' + b'x' * MAX_DOC + b'"}'
        resp = self.c.post(bulk_path(c + 'l'), b'{"id":"small"}\n' + big_line + b'\n',
                           content_type='application/x-ndjson')
        self.assertIn(resp.status, (400, 413), resp.describe())
        err = self.assertError(resp, resp.status, 'body_too_large' if resp.status == 413 else
                               ('body_too_large', 'invalid_bulk_line', 'invalid_argument'))
        if resp.status == 400:
            self.assertEqual(err.get('line'), 2, resp.describe())
        self.assertIsNone(self.collection_count(c + 'l'))

    # -- Content-Type ----------------------------------------------------------
    def test_content_type(self):
        c = self.coll()
        for i, ctype in enumerate(['text/plain', 'application/xml', 'application/x-ndjson',
                                   'application/jsonx', 'multipart/form-data; boundary=x',
                                   'application/x-www-form-urlencoded']):
            with self.subTest(ctype=ctype):
                resp = self.c.put(doc_path(c, 't%d' % i), b'{"a":1}', content_type=ctype)
                self.assertRejected(resp, 415, 'unsupported_media_type', c, 't%d' % i)
        for ctype in ('text/plain', 'application/xml'):
            resp = self.c.post(bulk_path(c), b'{"id":"b"}\n', content_type=ctype)
            self.assertError(resp, 415, 'unsupported_media_type')
        self.assertIsNone(self.collection_count(c))
        # Accepted: parameters, no Content-Type at all, NDJSON and JSON for bulk.
        self.putOk(c, 'charset', b'{"a":1}', status=201,
                   headers={'Content-Type': 'application/json; charset=utf-8'})
        resp = self.c.put(doc_path(c, 'none'), b'{"a":1}', content_type=None)
        self.assertStatus(resp, 201)
        resp = self.c.post(bulk_path(c), b'{"id":"b1"}\n', content_type=None)
        self.assertStatus(resp, 200)
        resp = self.c.post(bulk_path(c), b'{"id":"b2"}\n', content_type='application/json')
        self.assertStatus(resp, 200)

    # -- parameters and headers -----------------------------------------------
    def test_bad_query_parameters(self):
        for query in ('since=abc', 'since=-1', 'since=1.5', 'since=', 'since=1e3',
                      'since=18446744073709551616', 'since=99999999999999999999999',
                      'limit=abc', 'limit=-1', 'limit=1.5', 'limit=', 'waitMs=abc', 'waitMs=-5',
                      'waitMs=1.5', 'since=1&limit=x', 'since=%ZZ'):
            with self.subTest(query=query):
                resp = self.c.get('/changes?' + query)
                self.assertError(resp, 400, 'invalid_argument')

    def test_bad_precondition_headers(self):
        c = self.coll()
        etag = self.putOk(c, 'a', b'{"v":1}')
        for value in ('x', '"abc"', '""', '"-1"', '"1.5"', '"99999999999999999999999"'):
            with self.subTest(value=value):
                resp = self.c.put(doc_path(c, 'a'), b'{"v":2}', headers={'If-Match': value})
                self.assertError(resp, 400, 'invalid_argument')
                resp = self.c.delete(doc_path(c, 'a'), headers={'If-Match': value})
                self.assertError(resp, 400, 'invalid_argument')
        resp = self.c.get(doc_path(c, 'a'))
        self.assertEqual(resp.body, b'{"v":1}')
        self.assertEtagHeader(resp, etag)

    def test_error_bodies_are_utf8(self):
        # A message that echoes a percent-decoded name holding bytes that are
        # not UTF-8 shows U+FFFD in their place: the body stays valid JSON.
        for path, echoed in (('/indexes/%FF', '\ufffd'), ('/indexes/a%C3%A9%E2%82', 'a\u00e9\ufffd')):
            with self.subTest(path=path):
                resp = self.c.get(path)
                self.assertIsNotNone(resp.json, 'error body is not UTF-8 JSON: ' + resp.describe())
                err = self.assertError(resp, 404, 'not_found')
                self.assertIn("'%s'" % echoed, err['message'], resp.describe())
        resp = self.c.get('/changes?since=x' + '%C3%A9' * 40)
        self.assertIsNotNone(resp.json, 'error body is not UTF-8 JSON: ' + resp.describe())
        err = self.assertError(resp, 400, 'invalid_argument')
        self.assertIn("'x" + '\u00e9' * 31 + "'", err['message'], resp.describe())

    def test_malformed_percent_encoding(self):
        c = self.coll()
        for path in ('/docs/%s/%%zz' % q(c), '/docs/%s/abc%%2' % q(c), '/docs/%s/%%' % q(c),
                     '/docs/%%G1/x'):
            with self.subTest(path=path):
                resp = self.c.put(path, b'{}')
                self.assertError(resp, 400, ('invalid_id', 'invalid_argument'))
        self.assertIsNone(self.collection_count(c))

    # -- connections -------------------------------------------------------------
    def test_idle_connection_closed(self):
        sock = self.server.connect()
        try:
            elapsed = wait_for_close(sock, 5.0)
        finally:
            sock.close()
        self.assertIsNotNone(elapsed, 'idle connection still open after 5 s')
        self.assertGreater(elapsed, 0.5, 'closed long before --idle-timeout-ms')

    def test_idle_keep_alive_connection_closed(self):
        sock = self.server.connect()
        try:
            sock.sendall(b'GET /health HTTP/1.1\r\nHost: x\r\n\r\n')
            data = b''
            while b'"ok"' not in data:
                chunk = sock.recv(4096)
                self.assertTrue(chunk, 'closed before answering')
                data += chunk
            self.assertTrue(data.startswith(b'HTTP/1.1 200'), data)
            elapsed = wait_for_close(sock, 5.0)
        finally:
            sock.close()
        self.assertIsNotNone(elapsed, 'idle keep-alive connection still open after 5 s')

    def test_half_request_closed(self):
        c = self.coll()
        sock = self.server.connect()
        try:
            sock.sendall(('PUT %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                          % doc_path(c, 'half')).encode())
            elapsed = wait_for_close(sock, 5.0)
        finally:
            sock.close()
        self.assertIsNotNone(elapsed, 'half-sent request: connection still open after 5 s')
        self.assertError(self.c.get(doc_path(c, 'half')), 404, 'not_found')

    def test_partial_body_closed(self):
        c = self.coll()
        sock = self.server.connect()
        try:
            sock.sendall(request_bytes('PUT', doc_path(c, 'part'), b'{"a":"' + b'x' * 92 + b'"}')
                         [:-90])
            elapsed = wait_for_close(sock, 5.0)
        finally:
            sock.close()
        self.assertIsNotNone(elapsed, 'partial body: connection still open after 5 s')
        self.assertError(self.c.get(doc_path(c, 'part')), 404, 'not_found')

    def test_slow_drip_request_closed(self):
        # One byte every 150 ms: the request never arrives whole within the
        # idle timeout, although bytes keep coming.
        request = ('GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: %s\r\n\r\n' % ('s' * 60)).encode()
        sock = self.server.connect()
        closed_after = None
        t0 = time.monotonic()
        try:
            sock.settimeout(0.15)
            for byte in request:
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    closed_after = time.monotonic() - t0
                    break
                try:
                    chunk = sock.recv(4096)
                    if not chunk:
                        closed_after = time.monotonic() - t0
                        break
                    if chunk.startswith(b'HTTP/1.1 200'):
                        break
                except TimeoutError:
                    pass
                except OSError:
                    closed_after = time.monotonic() - t0
                    break
                if time.monotonic() - t0 > 6.0:
                    break
        finally:
            sock.close()
        self.assertIsNotNone(closed_after, 'a request trickling in for %.1f s was not cut off'
                             % (time.monotonic() - t0))
        self.assertLess(closed_after, 5.0)

    def test_garbage_requests(self):
        cases = [b'\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03' + os.urandom(64),
                 b'GARBAGE\r\n\r\n',
                 b'\r\n\r\n\r\n\r\n\x00\x00\x00\r\n\r\n',
                 b'GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n',
                 b'GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n',
                 b'GET /health HTTP/1.1\r\nBad Header Line\r\n\r\n',
                 b'PUT /docs/g/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n'
                 b'zz\r\n{}\r\n0\r\n\r\n',
                 b'GET /' + b'a' * 200000 + b' HTTP/1.1\r\nHost: x\r\n\r\n',
                 b'GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ' + b'h' * 200000 + b'\r\n\r\n']
        for data in cases:
            with self.subTest(data=data[:50]):
                raw = self.server.raw(data, timeout=10.0, concurrent_send=True)
                if raw.status is not None:
                    self.assertIn(raw.status, (400, 413, 414, 431, 505), raw.describe())
                else:
                    self.assertTrue(raw.closed, raw.describe())
                self.assertServerHealthy()
        self.assertError(self.c.get(doc_path('g', 'x')), 404, 'not_found')

    def test_many_bad_requests_on_one_connection_then_good_ones(self):
        c = self.coll()
        for i in range(20):
            self.assertError(self.c.put(doc_path(c, 'x'), b'{"a":'), 400, 'invalid_json')
            self.assertError(self.c.put(doc_path(c, 'x'), b'[]'), 400, 'not_an_object')
        self.putOk(c, 'x', b'{"a":1}', status=201)

    # -- helpers ---------------------------------------------------------------
    def collection_count(self, name):
        resp = self.c.get('/collections')
        self.assertStatus(resp, 200)
        for entry in resp.json['collections']:
            if entry['name'] == name:
                return entry['count']
        return None


class DefaultLimitsTest(CorvidTestCase):
    """The default limits: a 16 MiB document is accepted, 17 MiB is 413."""

    def tearDown(self):
        self.assertServerHealthy()

    def test_17_mib_document_413(self):
        c = self.coll()
        body = padded_doc(17 * 1024 * 1024)
        raw = self.server.raw(request_bytes('PUT', doc_path(c, 'huge'), body),
                              concurrent_send=True, method='PUT', timeout=30.0)
        self.assertEqual(raw.status, 413, raw.describe())
        self.assertEqual(raw.json['error']['code'], 'body_too_large', raw.describe())
        self.assertError(self.c.get(doc_path(c, 'huge')), 404, 'not_found')

    def test_16_mib_document_accepted(self):
        c = self.coll()
        body = padded_doc(16 * 1024 * 1024)
        etag = self.putOk(c, 'max', body, status=201)
        resp = self.c.get(doc_path(c, 'max'))
        self.assertStatus(resp, 200)
        self.assertEqual(len(resp.body), len(body))
        self.assertTrue(resp.body == body, '16 MiB body did not round-trip')
        self.assertEtagHeader(resp, etag)


    def test_16_mib_document_with_a_million_keys(self):
        # One object with a million keys is checked for duplicates in
        # linear time: answered in well under a second, not in hours.
        c = self.coll()
        n = 1000000
        keys = b','.join(b'"k%d":%d' % (i, i % 10) for i in range(n))
        body = b'{' + keys + b'}'
        self.assertLessEqual(len(body), 16 * 1024 * 1024)
        dup = b'{' + keys + b',"k%d":0}' % (n // 2)
        self.assertLessEqual(len(dup), 16 * 1024 * 1024)
        start = time.monotonic()
        resp = self.c.put(doc_path(c, 'wide'), body)
        self.assertEqual(resp.status, 201, resp.describe())
        self.assertLess(time.monotonic() - start, 10.0)
        start = time.monotonic()
        resp = self.c.put(doc_path(c, 'dup'), dup)
        err = self.assertError(resp, 400, 'duplicate_key')
        self.assertLess(time.monotonic() - start, 10.0)
        self.assertEqual(err.get('offset'), len(keys) + 2, resp.describe())
        self.assertTrue(err['message'].startswith('duplicate key "k%d" at offset ' % (n // 2)), resp.describe())
        self.assertError(self.c.get(doc_path(c, 'dup')), 404, 'not_found')
        self.assertTrue(self.c.get(doc_path(c, 'wide')).body == body, 'wide document did not round-trip')


class ApiKeyTest(CorvidTestCase):
    server_args = ['--api-key', 'secret']

    def test_health_open_without_key(self):
        resp = self.c.get('/health')
        self.assertStatus(resp, 200)
        self.assertEqual(resp.json, {'status': 'ok'})
        resp = self.c.get('/health', headers={'Authorization': 'Bearer wrong'})
        self.assertStatus(resp, 200)

    def test_missing_key_401(self):
        c = self.coll()
        for method, path, body in (('PUT', doc_path(c, 'a'), b'{}'), ('GET', doc_path(c, 'a'), None),
                                   ('DELETE', doc_path(c, 'a'), None),
                                   ('POST', bulk_path(c), b'{"id":"b"}\n'),
                                   ('GET', '/collections', None), ('GET', '/changes', None)):
            with self.subTest(method=method, path=path):
                resp = self.c.request(method, path, body)
                self.assertError(resp, 401, 'unauthorized')
                # "no Authorization: Bearer header" (http-choices.md): another scheme is 401 too.
                resp = self.c.request(method, path, body, headers={'Authorization': 'Basic c2VjcmV0'})
                self.assertError(resp, 401, 'unauthorized')
        self.assertNotWritten(c)

    def test_401_challenges_bearer(self):
        # RFC 9110 §11.6.1: a 401 carries WWW-Authenticate with the scheme to use.
        for headers in ({}, {'Authorization': 'Basic c2VjcmV0'}, {'Authorization': 'Bearer'}):
            with self.subTest(headers=headers):
                resp = self.c.get('/collections', headers=headers)
                self.assertError(resp, 401, 'unauthorized')
                self.assertEqual(resp.header('WWW-Authenticate'), 'Bearer', resp.describe())
        resp = self.c.get('/collections', headers={'Authorization': 'Bearer wrong'})
        self.assertError(resp, 403, 'forbidden')

    def test_scheme_is_case_insensitive(self):
        # RFC 9110 §11.1: the auth-scheme is case-insensitive; the key is not.
        c = self.coll()
        for scheme in ('bearer', 'BEARER', 'bEaReR'):
            with self.subTest(scheme=scheme):
                auth = {'Authorization': scheme + ' secret'}
                self.assertStatus(self.c.put(doc_path(c, scheme), b'{}', headers=auth), 201)
                self.assertStatus(self.c.get(doc_path(c, scheme), headers=auth), 200)
                resp = self.c.get('/collections', headers={'Authorization': scheme + ' SECRET'})
                self.assertError(resp, 403, 'forbidden')

    def test_wrong_key_403(self):
        c = self.coll()
        for key in ('wrong', 'secre', 'secretX', 'SECRET', 'Secret', 'secret secret'):
            with self.subTest(key=key):
                resp = self.c.put(doc_path(c, 'a'), b'{}', headers={'Authorization': 'Bearer ' + key})
                self.assertError(resp, 403, 'forbidden')
                resp = self.c.get('/changes', headers={'Authorization': 'Bearer ' + key})
                self.assertError(resp, 403, 'forbidden')
        self.assertNotWritten(c)

    def test_right_key_200(self):
        c = self.coll()
        auth = {'Authorization': 'Bearer secret'}
        resp = self.c.put(doc_path(c, 'a'), b'{"k":1}', headers=auth)
        self.assertStatus(resp, 201)
        resp = self.c.get(doc_path(c, 'a'), headers=auth)
        self.assertStatus(resp, 200)
        self.assertEqual(resp.body, b'{"k":1}')
        self.assertStatus(self.c.get('/collections', headers=auth), 200)
        self.assertStatus(self.c.get('/changes', headers=auth), 200)
        resp = self.c.post(bulk_path(c), b'{"id":"b"}\n', headers=auth,
                           content_type='application/x-ndjson')
        self.assertStatus(resp, 200)
        self.assertStatus(self.c.delete(doc_path(c, 'a'), headers=auth), 200)

    def assertNotWritten(self, c):
        resp = self.c.get('/collections', headers={'Authorization': 'Bearer secret'})
        self.assertStatus(resp, 200)
        self.assertNotIn(c, [e['name'] for e in resp.json['collections']])



class ReadKeyTest(CorvidTestCase):
    """API.md, Server: a --read-key allows exactly the reads; 403 for the rest."""
    server_args = ['--api-key', 'secret', '--read-key', 'reader1', '--read-key', 'reader2']
    ADMIN = {'Authorization': 'Bearer secret'}

    def setUp(self):
        super().setUp()
        self.coll_name = self.coll()
        c = self.coll_name
        self.assertStatus(self.c.put(doc_path(c, 'a'), b'{"t":"hello world","n":1}', headers=self.ADMIN), 201)
        resp = self.c.put('/indexes/rk_' + c, json.dumps({'type': 'search', 'collection': c,
                                                          'fields': {'t': {'type': 'text'}}}),
                          headers=self.ADMIN)
        self.assertIn(resp.status, (200, 201), resp.describe())
        resp = self.c.put('/indexes/rm_' + c, json.dumps({'type': 'mapreduce', 'collection': c,
                                                          'map': {'n': 'n'}, 'groupBy': ['n'],
                                                          'reduce': {'c': 'count()'}}),
                          headers=self.ADMIN)
        self.assertIn(resp.status, (200, 201), resp.describe())

    def test_reads_are_allowed(self):
        c = self.coll_name
        for key in ('reader1', 'reader2'):
            auth = {'Authorization': 'Bearer ' + key}
            for path in (doc_path(c, 'a'), '/docs/%s' % q(c), '/collections', '/changes?since=0',
                         '/indexes', '/indexes/rk_' + c, '/indexes/rk_%s/search?q=hello&minEtag=1&waitMs=5000' % c,
                         '/indexes/rm_%s/results?minEtag=1&waitMs=5000' % c, '/admin/indexes', '/metrics'):
                with self.subTest(key=key, path=path):
                    self.assertStatus(self.c.get(path, headers=auth), 200)
                    self.assertStatus(self.c.request('HEAD', path, None, headers=auth), 200)
            resp = self.c.post('/indexes/rk_%s/search' % c, json.dumps({'q': 'hello'}), headers=auth)
            self.assertStatus(resp, 200)
            self.assertEqual(resp.json['total'], 1, resp.describe())

    def test_everything_else_is_403(self):
        c = self.coll_name
        auth = {'Authorization': 'Bearer reader1'}
        for method, path, body in (('PUT', doc_path(c, 'b'), b'{}'), ('DELETE', doc_path(c, 'a'), None),
                                   ('POST', bulk_path(c), b'{"id":"b"}\n'),
                                   ('PUT', '/indexes/x_' + c, b'{"type":"search","collection":"x","fields":{"t":{}}}'),
                                   ('DELETE', '/indexes/rk_' + c, None),
                                   ('POST', '/admin/indexes/rk_%s/pause' % c, b''),
                                   ('POST', '/admin/indexes/rk_%s/reset' % c, b''),
                                   ('POST', '/admin/analyze', b'{"analyzer":"standard","text":"x"}'),
                                   ('GET', '/admin/backup', None)):
            with self.subTest(method=method, path=path):
                resp = self.c.request(method, path, body, headers=auth)
                self.assertError(resp, 403, 'forbidden')
        # Nothing was changed, and the admin key still does everything.
        self.assertStatus(self.c.get(doc_path(c, 'a'), headers=auth), 200)
        self.assertError(self.c.get(doc_path(c, 'b'), headers=self.ADMIN), 404, 'not_found')
        self.assertStatus(self.c.get('/indexes/rk_' + c, headers=auth), 200)
        self.assertStatus(self.c.post('/admin/indexes/rk_%s/pause' % c, '', headers=self.ADMIN), 200)
        self.assertStatus(self.c.post('/admin/indexes/rk_%s/resume' % c, '', headers=self.ADMIN), 200)
        # Not a read key: a wrong one is 403 as before, a missing one 401.
        self.assertError(self.c.get('/collections', headers={'Authorization': 'Bearer reader3'}), 403, 'forbidden')
        self.assertError(self.c.get('/collections'), 401, 'unauthorized')
        self.assertStatus(self.c.get('/health'), 200)

    def test_read_key_needs_an_api_key(self):
        proc = subprocess.run([binary_path(), 'serve', '--read-key', 'r', '--listen', '127.0.0.1:0'],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn('--read-key needs --api-key', proc.stderr)

if __name__ == '__main__':
    main()
