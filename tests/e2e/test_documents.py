"""End-to-end tests of the Documents section of API.md (and docs/http-choices.md).

Every document endpoint and status against the real `corvid` binary: PUT /
GET / DELETE with their preconditions, ids, bulk NDJSON (and its atomicity),
/collections, /changes with long-poll, /health, 404/405 routing and the
error body shape. Run: python3 test_documents.py --binary build/corvid
"""

import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corvid_harness import (CorvidTestCase, bulk_path, doc_path, main, nested_object, q,  # noqa: E402
                            read_responses)


def ndjson(lines, sep=b'\n', trailing=True):
    data = sep.join(lines)
    return data + sep if trailing else data


def line(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(',', ':')).encode('utf-8')


class DocumentsTest(CorvidTestCase):

    # -- helpers --------------------------------------------------------------
    def collections(self):
        resp = self.c.get('/collections')
        self.assertStatus(resp, 200)
        self.assertJsonContentType(resp)
        self.assertEqual(set(resp.json.keys()), {'collections', 'lastEtag'}, resp.describe())
        return resp.json

    def collection_count(self, name):
        for entry in self.collections()['collections']:
            if entry['name'] == name:
                return entry['count']
        return None

    def changes(self, query):
        resp = self.c.get('/changes' + query)
        self.assertStatus(resp, 200)
        self.assertJsonContentType(resp)
        self.assertEqual(set(resp.json.keys()), {'results', 'lastEtag'}, resp.describe())
        for entry in resp.json['results']:
            self.assertEqual(set(entry.keys()), {'etag', 'collection', 'id', 'deleted'},
                             resp.describe())
            self.assertIsInstance(entry['deleted'], bool, resp.describe())
        return resp.json

    def bulk(self, collection, body, content_type='application/x-ndjson'):
        return self.c.post(bulk_path(collection), body, content_type=content_type)

    def bulkOk(self, collection, body, count, content_type='application/x-ndjson'):
        resp = self.bulk(collection, body, content_type)
        self.assertStatus(resp, 200)
        self.assertJsonContentType(resp)
        self.assertEqual(set(resp.json.keys()), {'count', 'firstEtag', 'lastEtag'},
                         resp.describe())
        self.assertEqual(resp.json['count'], count, resp.describe())
        self.assertIsEtag(resp.json['firstEtag'])
        self.assertEqual(resp.json['lastEtag'] - resp.json['firstEtag'] + 1, count,
                         resp.describe())
        return resp.json

    def getOk(self, collection, doc_id, body, etag=None):
        resp = self.c.get(doc_path(collection, doc_id))
        self.assertStatus(resp, 200)
        self.assertEqual(resp.body, body, resp.describe())
        self.assertJsonContentType(resp)
        if etag is not None:
            self.assertEtagHeader(resp, etag)
        return resp

    def assertAbsent(self, collection, doc_id):
        resp = self.c.get(doc_path(collection, doc_id))
        self.assertError(resp, 404, 'not_found')

    # -- server ------------------------------------------------------------------
    def test_startup_line_is_the_only_stdout_line(self):
        self.assertStatus(self.c.get('/health'), 200)
        self.assertEqual(self.server.stdout_lines,
                         ['corvid listening on 127.0.0.1:%d' % self.server.port])

    def test_health(self):
        resp = self.c.get('/health')
        self.assertStatus(resp, 200)
        self.assertJsonContentType(resp)
        self.assertEqual(resp.json, {'status': 'ok'})

    def test_keep_alive_reuses_one_connection(self):
        self.c.close()
        self.assertStatus(self.c.get('/health'), 200)
        sock = self.c.sock
        self.assertIsNotNone(sock)
        c = self.coll()
        for i in range(30):
            self.putOk(c, 'k%d' % i, '{"i":%d}' % i)
            self.assertStatus(self.c.get(doc_path(c, 'k%d' % i)), 200)
            self.assertIs(self.c.sock, sock, 'server closed a keep-alive connection')

    # -- PUT ---------------------------------------------------------------------
    def test_put_creates_201_then_replaces_200(self):
        c = self.coll()
        resp = self.c.put(doc_path(c, 'a'), b'{"v":1}')
        self.assertStatus(resp, 201)
        self.assertJsonContentType(resp)
        e1 = resp.json['etag']
        self.assertIsEtag(e1)
        self.assertEqual(resp.json, {'collection': c, 'id': 'a', 'etag': e1})
        self.assertEtagHeader(resp, e1)

        resp = self.c.put(doc_path(c, 'a'), b'{"v":2}')
        self.assertStatus(resp, 200)
        e2 = resp.json['etag']
        self.assertEqual(resp.json, {'collection': c, 'id': 'a', 'etag': e2})
        self.assertEtagHeader(resp, e2)
        self.assertGreater(e2, e1)
        self.getOk(c, 'a', b'{"v":2}', e2)

        # Same id in another collection is another document.
        self.putOk(c + 'x', 'a', b'{"v":3}', status=201)
        self.getOk(c, 'a', b'{"v":2}', e2)

    def test_etags_strictly_increasing_across_all_writes(self):
        c1, c2 = self.coll(), self.coll()
        etags = [self.c.last_etag()]
        for i in range(12):
            etags.append(self.putOk(c1 if i % 2 else c2, 'd%d' % (i % 5), '{"i":%d}' % i))
            if i % 4 == 3:
                resp = self.c.delete(doc_path(c1, 'd%d' % (i % 5)))
                self.assertStatus(resp, 200)
                etags.append(resp.json['etag'])
        b = self.bulkOk(c1, ndjson([line({'id': 'b%d' % i}) for i in range(3)]), 3)
        etags += [b['firstEtag'], b['lastEtag']]
        etags.append(self.putOk(c2, 'after-bulk', '{}'))
        for a, b_ in zip(etags, etags[1:]):
            self.assertLess(a, b_, 'etags not strictly increasing: %r' % etags)
        self.assertEqual(self.c.last_etag(), etags[-1])

    def test_get_returns_exact_bytes_numbers_unicode_nesting(self):
        c = self.coll()
        bodies = [
            b'{"big":9007199254740993,"min":-9223372036854775808,'
            b'"umax":18446744073709551615,"i64max":9223372036854775807,"zero":0,"neg":-1}',
            b'{"d1":0.1,"d2":1e308,"d3":5e-324,"d4":-0.0,"d5":2.2250738585072014e-308,'
            b'"d6":1.7976931348623157e308,"d7":0.30000000000000004,"d8":1E+2,"d9":123.456e-7,'
            b'"d10":4.9406564584124654e-324,"d11":100.0}',
            '{"s":"h\u00e9llo \u2603 \U0001d11e \u65e5\u672c\u8a9e \u05e2\u05d1\u05e8\u05d9\u05ea",'
            '"esc":"\\u00e9\\ud834\\udd1e\\n\\t\\"\\\\\\/\\u0000","\u043a\u043b\u044e\u0447":'
            '"\u0437\u043d\u0430\u0447\u0435\u043d\u0438\u0435","emoji":"\U0001f426"}'.encode(),
            b'{"nested":{"a":[1,[2,[3,{"b":null}]],{"c":true,"d":false}],"e":{}},"arr":[],'
            b'"empty":"","deep":{"x":{"y":{"z":[[[[{"w":1}]]]]}}}}',
            b'{ "spaced" :  [ 1 , 2 ,\t3 ] ,\n  "k" : "v" ,"z":{ } }',
            b'{}',
            b'{"zkey":1,"akey":2,"mkey":3}',
        ]
        for i, body in enumerate(bodies):
            etag = self.putOk(c, 'doc%d' % i, body, status=201)
            resp = self.getOk(c, 'doc%d' % i, body, etag)
            self.assertEqual(json.loads(resp.body), json.loads(body))
        # Values as Python sees them, to be sure nothing was rounded.
        v = json.loads(self.c.get(doc_path(c, 'doc0')).body)
        self.assertEqual(v['big'], 9007199254740993)
        self.assertEqual(v['min'], -9223372036854775808)
        self.assertEqual(v['umax'], 18446744073709551615)
        v = json.loads(self.c.get(doc_path(c, 'doc1')).body)
        self.assertEqual((v['d1'], v['d2'], v['d3']), (0.1, 1e308, 5e-324))

    def test_body_with_surrounding_whitespace_is_stored_as_sent(self):
        c = self.coll()
        body = b' \r\n\t{"a":1}\n'
        etag = self.putOk(c, 'ws', body, status=201)
        self.getOk(c, 'ws', body, etag)

    def test_large_bodies_round_trip(self):
        c = self.coll()
        # Compressible (zstd path) and incompressible (kept raw) bodies.
        compressible = line({'text': 'corvid ' * 40000, 'n': list(range(2000))})
        noise = os.urandom(150000).hex()
        incompressible = line({'noise': noise})
        for name, body in (('compressible', compressible), ('noise', incompressible)):
            etag = self.putOk(c, name, body, status=201)
            self.getOk(c, name, body, etag)

    # -- GET ---------------------------------------------------------------------
    def test_get_absent_is_404(self):
        c = self.coll()
        self.assertAbsent(c, 'nope')
        self.putOk(c, 'there', '{}')
        self.assertAbsent(c, 'nope')
        self.assertAbsent(c + '_never_written', 'there')

    def test_get_if_none_match_304(self):
        c = self.coll()
        e1 = self.putOk(c, 'a', b'{"v":1}')
        resp = self.c.get(doc_path(c, 'a'), headers={'If-None-Match': '"%d"' % e1})
        self.assertStatus(resp, 304)
        self.assertEqual(resp.body, b'')
        self.assertEtagHeader(resp, e1)
        # A different etag: the document.
        resp = self.c.get(doc_path(c, 'a'), headers={'If-None-Match': '"%d"' % (e1 + 1000)})
        self.assertStatus(resp, 200)
        self.assertEqual(resp.body, b'{"v":1}')
        # After a replace, the old etag no longer matches.
        e2 = self.putOk(c, 'a', b'{"v":2}')
        resp = self.c.get(doc_path(c, 'a'), headers={'If-None-Match': '"%d"' % e1})
        self.assertStatus(resp, 200)
        self.assertEqual(resp.body, b'{"v":2}')
        self.assertEtagHeader(resp, e2)
        resp = self.c.get(doc_path(c, 'a'), headers={'If-None-Match': '"%d"' % e2})
        self.assertStatus(resp, 304)
        # On an absent document: 404.
        resp = self.c.get(doc_path(c, 'absent'), headers={'If-None-Match': '"%d"' % e2})
        self.assertError(resp, 404, 'not_found')

    # -- HEAD ------------------------------------------------------------------
    def head_and_get(self, path, headers=b''):
        """Pipelines HEAD `path` then GET `path` on one raw connection.

        Returns [(status, headers with lower-case names, body)] for both. No
        body is read after HEAD's header block: the GET's status line must
        follow it at once, whatever HEAD's Content-Length says."""
        sock = self.server.connect()
        try:
            sock.sendall(b''.join(b'%s %s HTTP/1.1\r\nHost: x\r\n%s\r\n' % (m, path.encode(), headers)
                                  for m in (b'HEAD', b'GET')))
            sock.settimeout(10.0)
            buf = b''
            out = []
            for method in ('HEAD', 'GET'):
                while b'\r\n\r\n' not in buf:
                    chunk = sock.recv(65536)
                    self.assertTrue(chunk, 'connection closed after %d responses' % len(out))
                    buf += chunk
                head, buf = buf.split(b'\r\n\r\n', 1)
                lines = head.decode('iso-8859-1').split('\r\n')
                self.assertTrue(lines[0].startswith('HTTP/1.1 '),
                                '%s answer does not start with a status line: %r' % (method, head[:200]))
                hdrs = {}
                for ln in lines[1:]:
                    name, _, value = ln.partition(':')
                    hdrs[name.strip().lower()] = value.strip()
                length = 0 if method == 'HEAD' else int(hdrs.get('content-length', '0'))
                while len(buf) < length:
                    chunk = sock.recv(65536)
                    self.assertTrue(chunk, 'connection closed inside a body')
                    buf += chunk
                out.append((int(lines[0].split(' ')[1]), hdrs, buf[:length]))
                buf = buf[length:]
            self.assertEqual(buf, b'', 'bytes after the GET answer')
            return out
        finally:
            sock.close()

    def assertHeadLikeGet(self, path, status, headers=b''):
        (hs, hh, hb), (gs, gh, gb) = self.head_and_get(path, headers)
        self.assertEqual((hs, gs), (status, status), (hh, gh, gb))
        self.assertEqual(hb, b'')
        for name in ('etag', 'content-length', 'content-type', 'allow'):
            self.assertEqual(hh.get(name), gh.get(name), '%s of HEAD %s' % (name, path))
        self.assertEqual(int(hh.get('content-length', '0')), len(gb), path)
        return hh, gb

    def test_head_answers_like_get_without_body(self):
        c = self.coll()
        etag = self.putOk(c, 'h', b'{"v":"head me","n":[1,2,3]}')
        path = doc_path(c, 'h')
        hh, body = self.assertHeadLikeGet(path, 200)
        self.assertEqual(hh.get('etag'), '"%d"' % etag)
        self.assertEqual(body, b'{"v":"head me","n":[1,2,3]}')
        self.assertHeadLikeGet(doc_path(c, 'absent'), 404)
        self.assertHeadLikeGet(path, 304, b'If-None-Match: "%d"\r\n' % etag)
        for other in ('/health', '/collections', '/changes?since=0&limit=1'):
            self.assertHeadLikeGet(other, 200)
        # Through http.client too (which reads no body after HEAD), on the
        # keep-alive connection.
        resp = self.c.request('HEAD', path)
        self.assertStatus(resp, 200)
        self.assertEqual(resp.body, b'')
        self.assertEtagHeader(resp, etag)
        self.getOk(c, 'h', b'{"v":"head me","n":[1,2,3]}', etag)
        # HEAD is allowed exactly where GET is.
        resp = self.c.request('HEAD', '/admin/analyze')
        self.assertStatus(resp, 405)
        self.assertEqual(resp.body, b'')
        self.assertNotIn('HEAD', resp.header('Allow') or '')
        resp = self.c.request('PATCH', path, b'{}')
        self.assertError(resp, 405, 'method_not_allowed')
        self.assertIn('HEAD', [m.strip() for m in resp.header('Allow').split(',')])

    # -- PUT preconditions ---------------------------------------------------
    def test_put_if_match(self):
        c = self.coll()
        e1 = self.putOk(c, 'a', b'{"v":1}', status=201)
        e2 = self.putOk(c, 'a', b'{"v":2}', status=200, headers={'If-Match': '"%d"' % e1})
        self.assertGreater(e2, e1)
        # Stale etag: 412, nothing changes.
        resp = self.c.put(doc_path(c, 'a'), b'{"v":3}', headers={'If-Match': '"%d"' % e1})
        self.assertError(resp, 412, 'precondition_failed')
        self.getOk(c, 'a', b'{"v":2}', e2)
        self.assertEqual(self.c.last_etag(), e2, 'a failed If-Match consumed an etag write')
        # If-Match compares strongly: the current etag, weak, does not match.
        resp = self.c.put(doc_path(c, 'a'), b'{"v":3}', headers={'If-Match': 'W/"%d"' % e2})
        self.assertError(resp, 412, 'precondition_failed')
        self.getOk(c, 'a', b'{"v":2}', e2)
        # If-Match on an absent document: 412, not created.
        resp = self.c.put(doc_path(c, 'b'), b'{"v":1}', headers={'If-Match': '"%d"' % e2})
        self.assertError(resp, 412, 'precondition_failed')
        self.assertAbsent(c, 'b')
        # If-Match of a deleted document's etag.
        resp = self.c.delete(doc_path(c, 'a'))
        self.assertStatus(resp, 200)
        tomb = resp.json['etag']
        resp = self.c.put(doc_path(c, 'a'), b'{"v":4}', headers={'If-Match': '"%d"' % tomb})
        self.assertError(resp, 412, 'precondition_failed')
        self.assertAbsent(c, 'a')

    def test_put_if_none_match_star(self):
        c = self.coll()
        e1 = self.putOk(c, 'a', b'{"v":1}', status=201, headers={'If-None-Match': '*'})
        resp = self.c.put(doc_path(c, 'a'), b'{"v":2}', headers={'If-None-Match': '*'})
        self.assertError(resp, 412, 'precondition_failed')
        self.getOk(c, 'a', b'{"v":1}', e1)
        # After a delete the document is absent again: If-None-Match: * creates it.
        self.assertStatus(self.c.delete(doc_path(c, 'a')), 200)
        self.putOk(c, 'a', b'{"v":3}', status=201, headers={'If-None-Match': '*'})
        self.getOk(c, 'a', b'{"v":3}')

    # -- DELETE --------------------------------------------------------------
    def test_delete(self):
        c = self.coll()
        e1 = self.putOk(c, 'a', b'{"v":1}')
        resp = self.c.delete(doc_path(c, 'a'))
        self.assertStatus(resp, 200)
        self.assertJsonContentType(resp)
        self.assertEqual(list(resp.json.keys()), ['etag'], resp.describe())
        tomb = resp.json['etag']
        self.assertIsEtag(tomb)
        self.assertGreater(tomb, e1)
        self.assertEtagHeader(resp, tomb)
        self.assertAbsent(c, 'a')
        resp = self.c.delete(doc_path(c, 'a'))
        self.assertError(resp, 404, 'not_found')
        resp = self.c.delete(doc_path(c, 'never'))
        self.assertError(resp, 404, 'not_found')
        self.assertEqual(self.c.last_etag(), tomb, 'a 404 DELETE wrote something')
        # Re-create after delete: 201 with a newer etag.
        e3 = self.putOk(c, 'a', b'{"v":2}', status=201)
        self.assertGreater(e3, tomb)

    def test_delete_if_match(self):
        c = self.coll()
        e1 = self.putOk(c, 'a', b'{"v":1}')
        e2 = self.putOk(c, 'a', b'{"v":2}')
        resp = self.c.delete(doc_path(c, 'a'), headers={'If-Match': '"%d"' % e1})
        self.assertError(resp, 412, 'precondition_failed')
        self.getOk(c, 'a', b'{"v":2}', e2)
        # If-None-Match: * holds only for an absent document.
        resp = self.c.delete(doc_path(c, 'a'), headers={'If-None-Match': '*'})
        self.assertError(resp, 412, 'precondition_failed')
        self.getOk(c, 'a', b'{"v":2}', e2)
        resp = self.c.delete(doc_path(c, 'a'), headers={'If-Match': '"%d"' % e2})
        self.assertStatus(resp, 200)
        self.assertGreater(resp.json['etag'], e2)
        self.assertAbsent(c, 'a')

    # -- ids -----------------------------------------------------------------
    def test_percent_encoded_ids(self):
        c = self.coll()
        ids = ['a/b', '/leading', 'trailing/', 'with space', 'uni-\u65e5\u672c\u8a9e-\u00e9-\U0001f426',
               '100%', 'a+b', '?q=1&r#frag', 'a..b', 'semi;colon', 'tab\there', '"quoted"']
        before = self.c.last_etag()
        etags = {}
        for doc_id in ids:
            body = line({'id': doc_id})
            resp = self.c.put(doc_path(c, doc_id), body)
            self.assertStatus(resp, 201)
            self.assertEqual(resp.json, {'collection': c, 'id': doc_id, 'etag': resp.json['etag']})
            etags[doc_id] = resp.json['etag']
        for doc_id in ids:
            self.getOk(c, doc_id, line({'id': doc_id}), etags[doc_id])
        # Lower-case hex decodes the same.
        self.getOk(c, 'a/b', line({'id': 'a/b'}), etags['a/b'])
        resp = self.c.get('/docs/%s/a%%2fb' % q(c))
        self.assertStatus(resp, 200)
        self.assertEqual(resp.body, line({'id': 'a/b'}))
        # An unencoded '/' is a path separator, not part of the id.
        resp = self.c.get('/docs/%s/a/b' % q(c))
        self.assertError(resp, 404, 'not_found')
        # The change feed reports decoded ids.
        feed = self.changes('?since=%d' % before)
        self.assertEqual([(e['collection'], e['id']) for e in feed['results']],
                         [(c, doc_id) for doc_id in ids])
        # Collection names are percent-decoded too.
        c2 = c + ' \u00fc space'
        resp = self.c.put(doc_path(c2, 'x y'), b'{}')
        self.assertStatus(resp, 201)
        self.assertEqual(resp.json['collection'], c2)
        self.assertEqual(resp.json['id'], 'x y')
        self.assertEqual(self.collection_count(c2), 1)
        # DELETE by an encoded id.
        self.assertStatus(self.c.delete(doc_path(c, 'a/b')), 200)
        self.assertAbsent(c, 'a/b')
        self.getOk(c, '/leading', line({'id': '/leading'}))

    def test_id_length_limits(self):
        c = self.coll()
        ok_ids = ['x' * 512, '\u00e9' * 256, '\u65e5' * 170 + 'ab']  # all exactly 512 bytes
        for doc_id in ok_ids:
            self.assertEqual(len(doc_id.encode()), 512)
            etag = self.putOk(c, doc_id, b'{"ok":1}', status=201)
            self.getOk(c, doc_id, b'{"ok":1}', etag)
        bad_ids = ['x' * 513, '\u00e9' * 256 + 'x', '\u65e5' * 171]  # 513 bytes
        for doc_id in bad_ids:
            self.assertEqual(len(doc_id.encode()), 513)
            resp = self.c.put(doc_path(c, doc_id), b'{"ok":1}')
            self.assertError(resp, 400, 'invalid_id')
            resp = self.c.get(doc_path(c, doc_id))
            self.assertError(resp, 400, 'invalid_id')
            resp = self.c.delete(doc_path(c, doc_id))
            self.assertError(resp, 400, 'invalid_id')
        # Collection names: same limit.
        long_coll = 'k' * 512
        self.putOk(long_coll, 'a', b'{}', status=201)
        resp = self.c.put(doc_path('k' * 513, 'a'), b'{}')
        self.assertError(resp, 400, 'invalid_id')
        self.assertIsNone(self.collection_count('k' * 513))

    def test_invalid_ids(self):
        c = self.coll()
        for path in ('/docs/%s/%%FF' % q(c),           # invalid UTF-8
                     '/docs/%s/a%%C3' % q(c),          # truncated UTF-8
                     '/docs/%s/%%C0%%AF' % q(c),       # overlong
                     '/docs/%s/a%%00b' % q(c),         # NUL
                     '/docs/%s/' % q(c),               # empty id
                     '/docs//x',                       # empty collection
                     '/docs/%FF/x'):                   # invalid UTF-8 collection
            resp = self.c.put(path, b'{}')
            self.assertError(resp, 400, 'invalid_id')
        self.assertIsNone(self.collection_count(c))

    # -- bulk ----------------------------------------------------------------
    def test_bulk_ndjson(self):
        c = self.coll()
        before = self.c.last_etag()
        lines = [line({'id': 'b%d' % i, 'n': i, 's': '\u00e9' * i, 'big': 18446744073709551615})
                 for i in range(5)]
        result = self.bulkOk(c, ndjson(lines), 5)
        self.assertGreater(result['firstEtag'], before)
        for i, body in enumerate(lines):
            self.getOk(c, 'b%d' % i, body, result['firstEtag'] + i)
        self.assertEqual(self.collection_count(c), 5)
        self.assertEqual(self.c.last_etag(), result['lastEtag'])
        feed = self.changes('?since=%d' % before)
        self.assertEqual([(e['etag'], e['id'], e['deleted']) for e in feed['results']],
                         [(result['firstEtag'] + i, 'b%d' % i, False) for i in range(5)])

    def test_bulk_variants(self):
        c = self.coll()
        # application/json is accepted; no trailing newline.
        lines = [line({'id': 'j%d' % i}) for i in range(3)]
        r = self.bulkOk(c, ndjson(lines, trailing=False), 3, content_type='application/json')
        self.getOk(c, 'j2', lines[2], r['lastEtag'])
        # CRLF: stored without the \r.
        lines = [line({'id': 'crlf%d' % i, 'v': i}) for i in range(3)]
        r = self.bulkOk(c, ndjson(lines, sep=b'\r\n'), 3)
        for i, body in enumerate(lines):
            self.getOk(c, 'crlf%d' % i, body, r['firstEtag'] + i)
        # Blank lines are skipped and take no etag.
        l1, l2 = line({'id': 'blank1'}), line({'id': 'blank2'})
        r = self.bulkOk(c, b'\n' + l1 + b'\n\n\n' + l2 + b'\n\n', 2)
        self.getOk(c, 'blank1', l1, r['firstEtag'])
        self.getOk(c, 'blank2', l2, r['firstEtag'] + 1)
        # The same id twice: the later line wins, both lines count.
        first, second = line({'id': 'twice', 'v': 1}), line({'id': 'twice', 'v': 2})
        r = self.bulkOk(c, ndjson([first, line({'id': 'mid'}), second]), 3)
        self.getOk(c, 'twice', second, r['lastEtag'])
        self.assertEqual(self.collection_count(c), 3 + 3 + 2 + 2)
        # Ids needing encoding elsewhere are plain strings in a bulk line.
        body = line({'id': 'a/b c\u00e9'})
        r = self.bulkOk(c, ndjson([body]), 1)
        self.getOk(c, 'a/b c\u00e9', body, r['firstEtag'])

    def test_bulk_replaces_existing_documents(self):
        c = self.coll()
        e_old = self.putOk(c, 'x', b'{"id":"x","v":0}', status=201)
        body = line({'id': 'x', 'v': 1})
        r = self.bulkOk(c, ndjson([body]), 1)
        self.assertGreater(r['firstEtag'], e_old)
        self.getOk(c, 'x', body, r['firstEtag'])
        self.assertEqual(self.collection_count(c), 1)

    def test_bulk_deleted_lines(self):
        c = self.coll()
        self.putOk(c, 'x', b'{"v":"x"}')
        self.putOk(c, 'y', b'{"v":"y"}')
        before = self.c.last_etag()
        z = line({'id': 'z', 'v': 1})
        body = ndjson([line({'id': 'x', '_deleted': True}), z,
                       line({'id': 'ghost', '_deleted': True})])
        r = self.bulkOk(c, body, 3)
        self.assertGreater(r['firstEtag'], before)
        self.assertAbsent(c, 'x')
        self.getOk(c, 'z', z, r['firstEtag'] + 1)
        self.assertAbsent(c, 'ghost')
        self.getOk(c, 'y', b'{"v":"y"}')
        feed = self.changes('?since=%d' % before)
        self.assertEqual([(e['etag'], e['collection'], e['id'], e['deleted'])
                          for e in feed['results']],
                         [(r['firstEtag'], c, 'x', True), (r['firstEtag'] + 1, c, 'z', False),
                          (r['firstEtag'] + 2, c, 'ghost', True)])
        self.assertEqual(self.collection_count(c), 2)

    def test_bulk_atomicity_bad_line_3_of_5(self):
        deep = '{"id":"l3","v":' + nested_object(256) + '}'   # 257 levels
        bad_lines = [
            ('invalid_json', b'{"id":"l3","v": @}', 16),
            ('invalid_json', b'{"id":"l3","v":1', None),
            ('not_an_object', b'[1,2,3]', None),
            ('not_an_object', b'"just a string"', None),
            ('invalid_bulk_line', b'{"v":3}', None),
            ('invalid_bulk_line', b'{"id":3,"v":3}', None),
            ('invalid_bulk_line', b'{"id":null}', None),
            ('invalid_utf8', b'{"id":"l3","v":"\xff\xfe"}', None),
            ('too_deep', deep.encode(), None),
            (('invalid_id', 'invalid_bulk_line'), line({'id': 'x' * 513}), None),
            (('invalid_id', 'invalid_bulk_line'), b'{"id":""}', None),
            (('invalid_id', 'invalid_bulk_line'), b'{"id":"a\\u0000b"}', None),
        ]
        for code, bad, offset in bad_lines:
            with self.subTest(code=code, line=bad[:40]):
                c = self.coll()
                # line 1 replaces an existing document: it must keep its old version.
                old = b'{"id":"l1","v":"old"}'
                e_old = self.putOk(c, 'l1', old, status=201)
                before = self.c.last_etag()
                lines = [line({'id': 'l1', 'v': 'new'}), line({'id': 'l2'}), bad,
                         line({'id': 'l4'}), line({'id': 'l5'})]
                resp = self.bulk(c, ndjson(lines))
                err = self.assertError(resp, 400, code)
                self.assertEqual(err.get('line'), 3, resp.describe())
                if offset is not None:
                    self.assertEqual(err.get('offset'), offset, resp.describe())
                self.getOk(c, 'l1', old, e_old)
                for doc_id in ('l2', 'l3', 'l4', 'l5'):
                    self.assertAbsent(c, doc_id)
                self.assertEqual(self.collection_count(c), 1)
                self.assertEqual(self.changes('?since=%d' % before)['results'], [])

    def test_bulk_error_line_counts_blank_lines(self):
        c = self.coll()
        body = line({'id': 'a'}) + b'\n\n' + b'{"id":"b",}' + b'\n' + line({'id': 'c'}) + b'\n'
        resp = self.bulk(c, body)
        err = self.assertError(resp, 400, 'invalid_json')
        self.assertEqual(err.get('line'), 3, resp.describe())
        self.assertEqual(err.get('offset'), 10, resp.describe())
        self.assertAbsent(c, 'a')
        self.assertIsNone(self.collection_count(c))
        # Bad last line, without a trailing newline.
        lines = [line({'id': 'p%d' % i}) for i in range(4)] + [b'{"id":"p4"']
        resp = self.bulk(c, ndjson(lines, trailing=False))
        err = self.assertError(resp, 400, 'invalid_json')
        self.assertEqual(err.get('line'), 5, resp.describe())
        self.assertAbsent(c, 'p0')

    def test_bulk_path_takes_only_post(self):
        # /docs/{c}/_bulk is a known path whose only method is POST: any
        # other is 405 (API.md), never a document read or write of id "_bulk".
        c = self.coll()
        for path in (bulk_path(c), '/docs/%s/%%5Fbulk' % q(c)):
            for method in ('GET', 'PUT', 'DELETE', 'PATCH'):
                with self.subTest(method=method, path=path):
                    body = b'{"a":1}' if method in ('PUT', 'PATCH') else None
                    resp = self.c.request(method, path, body)
                    err = self.assertError(resp, 405, 'method_not_allowed')
                    self.assertEqual(resp.header('Allow'), 'POST', resp.describe())
                    self.assertIn('_bulk', err['message'])
            resp = self.c.request('HEAD', path)
            self.assertStatus(resp, 405)
            self.assertEqual(resp.header('Allow'), 'POST', resp.describe())
        self.assertIsNone(self.collection_count(c))
        # Nor can a bulk line create a document that no GET could read.
        resp = self.bulk(c, ndjson([b'{"id":"ok"}', b'{"id":"_bulk","v":1}']))
        err = self.assertError(resp, 400, 'invalid_id')
        self.assertEqual(err.get('line'), 2, resp.describe())
        self.assertIn('_bulk', err['message'])
        self.assertIsNone(self.collection_count(c))
        # ... but a delete line may remove one stored before ids were checked.
        self.bulkOk(c, ndjson([b'{"id":"ok"}', b'{"id":"_bulk","_deleted":true}']), 2)
        self.assertEqual(self.collection_count(c), 1)
        # Other ids starting with '_' are ordinary ids (API.md reserves none).
        self.putOk(c, '_bulkx', b'{}')
        self.getOk(c, '_bulkx', b'{}')
        self.putOk(c, '_changes', b'{}')

    # -- /collections ----------------------------------------------------------
    def test_collections_counts(self):
        a, b = self.coll('_a'), self.coll('_b')
        for i in range(3):
            self.putOk(a, 'd%d' % i, '{}')
        self.putOk(b, 'd0', '{}')
        self.putOk(b, 'd1', '{}')
        self.putOk(a, 'd0', '{"replaced":true}')        # replace: count unchanged
        resp = self.c.delete(doc_path(a, 'd1'))
        self.assertStatus(resp, 200)
        last = resp.json['etag']
        info = self.collections()
        self.assertEqual(info['lastEtag'], last)
        entries = {e['name']: e for e in info['collections']}
        self.assertEqual(entries[a], {'name': a, 'count': 2, 'tombstones': 1})
        self.assertEqual(entries[b], {'name': b, 'count': 2, 'tombstones': 0})
        names = [e['name'] for e in info['collections']]
        self.assertEqual(names, sorted(names, key=lambda s: s.encode('utf-8')))
        self.assertEqual(len(names), len(set(names)))
        for e in info['collections']:
            self.assertEqual(set(e.keys()), {'name', 'count', 'tombstones'})
        # All documents deleted: still listed, count 0.
        self.assertStatus(self.c.delete(doc_path(b, 'd0')), 200)
        resp = self.c.delete(doc_path(b, 'd1'))
        self.assertStatus(resp, 200)
        info = self.collections()
        self.assertEqual(info['lastEtag'], resp.json['etag'])
        self.assertIn({'name': b, 'count': 0, 'tombstones': 2}, info['collections'])
        # A failed write does not create a collection; re-creating counts again.
        self.putOk(b, 'd0', '{}', status=201)
        self.assertEqual(self.collection_count(b), 1)
        c = self.coll('_never')
        self.assertError(self.c.put(doc_path(c, 'x'), b'[1]'), 400, 'not_an_object')
        self.assertIsNone(self.collection_count(c))

    # -- /changes --------------------------------------------------------------
    def test_changes_feed(self):
        c = self.coll()
        e = {}
        e['a1'] = self.putOk(c, 'a1', '{}')
        e['a2'] = self.putOk(c, 'a2', '{}')
        e['a3'] = self.putOk(c, 'a3', '{}')
        e['a1b'] = self.putOk(c, 'a1', '{"v":2}')
        resp = self.c.delete(doc_path(c, 'a2'))
        self.assertStatus(resp, 200)
        e['a2del'] = resp.json['etag']
        e['a4'] = self.putOk(c, 'a4', '{}')
        since = e['a1'] - 1
        full = [{'etag': e['a3'], 'collection': c, 'id': 'a3', 'deleted': False},
                {'etag': e['a1b'], 'collection': c, 'id': 'a1', 'deleted': False},
                {'etag': e['a2del'], 'collection': c, 'id': 'a2', 'deleted': True},
                {'etag': e['a4'], 'collection': c, 'id': 'a4', 'deleted': False}]
        feed = self.changes('?since=%d' % since)
        self.assertEqual(feed, {'results': full, 'lastEtag': e['a4']})
        feed = self.changes('?since=%d&limit=2' % since)
        self.assertEqual(feed, {'results': full[:2], 'lastEtag': e['a4']})
        feed = self.changes('?since=%d&limit=2' % full[1]['etag'])
        self.assertEqual(feed, {'results': full[2:], 'lastEtag': e['a4']})
        feed = self.changes('?limit=1&since=%d' % e['a1b'])
        self.assertEqual(feed, {'results': full[2:3], 'lastEtag': e['a4']})
        # A parameter given twice takes its last value, as on the query endpoints.
        feed = self.changes('?since=%d&limit=1&limit=2' % since)
        self.assertEqual(feed, {'results': full[:2], 'lastEtag': e['a4']})
        feed = self.changes('?since=%d' % e['a4'])
        self.assertEqual(feed, {'results': [], 'lastEtag': e['a4']})
        feed = self.changes('?since=%d' % (e['a4'] + 1000))
        self.assertEqual(feed, {'results': [], 'lastEtag': e['a4']})
        # waitMs with something already newer: answers at once.
        t0 = time.monotonic()
        feed = self.changes('?since=%d&waitMs=5000' % since)
        self.assertLess(time.monotonic() - t0, 1.0)
        self.assertEqual(feed['results'], full)

    def test_changes_whole_feed_is_ordered_and_deduplicated(self):
        c = self.coll()
        for i in range(5):
            self.putOk(c, 'x', '{"i":%d}' % i)
        feed = self.changes('')    # since defaults to 0, limit to 1000
        results = feed['results']
        self.assertLessEqual(len(results), 1000)
        etags = [r['etag'] for r in results]
        self.assertEqual(etags, sorted(set(etags)), 'not strictly increasing')
        keys = [(r['collection'], r['id']) for r in results]
        self.assertEqual(len(keys), len(set(keys)), 'a document listed twice')
        # Paging with limit=7 visits the same entries as one big page.
        all_results, last = self.c.all_changes(0, page=10000)
        paged, since = [], 0
        while True:
            page = self.changes('?since=%d&limit=7' % since)['results']
            self.assertLessEqual(len(page), 7)
            if not page:
                break
            paged += page
            since = page[-1]['etag']
        self.assertEqual(paged, all_results)
        self.assertEqual(last, self.c.last_etag())
        self.assertEqual(all_results[-1]['etag'], last)
        self.assertEqual([r for r in all_results if r['collection'] == c],
                         [{'etag': last, 'collection': c, 'id': 'x', 'deleted': False}])

    def test_changes_long_poll_wakes_on_write(self):
        c = self.coll()
        last = self.c.last_etag()
        waiter = self.server.client(timeout=30)
        result = {}

        def poll():
            t0 = time.monotonic()
            result['resp'] = waiter.get('/changes?since=%d&waitMs=5000' % last)
            result['elapsed'] = time.monotonic() - t0

        thread = threading.Thread(target=poll)
        thread.start()
        time.sleep(0.5)
        etag = self.putOk(c, 'wake', '{}')
        t_put = time.monotonic()
        thread.join(10)
        waiter.close()
        self.assertFalse(thread.is_alive())
        resp = result['resp']
        self.assertStatus(resp, 200)
        self.assertLess(result['elapsed'], 2.0, 'long poll did not return promptly after a PUT')
        self.assertEqual(resp.json, {'results': [{'etag': etag, 'collection': c, 'id': 'wake',
                                                  'deleted': False}],
                                     'lastEtag': etag})
        self.assertLess(time.monotonic() - t_put, 2.0)

    def test_changes_long_poll_wakes_on_delete_and_bulk(self):
        c = self.coll()
        self.putOk(c, 'd', '{}')
        for action in ('delete', 'bulk'):
            last = self.c.last_etag()
            waiter = self.server.client(timeout=30)
            result = {}

            def poll():
                t0 = time.monotonic()
                result['resp'] = waiter.get('/changes?since=%d&waitMs=5000' % last)
                result['elapsed'] = time.monotonic() - t0

            thread = threading.Thread(target=poll)
            thread.start()
            time.sleep(0.3)
            if action == 'delete':
                self.assertStatus(self.c.delete(doc_path(c, 'd')), 200)
            else:
                self.bulkOk(c, ndjson([line({'id': 'b1'}), line({'id': 'b2'})]), 2)
            thread.join(10)
            waiter.close()
            self.assertStatus(result['resp'], 200)
            self.assertLess(result['elapsed'], 2.0, action)
            self.assertGreaterEqual(len(result['resp'].json['results']), 1, action)
            self.assertGreater(result['resp'].json['results'][0]['etag'], last)

    def test_changes_long_poll_with_collection_waits_for_it(self):
        # API.md: with waitMs, /changes long-polls until something newer
        # than `since` exists; collection=C keeps one collection's changes.
        # It answered at once, empty, on a write to another collection (and
        # whenever `since` was below the server's last etag).
        c, other = self.coll(), self.coll()
        self.putOk(c, 'old', '{}')
        self.putOk(other, 'o0', '{}')
        since = self.c.last_etag() - 1     # below the server's last etag; nothing newer in c
        waiter = self.server.client(timeout=30)
        result = {}

        def poll():
            t0 = time.monotonic()
            result['resp'] = waiter.get('/changes?since=%d&collection=%s&waitMs=8000' % (since, q(c)))
            result['elapsed'] = time.monotonic() - t0

        thread = threading.Thread(target=poll)
        t0 = time.monotonic()
        thread.start()
        for i in range(5):
            time.sleep(0.2)
            self.putOk(other, 'o%d' % (i + 1), '{}')
        time.sleep(0.3)
        self.assertTrue(thread.is_alive(), 'answered before any change of %s: %r' % (c, result.get('resp')))
        etag = self.putOk(c, 'wake', '{}')
        thread.join(10)
        waiter.close()
        self.assertFalse(thread.is_alive())
        self.assertStatus(result['resp'], 200)
        self.assertLess(time.monotonic() - t0, 5.0, 'long poll did not return promptly after a PUT in its collection')
        self.assertEqual(result['resp'].json, {'results': [{'etag': etag, 'collection': c, 'id': 'wake',
                                                            'deleted': False}],
                                               'lastEtag': etag})
        # Nothing in c: the empty page at waitMs, with the server's last etag.
        t0 = time.monotonic()
        self.putOk(other, 'o9', '{}')
        resp = self.c.get('/changes?since=%d&collection=%s&waitMs=1200' % (etag, q(c)))
        elapsed = time.monotonic() - t0
        self.assertStatus(resp, 200)
        self.assertEqual(resp.json, {'results': [], 'lastEtag': self.c.last_etag()})
        self.assertGreaterEqual(elapsed, 1.1, 'returned before waitMs')

    def test_changes_long_poll_times_out_empty(self):
        last = self.c.last_etag()
        t0 = time.monotonic()
        resp = self.c.get('/changes?since=%d&waitMs=1200' % last)
        elapsed = time.monotonic() - t0
        self.assertStatus(resp, 200)
        self.assertEqual(resp.json, {'results': [], 'lastEtag': last})
        self.assertGreaterEqual(elapsed, 1.1, 'returned before waitMs')
        self.assertLess(elapsed, 3.0, 'waited far beyond waitMs')

    def test_many_long_polls_do_not_block_the_server(self):
        # 24 waiting long polls (more than the server's threads) must not
        # starve other requests, and one write must wake them all.
        c = self.coll()
        last = self.c.last_etag()
        results = [None] * 24
        clients = [self.server.client(timeout=30) for _ in results]

        def poll(i):
            t0 = time.monotonic()
            resp = clients[i].get('/changes?since=%d&waitMs=8000' % last)
            results[i] = (resp, time.monotonic() - t0)

        threads = [threading.Thread(target=poll, args=(i,)) for i in range(len(results))]
        for t in threads:
            t.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        self.assertStatus(self.c.get('/health'), 200)
        etag = self.putOk(c, 'wake-all', '{}')
        self.getOk(c, 'wake-all', b'{}', etag)
        self.assertLess(time.monotonic() - t0, 1.5, 'requests stalled behind long polls')
        for t in threads:
            t.join(10)
        for cl in clients:
            cl.close()
        for i, r in enumerate(results):
            self.assertIsNotNone(r, 'long poll %d never answered' % i)
            resp, elapsed = r
            self.assertStatus(resp, 200)
            self.assertLess(elapsed, 3.0, 'long poll %d not woken promptly' % i)
            self.assertEqual(resp.json['results'],
                             [{'etag': etag, 'collection': c, 'id': 'wake-all', 'deleted': False}])

    def test_pipelined_requests_answered_in_order(self):
        c = self.coll()
        etag = self.putOk(c, 'p', b'{"p":1}')
        path = doc_path(c, 'p')
        reqs = b''.join(('GET %s HTTP/1.1\r\nHost: x\r\n\r\n' % p).encode()
                        for p in (path, '/health', doc_path(c, 'absent'), path))
        sock = self.server.connect()
        try:
            sock.sendall(reqs)
            answers = [(status, body) for status, _, body in read_responses(sock, 4)]
        finally:
            sock.close()
        self.assertEqual(answers, [(200, b'{"p":1}'), (200, b'{"status":"ok"}'),
                                   (404, answers[2][1]), (200, b'{"p":1}')])
        self.assertEqual(json.loads(answers[2][1])['error']['code'], 'not_found')
        self.assertIsEtag(etag)

    def test_failing_writes_do_not_fail_their_batch(self):
        # Group commit: writes from concurrent requests share a transaction.
        # Writes that fail (412, 404) or are unusual (a 512-byte collection
        # name, the longest allowed) must not fail the others in their batch.
        c = self.coll()
        wrong_etag = '"%d"' % (self.putOk(c, 'exists', '{}') + 10**9)
        stop = threading.Event()
        good_failures, odd_statuses = [], {}
        good_ok = [0]
        lock = threading.Lock()

        def good(t):
            client = self.server.client(retry=False)
            n = 0
            while not stop.is_set():
                resp = client.put(doc_path(c, 'g-%d-%d' % (t, n)), b'{"good":true}')
                n += 1
                with lock:
                    if resp.status == 201:
                        good_ok[0] += 1
                    else:
                        good_failures.append(resp.describe())
            client.close()

        def odd(kind):
            client = self.server.client(retry=False)
            for i in range(60):
                if kind == 'if-match':
                    resp = client.put(doc_path(c, 'exists'), b'{}', headers={'If-Match': wrong_etag})
                elif kind == 'if-none-match':
                    resp = client.put(doc_path(c, 'exists'), b'{}', headers={'If-None-Match': '*'})
                elif kind == 'delete-absent':
                    resp = client.delete(doc_path(c, 'absent-%d' % i))
                else:
                    resp = client.put(doc_path('L' * 512, 'x%d' % i), b'{}')
                with lock:
                    odd_statuses.setdefault(kind, {}).setdefault(resp.status, 0)
                    odd_statuses[kind][resp.status] += 1
            client.close()

        threads = [threading.Thread(target=good, args=(t,)) for t in range(6)]
        odd_threads = [threading.Thread(target=odd, args=(k,)) for k in
                       ('if-match', 'if-none-match', 'delete-absent', 'long-collection')]
        for t in threads + odd_threads:
            t.start()
        for t in odd_threads:
            t.join(60)
        stop.set()
        for t in threads:
            t.join(60)
        self.assertEqual(len(good_failures), 0,
                         '%d of %d good PUTs failed while other writes in their batches failed '
                         '(odd writes answered %r); first: %s'
                         % (len(good_failures), len(good_failures) + good_ok[0], odd_statuses,
                            good_failures[:1]))
        self.assertEqual(odd_statuses, {'if-match': {412: 60}, 'if-none-match': {412: 60},
                                        'delete-absent': {404: 60}, 'long-collection': {201: 60}})
        self.assertEqual(self.collection_count(c), 1 + good_ok[0])

    # -- routing & methods -------------------------------------------------
    def test_unknown_routes_404(self):
        # GET / is the web console (API.md, Web console): see test_console_files.
        for method, path in (('GET', '/nope'), ('GET', '/docs'), ('GET', '/ui/nope.js'), ('GET', '/ui'),
                             ('GET', '/docs/c'), ('GET', '/docs/c/x/y'),
                             ('PUT', '/docs/c/x/y'), ('GET', '/collections/x'),
                             ('GET', '/healthz'), ('GET', '/health/x'), ('POST', '/nope'),
                             ('GET', '/Docs/c/x')):
            with self.subTest(method=method, path=path):
                body = b'{}' if method in ('PUT', 'POST') else None
                resp = self.c.request(method, path, body)
                self.assertError(resp, 404, 'not_found')

    def test_console_files(self):
        # API.md, Web console: GET / and /ui/... need no key and hold no data.
        resp = self.c.get('/')
        self.assertEqual(resp.status, 200, resp.describe())
        self.assertTrue(resp.header('Content-Type').startswith('text/html'), resp.describe())
        self.assertIn(b'/ui/console.js', resp.body)
        for path, ctype in (('/ui/console.js', 'text/javascript'), ('/ui/console.css', 'text/css')):
            resp = self.c.get(path)
            self.assertEqual(resp.status, 200, resp.describe())
            self.assertTrue(resp.header('Content-Type').startswith(ctype), resp.describe())
            self.assertEqual(resp.header('X-Content-Type-Options'), 'nosniff')
        resp = self.c.request('POST', '/', b'{}')
        self.assertError(resp, 405, 'method_not_allowed')

    def test_wrong_method_405(self):
        cases = [('PATCH', '/docs/c/x', {'GET', 'PUT', 'DELETE'}),
                 ('POST', '/docs/c/x', {'GET', 'PUT', 'DELETE'}),
                 ('DELETE', '/collections', {'GET'}),
                 ('POST', '/collections', {'GET'}),
                 ('PUT', '/health', {'GET'}),
                 ('DELETE', '/health', {'GET'}),
                 ('POST', '/changes', {'GET'}),
                 ('PUT', '/changes', {'GET'})]
        for method, path, allowed in cases:
            with self.subTest(method=method, path=path):
                body = b'{}' if method in ('PUT', 'POST', 'PATCH') else None
                resp = self.c.request(method, path, body)
                self.assertError(resp, 405, 'method_not_allowed')
                allow = resp.header('Allow')
                self.assertIsNotNone(allow, 'no Allow header: ' + resp.describe())
                listed = {m.strip().upper() for m in allow.split(',') if m.strip()}
                self.assertTrue(allowed <= listed, 'Allow %r lacks %r' % (allow, allowed))
                self.assertNotIn(method, listed)
        # PATCH did not touch the document.
        self.assertAbsent('c', 'x')

    def test_unknown_method(self):
        resp = self.c.request('FROB', '/docs/c/x')
        self.assertIn(resp.status, (405, 501), resp.describe())
        self.assertError(resp, resp.status, ('method_not_allowed', 'not_implemented'))
        self.assertStatus(self.c.get('/health'), 200)


if __name__ == '__main__':
    main()
