"""End-to-end test of deep paging with searchAfter (API.md: Search, "Deep
paging"; docs/http-choices.md, Search) against the real `corvid` binary.

- 50,000 small documents (a few hundred distinct bodies over a dozen words,
  so scores tie in large groups; number, date and keyword sort values from
  small sets, some missing, some several, some integers beyond 2^53) are
  bulk-loaded into a server whose result window is 5,000.
- Walks of every hit with searchAfter, GET (the key as URL-encoded JSON
  text) and POST (a JSON array), page sizes up to the window: by score (a
  brute-force BM25 oracle: every match exactly once, scores within 1e-9,
  order score desc then id asc, the key equal to [score, id]), and by
  number, date and keyword fields ascending, descending and mixed (the
  order and every key value equal to a Python oracle's). `total` is the
  count of all matches on every page; the first window's worth equals offset
  paging.
- Errors: offset + limit over the window (400 result_window_too_large),
  limit alone over it even with searchAfter, offset with searchAfter, and
  malformed keys (not JSON, not an array, wrong length, wrong types) → 400
  invalid_argument; the server keeps serving.
- A field-sorted walk with deletes and new documents between its pages
  returns no document twice and skips none that matched throughout; so does
  one whose documents are rewritten with sort values that cross its key
  both ways (each is returned once, at the value it had when the walk
  began).
- A limit past the window is refused, never capped, under the default
  window and a larger one (which admits limits above 10,000), GET and POST,
  with and without searchAfter; /results bounds its offset by the window.
Run: python3 test_search_after.py --binary build/corvid
"""

import datetime
import json
import math
import os
import random
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corvid_harness import CorvidTestCase, bulk_path, main, q  # noqa: E402

SEED = int(os.environ.get('CORVID_SEED', str(random.randrange(1 << 30))))
DOCS = 50000
WINDOW = 5000
WAIT_MS = 60000
K1, B = 1.2, 0.75
WORDS = ['ant', 'bee', 'cat', 'dog', 'eel', 'fox', 'gnu', 'hen', 'owl', 'pig', 'rat', 'yak']
KEYWORDS = ['', 'alpha', 'beta', 'Gamma', 'delta', 'zeta', 'éclair', 'a b']
BIG = [9007199254740992, 9007199254740993, 9007199254740995, -9007199254740993, 18446744073709551615]
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def bkey(s):
    """Ids and keyword values compare bytewise (UTF-8)."""
    return s.encode('utf-8')


def make_docs(rng):
    bodies = []
    for _ in range(400):
        n = rng.randint(2, 8)
        bodies.append(' '.join(WORDS[min(len(WORDS) - 1, int(abs(rng.gauss(0, 4))))] for _ in range(n)))
    docs = {}
    ids = ['d%06d' % (i * 7919 % 1000003) for i in range(1, DOCS + 1)]
    for doc_id in ids:
        doc = {'id': doc_id, 'body': rng.choice(bodies)}
        r = rng.random()
        if r < 0.9:
            count = 1 if rng.random() < 0.9 else 2
            vals = []
            for _ in range(count):
                x = rng.random()
                vals.append(rng.choice(BIG) if x < 0.01 else rng.randint(0, 40) + 0.5 if x < 0.2
                            else rng.randint(-5, 60))
            doc['n'] = vals[0] if count == 1 else vals
        if rng.random() < 0.9:
            doc['k'] = rng.choice(KEYWORDS) if rng.random() < 0.9 else rng.sample(KEYWORDS, 2)
        if rng.random() < 0.9:
            doc['d'] = '2024-%02d-%02dT%02d:00:00Z' % (rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 1))
        docs[doc_id] = doc
    return docs


def values(doc, field):
    """A document's sort values of `field` ([] when missing)."""
    v = doc.get(field)
    if v is None:
        return []
    v = v if isinstance(v, list) else [v]
    if field == 'd':
        return [int((datetime.datetime.strptime(s, '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=datetime.timezone.utc)
                     - EPOCH).total_seconds() * 1000) for s in v]
    return v


def sort_value(doc, field, desc):
    """The value a document sorts by: its smallest ascending, largest descending."""
    v = values(doc, field)
    if not v:
        return None
    if field == 'k':
        return max(v, key=bkey) if desc else min(v, key=bkey)
    return max(v) if desc else min(v)


def parse_sort(sort):
    return [(s.lstrip('-'), s.startswith('-')) for s in sort.split(',')]


def field_order(docs, sort, ids=None):
    """The brute-force order of a field sort: per key missing last, then id."""
    keys = parse_sort(sort)

    def cmp_key(doc_id):
        doc = docs[doc_id]
        out = []
        for field, desc in keys:
            v = sort_value(doc, field, desc)
            if v is None:
                out.append((1, 0))
                continue
            if field == 'k':
                b = bkey(v)
                out.append((0, tuple(-c for c in b) + (1,) if desc else b))  # descending bytes: negate, shorter last
            else:
                out.append((0, -v if desc else v))
        return out + [bkey(doc_id)]
    return sorted(ids if ids is not None else docs, key=cmp_key)


def expected_key(doc, sort, doc_id):
    return [sort_value(doc, f, d) for f, d in parse_sort(sort)] + [doc_id]


class SearchAfterTest(CorvidTestCase):
    server_args = ['--max-result-window', str(WINDOW)]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        print('CORVID_SEED=%d' % SEED, file=sys.stderr)
        cls.rng = random.Random(SEED)
        cls.docs = make_docs(cls.rng)
        cls.coll_name = 'sa'
        cls.index = 'sa_idx'
        resp = cls.c.put('/indexes/' + cls.index, json.dumps({
            'type': 'search', 'collection': cls.coll_name,
            'fields': {'body': {'analyzer': 'standard'}, 'n': {'type': 'number'},
                       'k': {'analyzer': 'keyword'}, 'd': {'type': 'date'}}}))
        assert resp.status in (200, 201), resp.describe()
        items = list(cls.docs.values())
        last = 0
        for i in range(0, len(items), 10000):
            body = '\n'.join(json.dumps(d, ensure_ascii=False) for d in items[i:i + 10000]) + '\n'
            resp = cls.c.post(bulk_path(cls.coll_name), body, content_type='application/x-ndjson')
            assert resp.status == 200, resp.describe()
            last = resp.json['lastEtag']
        cls.last_etag = last

    # -- requests -------------------------------------------------------------
    def get(self, expect=200, **params):
        if 'searchAfter' in params:
            params['searchAfter'] = json.dumps(params['searchAfter'], ensure_ascii=False)
        params.setdefault('minEtag', self.last_etag)
        params.setdefault('waitMs', WAIT_MS)
        resp = self.c.get('/indexes/%s/search?%s' % (q(self.index), urllib.parse.urlencode(params)))
        self.assertStatus(resp, expect)
        if expect == 200:
            self.assertFalse(resp.json['stale'], resp.describe())
        return resp

    def post(self, expect=200, **params):
        params.setdefault('minEtag', self.last_etag)
        params.setdefault('waitMs', WAIT_MS)
        resp = self.c.post('/indexes/%s/search' % q(self.index), json.dumps(params, ensure_ascii=False))
        self.assertStatus(resp, expect)
        return resp

    def walk(self, method, limit, total, **params):
        """Every hit of a search with searchAfter, `limit` at a time."""
        out = []
        key = None
        send = self.get if method == 'GET' else self.post
        while True:
            p = dict(params, limit=limit)
            if key is not None:
                p['searchAfter'] = key
            ans = send(**p).json
            self.assertEqual(ans['total'], total, 'total counts every match, on every page')
            if not ans['hits']:
                return out
            self.assertLessEqual(len(ans['hits']), limit)
            out.extend(ans['hits'])
            self.assertLessEqual(len(out), total, 'a walk that repeats itself')
            key = ans['hits'][-1]['sort']

    # -- oracle -----------------------------------------------------------------
    def bm25_scores(self, terms):
        """{id: score} of `body:t1 OR body:t2 ...` (API.md's BM25)."""
        toks = {i: d['body'].split() for i, d in self.docs.items()}
        n_docs = len(toks)
        avg = sum(len(t) for t in toks.values()) / n_docs
        out = {}
        for term in terms:
            df = sum(1 for t in toks.values() if term in t)
            idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            for i, t in toks.items():
                tf = t.count(term)
                if tf:
                    out[i] = out.get(i, 0.0) + 1.0 * (idf * tf / (tf + K1 * (1 - B + B * len(t) / avg)))
        return out

    # -- tests ------------------------------------------------------------------
    def test_1_score_walks(self):
        query = 'body:cat OR body:dog'
        oracle = self.bm25_scores(['cat', 'dog'])
        total = len(oracle)
        self.assertGreater(total, 2 * WINDOW)
        first = self.get(q=query, limit=WINDOW).json
        self.assertEqual(first['total'], total)
        # The first window by offset paging.
        by_offset = []
        for off in range(0, WINDOW, 1000):
            by_offset.extend(self.get(q=query, offset=off, limit=1000).json['hits'])
        self.assertEqual(by_offset, first['hits'])
        for method, limit in (('GET', WINDOW), ('POST', 997)):
            ctx = '%s limit=%d seed=%d' % (method, limit, SEED)
            hits = self.walk(method, limit, total, q=query)
            self.assertEqual(hits[:WINDOW], first['hits'], ctx)
            ids = [h['id'] for h in hits]
            self.assertEqual(len(ids), len(set(ids)), 'a hit twice; ' + ctx)
            self.assertEqual(set(ids), set(oracle), ctx)
            for h in hits:
                self.assertEqual(h['sort'], [h['score'], h['id']], ctx)
                e = oracle[h['id']]
                self.assertLessEqual(abs(h['score'] - e), 1e-9 * e, 'score of %s; %s' % (h['id'], ctx))
            for a, b in zip(hits, hits[1:]):
                ok = a['score'] > b['score'] or (a['score'] == b['score'] and bkey(a['id']) < bkey(b['id']))
                self.assertTrue(ok, 'order broken between %r and %r; %s' % (a, b, ctx))
            # Ties: the same body scores the same, so pages cut through large groups of equal scores.
            by_body = {}
            for h in hits:
                by_body.setdefault(self.docs[h['id']]['body'], set()).add(h['score'])
            self.assertTrue(all(len(s) == 1 for s in by_body.values()), ctx)
            self.assertGreater(len(hits) / len(set(h['score'] for h in hits)), 20, 'few ties; ' + ctx)

    def test_2_field_walks(self):
        all_ids = list(self.docs)
        cases = [('n', 'GET', WINDOW), ('-n', 'POST', 3001), ('k', 'GET', 2500), ('-k', 'POST', WINDOW),
                 ('d', 'POST', 4999), ('-d,k', 'GET', WINDOW), ('k,-n,d', 'POST', WINDOW)]
        for sort, method, limit in cases:
            ctx = 'sort=%s %s limit=%d seed=%d' % (sort, method, limit, SEED)
            expected = field_order(self.docs, sort, all_ids)
            hits = self.walk(method, limit, len(self.docs), q='*', sort=sort)
            self.assertEqual([h['id'] for h in hits], expected, ctx)
            for h in hits:
                self.assertEqual(h['score'], 0)
                self.assertEqual(h['sort'], expected_key(self.docs[h['id']], sort, h['id']), ctx)
        # A field sort with _score, and a query: its keys carry the score.
        ans = self.get(q='body:eel', sort='k,_score', limit=1).json
        total = ans['total']
        hits = self.walk('POST', 1000, total, q='body:eel', sort='k,_score')
        self.assertEqual(len(hits), total)
        for a, b in zip(hits, hits[1:]):
            self.assertEqual(a['sort'][1], a['score'])
            ka = (a['sort'][0] is None, bkey(a['sort'][0] or ''), -a['score'], bkey(a['id']))
            kb = (b['sort'][0] is None, bkey(b['sort'][0] or ''), -b['score'], bkey(b['id']))
            self.assertLess(ka, kb, 'k,_score order between %r and %r' % (a, b))

    def test_3_window_and_errors(self):
        # The window bounds offset + limit, and limit alone with searchAfter.
        err = self.assertError(self.get(expect=400, q='*', offset=WINDOW - 10, limit=11), 400,
                               'result_window_too_large')
        self.assertIn('searchAfter', err['message'])
        self.assertError(self.get(expect=400, q='*', limit=WINDOW + 1, searchAfter=[1, 'x'], sort='n'), 400,
                         'result_window_too_large')
        self.get(q='*', limit=WINDOW, sort='n', searchAfter=[None, 'd']).json
        # Past the window: a key from deep in the order.
        deep = self.walk('GET', WINDOW, DOCS, q='*', sort='n')[3 * WINDOW]
        ans = self.get(q='*', sort='n', limit=2, searchAfter=deep['sort']).json
        self.assertEqual(ans['total'], DOCS)
        self.assertEqual([h['id'] for h in ans['hits']],
                         field_order(self.docs, 'n')[3 * WINDOW + 1:3 * WINDOW + 3])
        bad = [
            ({'searchAfter': 5}, 'must be an array'),
            ({'searchAfter': 'x'}, 'must be an array'),
            ({'searchAfter': {'a': 1}}, 'must be an array'),
            ({'searchAfter': [[1], 'x']}, 'searchAfter[0] must be a number, a string or null'),
            ({'searchAfter': [True, 'x']}, 'searchAfter[0] must be a number, a string or null'),
            ({'searchAfter': [1.5]}, 'expected 2 values'),
            ({'searchAfter': []}, 'expected 2 values'),
            ({'searchAfter': [1.5, 'x', 'y']}, 'expected 2 values'),
            ({'searchAfter': ['1.5', 'x']}, "searchAfter[0]: _score takes a number, got a string"),
            ({'searchAfter': [1.5, 7]}, 'searchAfter[1]: the document id takes a string'),
            ({'sort': 'n', 'searchAfter': ['7', 'x']}, "sort field 'n' takes a number or null"),
            ({'sort': 'k', 'searchAfter': [7, 'x']}, "sort field 'k' takes a string or null"),
            ({'sort': 'd', 'searchAfter': ['2024-01-01', 'x']}, "sort field 'd' takes a number"),
            ({'sort': 'k,n', 'searchAfter': ['a', 'x']}, 'expected 3 values'),
            ({'searchAfter': [1.5, 'x'], 'offset': 3}, 'offset must be 0 with searchAfter'),
        ]
        for params, message in bad:
            for method in ('GET', 'POST'):
                p = dict(params, q='body:cat')
                resp = (self.get if method == 'GET' else self.post)(expect=400, **p)
                err = self.assertError(resp, 400, 'invalid_argument')
                self.assertIn(message, err['message'], '%s %r' % (method, params))
        # Not JSON, in a query string.
        for text in ('[1.5,', 'abc', '', '[1.5,"x"]]', '[1e999,"x"]', '[' * 2000 + ']' * 2000):
            resp = self.c.get('/indexes/%s/search?%s' % (q(self.index), urllib.parse.urlencode(
                {'q': 'body:cat', 'searchAfter': text})))
            err = self.assertError(resp, 400, 'invalid_argument')
            self.assertIn('searchAfter', err['message'])
        self.assertServerHealthy()
        ans = self.get(q='body:cat', limit=3, searchAfter=[1e9, '']).json
        self.assertEqual(len(ans['hits']), 3)

    def test_4_writes_between_pages(self):
        """Runs last: it deletes and adds documents."""
        rng = random.Random(SEED + 1)
        sort = 'k,-n'
        live = set(self.docs)
        initial = set(self.docs)
        deleted, seen = set(), []
        key = None
        etag = self.last_etag
        fresh = 0
        while True:
            p = dict(q='*', sort=sort, limit=2500, minEtag=etag)
            if key is not None:
                p['searchAfter'] = key
            ans = self.get(**p).json
            if not ans['hits']:
                break
            for h in ans['hits']:
                self.assertNotIn(h['id'], deleted, 'deleted before this page')
            seen.extend(h['id'] for h in ans['hits'])
            key = ans['hits'][-1]['sort']
            lines = [{'id': i, '_deleted': True} for i in rng.sample(sorted(live), 200)]
            for ln in lines:
                live.discard(ln['id'])
                deleted.add(ln['id'])
            for _ in range(100):
                fresh += 1
                doc = {'id': 'new%05d' % fresh, 'body': 'cat',
                       'k': rng.choice(KEYWORDS), 'n': rng.randint(-5, 60)}
                lines.append(doc)
                live.add(doc['id'])
                self.docs[doc['id']] = doc
            body = '\n'.join(json.dumps(d, ensure_ascii=False) for d in lines) + '\n'
            resp = self.c.post(bulk_path(self.coll_name), body, content_type='application/x-ndjson')
            self.assertStatus(resp, 200)
            etag = resp.json['lastEtag']
        self.assertEqual(len(seen), len(set(seen)), 'a document twice')
        missing = (initial - deleted) - set(seen)
        self.assertFalse(missing, '%d documents that matched throughout were skipped' % len(missing))
        self.assertEqual(seen, field_order(self.docs, sort, seen), 'the walk is in key order')
        self.assertServerHealthy()


def walk_page(case, index, sort, limit, key, etag):
    """One page of a walk over t:word (GET, the key as JSON text), once the
    index has `etag`: its hits."""
    params = {'q': 't:word', 'sort': sort, 'limit': limit, 'minEtag': etag, 'waitMs': WAIT_MS}
    if key is not None:
        params['searchAfter'] = json.dumps(key)
    resp = case.c.get('/indexes/%s/search?%s' % (q(index), urllib.parse.urlencode(params)))
    case.assertStatus(resp, 200)
    return resp.json['hits']


class ScoreTieBreakWalkTest(CorvidTestCase):
    """API.md: with a field sort a walk is exact under concurrent writes;
    `_score` may be its tie-break. Every write moves every score (N, n and
    the average length change), so a key's score read as written sends the
    walk back over the documents it has returned (it never ended). Here the
    tied documents all have 6 tokens, so their scores keep their order
    whatever the writes, and the walk must return each exactly once."""

    def test_writes_between_pages_of_a_score_tie_break(self):
        c = self.coll()
        resp = self.c.put('/indexes/' + c, json.dumps({
            'type': 'search', 'collection': c,
            'fields': {'t': {'analyzer': 'standard'}, 'n': {'type': 'number'}}}))
        self.assertIn(resp.status, (200, 201), resp.describe())
        docs = [{'id': 'd%02d' % i, 'n': i % 2, 't': ' '.join(['word'] * (1 + i % 5) + ['pad'] * (5 - i % 5))}
                for i in range(30)]
        body = '\n'.join(json.dumps(d) for d in docs) + '\n'
        resp = self.c.post(bulk_path(c), body, content_type='application/x-ndjson')
        self.assertStatus(resp, 200)
        etag = resp.json['lastEtag']
        initial, deleted, seen = {d['id'] for d in docs}, set(), []
        rng = random.Random(SEED)
        key, fresh = None, 0
        for _ in range(100):
            hits = walk_page(self, c, 'n,_score', 3, key, etag)
            if not hits:
                break
            seen.extend(h['id'] for h in hits)
            key = hits[-1]['sort']
            # A write between pages: new matches (longer, so they change the
            # average length) and a delete of one not yet seen.
            lines = []
            for _ in range(2):
                fresh += 1
                lines.append({'id': 'new%03d' % fresh, 'n': rng.choice([0, 1, 5]), 't': 'word ' * rng.randint(1, 9)})
            left = sorted(initial - deleted - set(seen))
            if len(left) > 5:
                gone = rng.choice(left)
                deleted.add(gone)
                lines.append({'id': gone, '_deleted': True})
            body = '\n'.join(json.dumps(d) for d in lines) + '\n'
            resp = self.c.post(bulk_path(c), body, content_type='application/x-ndjson')
            self.assertStatus(resp, 200)
            etag = resp.json['lastEtag']
        else:
            self.fail('the walk did not end in 100 pages: %d hits, %d distinct' % (len(seen), len(set(seen))))
        self.assertEqual(len(seen), len(set(seen)), 'a document twice: %r' % seen)
        missing = (initial - deleted) - set(seen)
        self.assertFalse(missing, 'documents that matched throughout were skipped: %r' % sorted(missing))


class FieldWalkUnderRewritesTest(CorvidTestCase):
    """API.md: with a field sort a walk is exact under concurrent writes.
    Between pages, documents are rewritten with new sort values that cross
    the walk's key both ways (one already returned moves ahead of it: read
    as the index is now, it would come back; one not yet returned moves
    behind it: it would be skipped), some are deleted and some added. The
    walk returns every document that matched throughout exactly once, each
    at the value it had when the walk began (docs/http-choices.md), none
    deleted before its page and none added since."""

    def test_rewrites_between_pages(self):
        c = self.coll()
        resp = self.c.put('/indexes/' + c, json.dumps({
            'type': 'search', 'collection': c,
            'fields': {'t': {'analyzer': 'standard'}, 'n': {'type': 'number'}, 'k': {'analyzer': 'keyword'}}}))
        self.assertIn(resp.status, (200, 201), resp.describe())
        rng = random.Random(SEED + 2)
        docs = {'d%03d' % i: {'t': 'word', 'n': rng.randint(0, 999), 'k': rng.choice('abc')} for i in range(400)}
        body = ''.join(json.dumps(dict(id=i, **d)) + '\n' for i, d in docs.items())
        resp = self.c.post(bulk_path(c), body, content_type='application/x-ndjson')
        self.assertStatus(resp, 200)
        etag = resp.json['lastEtag']
        for sort in ('n', '-n', 'k,-n'):
            with self.subTest(sort=sort):
                began = {i: dict(d) for i, d in docs.items()}
                seen, deleted, fresh, key, crossed = [], set(), 0, None, 0
                for _ in range(200):
                    hits = walk_page(self, c, sort, 9, key, etag)
                    if not hits:
                        break
                    for h in hits:
                        self.assertNotIn(h['id'], deleted, 'deleted before this page')
                        self.assertIn(h['id'], began, 'added after the walk began')
                        self.assertEqual(h['sort'][-2], began[h['id']]['n'], 'not where the walk found it: %r' % h)
                    seen.extend(h['id'] for h in hits)
                    key = hits[-1]['sort']
                    # Rewrites: one already returned moved past the key, one not
                    # yet returned moved behind it, a few anywhere; a delete of
                    # one not yet returned; a new document.
                    lines, returned = [], set(seen)
                    ahead = [i for i in docs if i in returned]
                    behind = [i for i in docs if i not in returned]
                    first, last = (0, 999) if not sort.startswith('-') else (999, 0)
                    for group, value in ((ahead, last), (behind, first)):
                        if group:
                            i = rng.choice(group)
                            docs[i]['n'] = value
                            lines.append(dict(id=i, **docs[i]))
                            crossed += 1
                    for i in rng.sample(sorted(docs), 4):
                        docs[i]['n'] = rng.randint(0, 999)
                        lines.append(dict(id=i, **docs[i]))
                    if len(behind) > 3:
                        gone = rng.choice(behind)
                        deleted.add(gone)
                        del docs[gone]
                        lines.append({'id': gone, '_deleted': True})
                    fresh += 1
                    new_id = 'new-%s-%03d' % (sort, fresh)
                    docs[new_id] = {'t': 'word', 'n': rng.randint(0, 999), 'k': 'a'}
                    lines.append(dict(id=new_id, **docs[new_id]))
                    resp = self.c.post(bulk_path(c), ''.join(json.dumps(d) + '\n' for d in lines),
                                       content_type='application/x-ndjson')
                    self.assertStatus(resp, 200)
                    etag = resp.json['lastEtag']
                else:
                    self.fail('the walk did not end in 200 pages')
                self.assertGreater(crossed, 40)
                self.assertEqual(len(seen), len(set(seen)), 'a document twice')
                missing = set(began) - deleted - set(seen)
                self.assertFalse(missing, 'documents that matched throughout were skipped: %r' % sorted(missing))
        self.assertServerHealthy()


class LimitWindowTest(CorvidTestCase):
    """A limit past the window is refused, never capped (API.md, Deep
    paging): with the default window of 10,000 (limit=10001 once answered
    200 with 10,000 hits), and under a larger --max-result-window, which
    admits larger limits (they were capped at 10,000 whatever the window).
    /results bounds its offset by the same window."""
    DOCS = 10050        # more than the default window
    server_args = []    # the default window: 10,000

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        coll = 'lw'
        for name, definition in (('lw_s', {'type': 'search', 'collection': coll, 'fields': {'body': {}, 'i': {'type': 'number'}}}),
                                 ('lw_m', {'type': 'mapreduce', 'collection': coll, 'map': {'i': 'i'},
                                           'groupBy': ['i'], 'reduce': {'c': 'count()'}})):
            resp = cls.c.put('/indexes/' + name, json.dumps(definition))
            assert resp.status == 201, resp.describe()
        body = ''.join(json.dumps({'id': 'd%05d' % i, 'body': 'dogs', 'i': i}) + '\n' for i in range(cls.DOCS))
        resp = cls.c.post(bulk_path(coll), body, content_type='application/x-ndjson')
        assert resp.status == 200, resp.describe()
        cls.last_etag = resp.json['lastEtag']

    def search(self, method, **params):
        params.update(minEtag=self.last_etag, waitMs=WAIT_MS)
        if method == 'GET':
            if 'searchAfter' in params:
                params['searchAfter'] = json.dumps(params['searchAfter'])
            return self.c.get('/indexes/lw_s/search?' + urllib.parse.urlencode(params))
        return self.c.post('/indexes/lw_s/search', json.dumps(params))

    def check_window(self, window):
        for method in ('GET', 'POST'):
            for params in ({'q': 'dogs', 'limit': window + 1}, {'q': 'dogs', 'limit': window + 1, 'offset': 0},
                           {'q': 'dogs', 'limit': 1, 'offset': window},
                           {'q': 'dogs', 'limit': 10 ** 19, 'offset': 5},   # no sum wraps around
                           {'q': 'dogs', 'limit': window + 1, 'searchAfter': [1.0, 'd00007']},
                           {'q': '*', 'sort': 'i', 'limit': window + 1, 'searchAfter': [None, 'd00007']}):
                with self.subTest(method=method, params=params):
                    err = self.assertError(self.search(method, **params), 400, 'result_window_too_large')
                    self.assertIn('at most %d (--max-result-window)' % window, err['message'])
            ans = self.search(method, q='dogs', limit=window)
            self.assertStatus(ans, 200)
            self.assertEqual(ans.json['total'], self.DOCS)
            self.assertEqual(len(ans.json['hits']), min(window, self.DOCS), method)
            ans = self.search(method, q='dogs', limit=window - 3, offset=3)
            self.assertStatus(ans, 200)
            self.assertEqual(len(ans.json['hits']), min(window - 3, self.DOCS - 3), method)
        # /results: its offset is bounded by the window; its limit is not (default 10,000).
        path = '/indexes/lw_m/results?minEtag=%d&waitMs=%d&' % (self.last_etag, WAIT_MS)
        self.assertError(self.c.get(path + 'offset=%d' % (window + 1)), 400, 'result_window_too_large')
        ans = self.c.get(path + 'offset=%d' % window)
        self.assertStatus(ans, 200)
        self.assertEqual(len(ans.json['rows']), max(0, self.DOCS - window))
        ans = self.c.get(path + 'limit=%d' % (window + 1))
        self.assertStatus(ans, 200)
        self.assertEqual(len(ans.json['rows']), min(window + 1, self.DOCS))

    def test_limit_past_the_window(self):
        self.check_window(10000)


class LargerWindowTest(LimitWindowTest):
    """--max-result-window above 10,000 admits limits above 10,000."""
    server_args = ['--max-result-window', '10040']

    def test_limit_past_the_window(self):
        self.check_window(10040)


if __name__ == '__main__':
    main()
