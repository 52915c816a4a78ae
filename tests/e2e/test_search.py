"""End-to-end tests of search indexes (API.md: Search index, Search, Queries
freshness, /admin/analyze; the Search section of docs/http-choices.md; the
query semantics of postings/README.md and the scoring rules at the top of
postings/searcher.cc) against the real `corvid` binary.

- Oracle: a seeded random corpus (English, accented French/German, a few CJK
  phrases; duplicate documents for exact score ties; stop-word-only bodies;
  multi-valued and missing number/date/tag values) in a collection with a
  title (standard, boost 2), a body (english), tags (keyword, facet), a
  number and a date field. The oracle's token streams come from
  POST /admin/analyze for every field value, so it needs no analyzer of its
  own. It evaluates random queries of every type by brute force (terms,
  field:term, AND/OR/NOT/+/- under op=or and op=and with Lucene's clause
  rules, parentheses, field groups, ^boosts, phrases with slop, prefix, fuzzy,
  number/date/term ranges, numeric equality, field:*, filter) and scores them
  with BM25 exactly as API.md and searcher.cc define it. Every query checks:
  total, the matching id set (limit 10000), every score within 1e-6 relative,
  the full order (score desc, id asc), and that the limit=10 answer (where
  MaxScore pruning applies) equals the first 10 of the full answer. All
  scoring rules in searcher.cc are reproduced (phrases: sum of the BM25 of
  their distinct terms; prefix/fuzzy: sum over the expanded terms the
  document has), so no query type is checked on sets only.
  The seed is printed; CORVID_SEED=<n> replays it.
- Updates and deletes (single PUT/DELETE and bulk `_deleted`) then the
  oracle again under minEtag/waitMs; stale/indexEtag/tookMs on every answer;
  a future minEtag with waitMs=300 answers stale:true.
- Features: sort (number/date/keyword, asc/desc, missing last, _score then
  id tie-breaks), offset/limit paging, fields (default store, list, `*`,
  as indexed while the index is paused and stale),
  highlight, facets vs the oracle, POST == GET, syntax errors (400
  invalid_query with the offset), unknown sort/facet fields, search on a
  map/reduce index, invalid definitions.
- Crash: ~20k documents bulk-loaded with the index defined, kill -9 while it
  indexes, restart, wait until fresh; answers equal those of a fresh index
  with the same definition over the same data.

Run: python3 test_search.py --binary build/corvid
"""

import datetime
import json
import math
import os
import random
import re
import sys
import time
import unicodedata
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corvid_harness import CorvidServer, CorvidTestCase, bulk_path, doc_path, main, q  # noqa: E402

SEED = int(os.environ.get('CORVID_SEED', str(random.randrange(1 << 30))))
WAIT_MS = 20000
REL_TOL = 1e-6        # scores: relative tolerance (API.md: exact BM25)
ORDER_TOL = 1e-9      # oracle-side slack when checking the order of near-equal scores
K1, B = 1.2, 0.75
ANSWER_KEYS = {'total', 'hits', 'stale', 'indexEtag', 'tookMs'}

print('test_search.py: CORVID_SEED=%d' % SEED, flush=True)

# ---------------------------------------------------------------------------
# Corpus material

ENGLISH = ('dog dogs running runs ran cat cats happy happiness house houses river quick quickly '
           'brown fox jumps jumping lazy garden gardens computer computing compute search '
           'searching engine engines index indexes indexing document documents store storage '
           'query queries memory disk fast faster fastest slow network server servers client light '
           'night nights music musical write writes writing written read reading book books paper '
           'green blue red apple apples orange table tables mountain city cities summer winter '
           'water fire stone stones bridge tree trees forest animal animals bird birds fly flying '
           'e-mail wi-fi 3.14 x86_64 c++ 2024 relational connection connected').split()
STOP = 'the a an and of to in is it not on with for be'.split()
FRENCH = 'éléphant éléphants château fenêtre où garçon naïve français crème brûlée déjà été'.split()
GERMAN = 'straße größe müller über schön mädchen fußball grüße Äpfel'.split()
CJK = ['東京タワーに行きました', '北京大学的学生', '日本語の文章を書く', '我们在学习中文',
       '한국어 문장입니다']
TAGS = ['rust', 'go', 'python', 'c++', 'java', 'web', 'db', 'ml', 'ops', 'ui', 'Café', 'data-eng']
MISC = ['ﬁre', 'Ｗａｔｅｒ', 'ＤＯＧ', 'Ⅻ']  # ligature, full-width, roman numeral: NFKC_Casefold
ALL_WORDS = ENGLISH + FRENCH + GERMAN + MISC

DEFINITION_FIELDS = {
    'title': {'analyzer': 'standard', 'boost': 2.0},
    'body': {'analyzer': 'english'},
    'tags': {'analyzer': 'keyword', 'facet': True},
    'n': {'type': 'number'},
    'd': {'type': 'date'},
}
TEXT_FIELDS = [('title', 'standard', 2.0), ('body', 'english', 1.0), ('tags', 'keyword', 1.0)]
TEXT = {name: (an, boost) for name, an, boost in TEXT_FIELDS}
NUMERIC = {'n': 'number', 'd': 'date'}


def search_definition(collection, store=('title', 'n')):
    return {'type': 'search', 'collection': collection, 'fields': DEFINITION_FIELDS,
            'store': list(store)}


def zipf_word(rng, words):
    # Zipf-ish: low indexes much more frequent.
    i = int(len(words) * (rng.random() ** 2.2))
    return words[min(i, len(words) - 1)]


def cap(rng, w):
    return w[:1].upper() + w[1:] if rng.random() < 0.2 else w


def random_text(rng, lo, hi, stop_rate=0.25):
    words = []
    for _ in range(rng.randint(lo, hi)):
        r = rng.random()
        if r < stop_rate:
            words.append(rng.choice(STOP))
        elif r < stop_rate + 0.08:
            words.append(rng.choice(FRENCH))
        elif r < stop_rate + 0.14:
            words.append(rng.choice(GERMAN))
        elif r < stop_rate + 0.16:
            words.append(rng.choice(MISC))
        else:
            words.append(zipf_word(rng, ENGLISH))
        words[-1] = cap(rng, words[-1])
        if rng.random() < 0.1:
            words[-1] += rng.choice([',', '.', ';', '!', '?'])
    if rng.random() < 0.05:
        words.insert(rng.randint(0, len(words)), rng.choice(CJK))
    return ' '.join(words)


def random_date(rng):
    day = datetime.date(2023, 1, 1) + datetime.timedelta(days=rng.randint(0, 900))
    if rng.random() < 0.6:
        return day.isoformat()
    return '%sT%02d:%02d:%02dZ' % (day.isoformat(), rng.randint(0, 23), rng.randint(0, 59),
                                    rng.randint(0, 59))


def random_number(rng):
    r = rng.random()
    if r < 0.7:
        return rng.randint(0, 40)
    if r < 0.9:
        return rng.randint(0, 80) / 2.0
    return -rng.randint(1, 20)


def random_doc(rng, doc_id):
    doc = {'id': doc_id}
    if rng.random() < 0.92:
        doc['title'] = random_text(rng, 1, 7, stop_rate=0.1)
    r = rng.random()
    if r < 0.04:
        doc['body'] = ' '.join(rng.choice(STOP) for _ in range(rng.randint(1, 4)))  # no tokens
    elif r < 0.96:
        doc['body'] = random_text(rng, 3, 60)
    r = rng.random()
    if r < 0.03:
        doc['tags'] = [rng.choice(TAGS)] * 2  # a repeated value: tf 2, counted once in facets
    elif r < 0.75:
        doc['tags'] = rng.sample(TAGS, rng.randint(0, 3))
    elif r < 0.85:
        doc['tags'] = rng.choice(TAGS)
    r = rng.random()
    if r < 0.75:
        doc['n'] = random_number(rng)
    elif r < 0.85:
        doc['n'] = [random_number(rng) for _ in range(rng.randint(1, 3))]
    elif r < 0.87:
        doc['n'] = 'not a number'  # an index error: the value is skipped
    if rng.random() < 0.85:
        doc['d'] = random_date(rng) if rng.random() < 0.9 else [random_date(rng), random_date(rng)]
    return doc


def random_corpus(rng, count):
    docs = []
    for i in range(count):
        doc_id = 'd%04d' % i
        r = rng.random()
        if r < 0.03:
            doc_id = 'É%03d' % i       # non-ASCII ids: bytewise tie-break
        elif r < 0.06:
            doc_id = 'Z%03d' % i       # upper case sorts before lower case
        docs.append(random_doc(rng, doc_id))
    # Exact duplicates under other ids: exact score ties, broken by id.
    for i in range(count // 20):
        src = rng.choice(docs[:count])
        dup = dict(src)
        dup['id'] = 'dup%03d_%s' % (i, src['id'])
        docs.append(dup)
    return docs


def iso_ms(s):
    """ISO-8601 (date or date-time with Z) → epoch milliseconds, UTC."""
    if 'T' in s:
        dt = datetime.datetime.strptime(s, '%Y-%m-%dT%H:%M:%SZ')
    else:
        dt = datetime.datetime.strptime(s, '%Y-%m-%d')
    dt = dt.replace(tzinfo=datetime.timezone.utc)
    return int(round(dt.timestamp() * 1000))


def osa_distance(a, b):
    """Optimal-string-alignment distance on code points."""
    n, m = len(a), len(b)
    d = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        d[i][0] = i
    for j in range(m + 1):
        d[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            v = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                v = min(v, d[i - 2][j - 2] + 1)
            d[i][j] = v
    return d[n][m]


def bkey(s):
    return s.encode('utf-8')


# ---------------------------------------------------------------------------
# The oracle


class Analyzer:
    """POST /admin/analyze with a cache: (analyzer, text) → [(term, position, start, end)]."""

    def __init__(self, client):
        self.c = client
        self.cache = {}

    def __call__(self, analyzer, text):
        key = (analyzer, text)
        if key not in self.cache:
            resp = self.c.post('/admin/analyze', json.dumps({'analyzer': analyzer, 'text': text}))
            if resp.status != 200 or not isinstance(resp.json, dict):
                raise AssertionError('analyze failed: ' + resp.describe())
            self.cache[key] = [(t['term'], t['position'], t['start'], t['end'])
                               for t in resp.json['tokens']]
        return self.cache[key]


class FieldData:
    __slots__ = ('length', 'tf', 'pos')

    def __init__(self):
        self.length = 0
        self.tf = {}
        self.pos = {}


class Oracle:
    """The live documents of one collection, analyzed through the server's
    analyzers, and a brute-force evaluator of query trees."""

    def __init__(self, analyze):
        self.analyze = analyze
        self.docs = {}      # id → document
        self.text = {}      # id → {field: FieldData}
        self.nums = {}      # id → {'n': [float], 'd': [ms]}

    # -- documents --------------------------------------------------------
    def put(self, doc):
        doc_id = doc['id']
        self.docs[doc_id] = doc
        fields = {}
        for name, an, _ in TEXT_FIELDS:
            fd = FieldData()
            v = doc.get(name)
            values = v if isinstance(v, list) else ([] if v is None else [v])
            assert len(values) <= 1 or an == 'keyword', 'arrays only in keyword fields'
            for val in values:
                for term, p, _, _ in self.analyze(an, val):
                    fd.length += 1
                    fd.tf[term] = fd.tf.get(term, 0) + 1
                    fd.pos.setdefault(term, []).append(p)
            fields[name] = fd
        self.text[doc_id] = fields
        nums = {}
        for name, kind in NUMERIC.items():
            v = doc.get(name)
            values = v if isinstance(v, list) else ([] if v is None else [v])
            out = []
            for val in values:
                if kind == 'number' and isinstance(val, (int, float)) and not isinstance(val, bool):
                    out.append(float(val))
                elif kind == 'date' and isinstance(val, str):
                    out.append(float(iso_ms(val)))
            nums[name] = out
        self.nums[doc_id] = nums

    def delete(self, doc_id):
        self.docs.pop(doc_id, None)
        self.text.pop(doc_id, None)
        self.nums.pop(doc_id, None)

    # -- statistics ---------------------------------------------------------
    def stats(self):
        """Per text field: (N, avglen, df: {term: n}) over live documents."""
        out = {}
        for name, _, _ in TEXT_FIELDS:
            n_docs, total, df = 0, 0, {}
            for fields in self.text.values():
                fd = fields[name]
                if fd.length > 0:
                    n_docs += 1
                    total += fd.length
                for term in fd.tf:
                    df[term] = df.get(term, 0) + 1
            out[name] = (n_docs, total / n_docs if n_docs else 0.0, df)
        return out

    def dictionary(self, field):
        terms = set()
        for fields in self.text.values():
            terms.update(fields[field].tf)
        return terms

    # -- evaluation -----------------------------------------------------------
    def evaluate(self, node, op='or', filt=None, filt_op=None):
        """Returns {id: score} of the matching live documents."""
        self._stats = self.stats()
        self._dicts = {}
        res = self._eval(node, None, 1.0, op)
        if res is None:  # dropped
            res = {}
        if filt is not None:
            fres = self._eval(filt, None, 1.0, filt_op or op)
            fres = {} if fres is None else fres
            res = {k: v for k, v in res.items() if k in fres}
        return res

    def _dict(self, field):
        if field not in self._dicts:
            self._dicts[field] = self.dictionary(field)
        return self._dicts[field]

    def _bm25(self, field, term, doc_id, weight):
        n_docs, avg, df = self._stats[field]
        n = df.get(term, 0)
        idf = math.log(1.0 + (n_docs - n + 0.5) / (n + 0.5))
        fd = self.text[doc_id][field]
        tf = fd.tf[term]
        return weight * idf * tf / (tf + K1 * (1 - B + B * fd.length / avg))

    def _alt_scores(self, field, terms, rel, slop, weight):
        """One alternative (a term or a phrase in one field): {id: score}."""
        out = {}
        distinct = []
        for t in terms:
            if t not in distinct:
                distinct.append(t)
        for doc_id, fields in self.text.items():
            fd = fields[field]
            if any(t not in fd.tf for t in terms):
                continue
            if len(terms) > 1 and not phrase_matches([fd.pos[t] for t in terms], rel, slop):
                continue
            out[doc_id] = sum(self._bm25(field, t, doc_id, weight) for t in distinct)
        return out

    def _normalize_multi(self, field, text):
        """A prefix/fuzzy word or a range bound: NFKC_Casefold of the whole
        text (Lucene's Analyzer.normalize), as is for keyword fields."""
        if TEXT[field][0] == 'keyword':
            return text
        return unicodedata.normalize('NFKC', unicodedata.normalize('NFKC', text).casefold())

    def _numeric_match(self, field, pred):
        return {i: 0.0 for i, nums in self.nums.items() if any(pred(v) for v in nums[field])}

    def _parse_num(self, field, s):
        if NUMERIC[field] == 'date':
            return float(iso_ms(s))
        return float(s)

    def _period(self, field, s):
        """[start, end): a date names a whole day or second (docs/http-choices.md);
        a number is a point (end == start)."""
        start = self._parse_num(field, s)
        if NUMERIC[field] != 'date':
            return start, start
        return start, start + (1000.0 if 'T' in s else 86400000.0)

    def _eval(self, node, dfield, boost, op):
        """{id: score}, or None when the clause is dropped (no token)."""
        kind = node[0]
        if kind == 'all':
            return {i: 0.0 for i in self.docs}
        if kind == 'group':
            _, clauses, gboost = node
            boost *= gboost
            occ = occurrences(clauses, op)
            must, should, mustnot = [], [], []
            for (conj, mod, child), o in zip(clauses, occ):
                r = self._eval(child, dfield, boost, op)
                if r is None:
                    continue
                (must if o == 'must' else should if o == 'should' else mustnot).append(r)
            if not (must or should or mustnot):
                return None
            if must:
                ids = set(must[0])
                for r in must[1:]:
                    ids &= set(r)
            elif should:
                ids = set()
                for r in should:
                    ids |= set(r)
            else:
                ids = set(self.docs)
            for r in mustnot:
                ids -= set(r)
            out = {}
            for i in ids:
                out[i] = sum(r[i] for r in must + should if i in r)
            return out
        if kind == 'fgroup':
            _, field, inner = node
            return self._eval(inner, field, boost, op)
        if kind == 'exists':
            return self._eval(('range', node[1], None, None, True, True, 1.0), None, boost, op)
        field = node[1] if node[1] is not None else dfield
        if kind == 'range':
            _, _, lo, hi, lo_incl, hi_incl, _ = node
            if field in NUMERIC:
                # A date bound stands for its period: [lo.. from its start,
                # {lo.. after its end, ..hi] up to its end, ..hi} before its start.
                def pred(v):
                    if lo is not None:
                        start, end = self._period(field, lo)
                        if lo_incl and v < start:
                            return False
                        if not lo_incl and (v < end if end > start else v <= start):
                            return False
                    if hi is not None:
                        start, end = self._period(field, hi)
                        if hi_incl and (v >= end if end > start else v > start):
                            return False
                        if not hi_incl and v >= start:
                            return False
                    return True
                return self._numeric_match(field, pred)
            lo_b = None if lo is None else bkey(self._normalize_multi(field, lo))
            hi_b = None if hi is None else bkey(self._normalize_multi(field, hi))
            out = {}
            for doc_id, fields in self.text.items():
                for t in fields[field].tf:
                    tb = bkey(t)
                    if lo_b is not None and (tb < lo_b or (tb == lo_b and not lo_incl)):
                        continue
                    if hi_b is not None and (tb > hi_b or (tb == hi_b and not hi_incl)):
                        continue
                    out[doc_id] = 0.0
                    break
            return out
        boost *= node[-1]
        if field in NUMERIC:  # numeric equality; a date matches its whole day or second
            start, end = self._period(field, node[2])
            return self._numeric_match(field, lambda x: start <= x < end if end > start else x == start)
        fields = [field] if field is not None else [f for f, _, _ in TEXT_FIELDS]
        out = {}
        any_tokens = False
        for f in fields:
            an, fboost = TEXT[f]
            weight = fboost * boost
            alts = []
            if kind in ('term', 'phrase'):
                toks = self.analyze(an, node[2])
                if not toks:
                    continue
                any_tokens = True
                slop = node[3] if kind == 'phrase' else 0
                alts.append(([t[0] for t in toks], [t[1] - toks[0][1] for t in toks], slop))
            else:
                any_tokens = True
                t = self._normalize_multi(f, node[2]) if kind != 'wildcard' else None
                if kind == 'prefix':
                    exp = [x for x in self._dict(f) if bkey(x).startswith(bkey(t))]
                elif kind == 'wildcard':
                    # Each run between wildcards normalized; '?' is one code
                    # point, '*' any run (Python's str is code points).
                    parts = re.split(r'([*?])', node[2])
                    rx = ''.join('.*' if p == '*' else '.' if p == '?' else
                                 re.escape(self._normalize_multi(f, p)) for p in parts)
                    exp = [x for x in self._dict(f) if re.fullmatch(rx, x, re.S)]
                else:
                    edits = 2 if node[3] is None else node[3]
                    exp = [x for x in self._dict(f) if osa_distance(x, t) <= edits]
                for x in sorted(exp):
                    alts.append(([x], [0], 0))
            for terms, rel, slop in alts:
                for doc_id, s in self._alt_scores(f, terms, rel, slop, weight).items():
                    out[doc_id] = out.get(doc_id, 0.0) + s
        if not any_tokens:
            return None
        return out

    # -- other oracle answers --------------------------------------------------
    def facets(self, ids, field='tags'):
        counts = {}
        for i in ids:
            for t in self.text[i][field].tf:
                counts[t] = counts.get(t, 0) + 1
        return sorted(counts.items(), key=lambda kv: (-kv[1], bkey(kv[0])))

    def sort_value(self, doc_id, field, desc=False):
        """A multi-valued field sorts by its smallest value ascending and its
        largest descending (Elasticsearch's default sort mode)."""
        pick = max if desc else min
        if field in NUMERIC:
            vals = self.nums[doc_id][field]
            return pick(vals) if vals else None
        terms = self.text[doc_id][field].tf
        return pick(terms, key=bkey) if terms else None


def phrase_matches(pos, rel, slop):
    """searcher.cc: distinct positions p_i exist (a repeated word needs one per
    repetition) with max(p_i - r_i) - min(p_i - r_i) <= slop."""
    def choose(i, chosen, lo, hi):
        if i == len(pos):
            return True
        for p in pos[i]:
            q = p - rel[i]
            nlo, nhi = min(lo, q), max(hi, q)
            if p not in chosen and nhi - nlo <= slop and choose(i + 1, chosen + [p], nlo, nhi):
                return True
        return False
    return choose(0, [], math.inf, -math.inf)


def occurrences(clauses, op):
    """Lucene QueryParser.addClause: the occurrence of each (conj, mod, q)."""
    occ = []
    for conj, mod, _ in clauses:
        conj = {'&&': 'AND', '||': 'OR'}.get(conj, conj)
        mod = {'!': 'NOT'}.get(mod, mod)
        if occ and conj == 'AND' and occ[-1] != 'mustnot':
            occ[-1] = 'must'
        if occ and op == 'and' and conj == 'OR' and occ[-1] != 'mustnot':
            occ[-1] = 'should'
        prohibited = mod in ('-', 'NOT')
        if op == 'or':
            required = mod == '+'
            if conj == 'AND' and not prohibited:
                required = True
        else:
            required = not prohibited and conj != 'OR'
        occ.append('mustnot' if prohibited else 'must' if required else 'should')
    return occ


# ---------------------------------------------------------------------------
# Query trees: generation and rendering
#
# ('term', field|None, text, boost) ('phrase', field|None, text, slop, boost)
# ('prefix', field|None, text, boost) ('fuzzy', field|None, text, edits|None, boost)
# ('wildcard', field|None, pattern of letters, '*' and '?', boost)
# ('range', field, lo|None, hi|None, lo_incl, hi_incl, boost) ('all',)
# ('group', [(conj|None, mod|None, node)], boost) ('fgroup', field, group)


def fmt_boost(b):
    return '' if b == 1.0 else '^%g' % b


def render(node, top=True):
    kind = node[0]
    if kind == 'all':
        return '*:*'
    if kind == 'group':
        parts = []
        for conj, mod, child in node[1]:
            s = ''
            if conj:
                s += conj + ' '
            if mod == 'NOT':
                s += 'NOT '
            elif mod == '!':
                s += '!'
            elif mod:
                s += mod
            s += render(child, False)
            parts.append(s)
        inner = ' '.join(parts)
        if top and node[2] == 1.0:
            return inner
        return '(' + inner + ')' + fmt_boost(node[2])
    if kind == 'fgroup':
        return node[1] + ':' + render(node[2], False)
    if kind == 'exists':
        return node[1] + ':*'
    f = '' if node[1] is None else node[1] + ':'
    if kind == 'term':
        return f + node[2] + fmt_boost(node[3])
    if kind == 'phrase':
        s = f + '"' + node[2] + '"'
        if node[3]:
            s += '~%d' % node[3]
        return s + fmt_boost(node[4])
    if kind == 'prefix':
        return f + node[2] + '*' + fmt_boost(node[3])
    if kind == 'wildcard':
        return f + node[2] + fmt_boost(node[3])
    if kind == 'fuzzy':
        return f + node[2] + '~' + ('' if node[3] is None else str(node[3])) + fmt_boost(node[4])
    if kind == 'range':
        _, fld, lo, hi, li, hi_i, b = node
        one = lo if hi is None else hi if lo is None else None
        if one is not None and len(one) % 2 == 0:
            # Half of the one-sided ranges in Elasticsearch's form: f:>x, f:<=x, ...
            if hi is None:
                return '%s:>%s%s%s' % (fld, '=' if li else '', lo, fmt_boost(b))
            return '%s:<%s%s%s' % (fld, '=' if hi_i else '', hi, fmt_boost(b))
        return '%s:%s%s TO %s%s%s' % (fld, '[' if li else '{', '*' if lo is None else lo,
                                       '*' if hi is None else hi, ']' if hi_i else '}',
                                       fmt_boost(b))
    raise AssertionError(kind)


class QueryGen:
    def __init__(self, rng, oracle):
        self.rng = rng
        self.o = oracle

    def boost(self):
        return self.rng.choice([1.0] * 6 + [2.0, 0.5, 3.0, 1.5])

    def word(self):
        r = self.rng.random()
        if r < 0.05:
            return self.rng.choice(['zzyzx', 'qwertyuiop', 'nothinghere'])
        if r < 0.12:
            return self.rng.choice(STOP)
        if r < 0.2:
            return self.rng.choice(TAGS)
        if r < 0.25:
            # a token of a CJK phrase as the standard analyzer cuts it
            toks = self.o.analyze('standard', self.rng.choice(CJK))
            return self.rng.choice(toks)[0]
        return cap(self.rng, self.rng.choice(ALL_WORDS))

    def field(self, allow_tags=True):
        r = self.rng.random()
        if r < 0.5:
            return None
        if r < 0.7:
            return 'title'
        if r < 0.9 or not allow_tags:
            return 'body'
        return 'tags'

    def term(self):
        f = self.field()
        w = self.rng.choice(TAGS) if f == 'tags' and self.rng.random() < 0.7 else self.word()
        return ('term', f, w, self.boost())

    def phrase(self):
        f = self.rng.choice([None, 'title', 'body', 'body'])
        src = self.rng.choice(list(self.o.docs.values()))
        text = src.get('body' if f != 'title' else 'title')
        if not isinstance(text, str) or not text.strip():
            text = 'quick brown fox'
        words = text.split()
        k = self.rng.randint(2, min(4, max(2, len(words))))
        start = self.rng.randint(0, max(0, len(words) - k))
        chosen = [w.strip(',.;!?') for w in words[start:start + k]]
        if self.rng.random() < 0.2:
            self.rng.shuffle(chosen)
        chosen = [w for w in chosen if w] or ['fox']
        slop = self.rng.choice([0, 0, 0, 1, 2, 5])
        return ('phrase', f, ' '.join(chosen), slop, self.boost())

    def prefix(self):
        f = self.field()
        src = self.rng.choice(TAGS) if f == 'tags' else self.rng.choice(ALL_WORDS + TAGS)
        src = cap(self.rng, src)
        k = self.rng.randint(1, min(4, len(src)))
        pre = src[:k]
        if pre[-1] in '+' or pre in ('-',):
            pre = src[:1] if src[0].isalnum() else 'a'
        return ('prefix', f, pre, self.boost())

    def wildcard(self):
        f = self.field()
        words = [w for w in (TAGS if f == 'tags' else ALL_WORDS + TAGS) if w.isalnum()]
        w = list(cap(self.rng, self.rng.choice(words)))
        out = []
        for i, c in enumerate(w):
            if self.rng.random() < 0.15:
                out.append('*')
            out.append('?' if self.rng.random() < 0.25 else c)
        if not any(c in '*?' for c in out[:-1]) and out[-1] != '?':
            out[self.rng.randrange(len(out))] = '?'  # not a plain word or prefix
        if self.rng.random() < 0.3:
            out.append('*')
        return ('wildcard', f, ''.join(out), self.boost())

    def fuzzy(self):
        f = self.field()
        w = self.rng.choice(TAGS if f == 'tags' else ENGLISH + FRENCH + GERMAN)
        w = list(w.lower() if self.rng.random() < 0.8 else w)
        for _ in range(self.rng.randint(0, 2)):
            op = self.rng.randint(0, 3)
            i = self.rng.randrange(len(w))
            c = self.rng.choice('abcdeilnorstu')
            if op == 0:
                w[i] = c
            elif op == 1 and len(w) > 2:
                del w[i]
            elif op == 2:
                w.insert(i, c)
            elif i + 1 < len(w):
                w[i], w[i + 1] = w[i + 1], w[i]
        text = ''.join(w)
        if not text or not text[0].isalnum():
            text = 'dog'
        return ('fuzzy', f, text, self.rng.choice([None, None, 0, 1, 2]), self.boost())

    def num_bound(self, field):
        if field == 'n':
            return str(self.rng.choice([self.rng.randint(-5, 42), self.rng.randint(0, 80) / 2.0]))
        return random_date(self.rng)

    def range_(self):
        r = self.rng.random()
        if r < 0.12:
            f = self.rng.choice(['tags', 'title'])
            if self.rng.random() < 0.3:
                return ('range', f, None, None, True, True, 1.0)  # [* TO *]
            lo = self.rng.choice(TAGS + ['a', 'm', 'p']) if self.rng.random() < 0.85 else None
            hi = self.rng.choice(TAGS + ['n', 'z', 'zz']) if self.rng.random() < 0.85 else None
            return ('range', f, lo, hi, self.rng.random() < 0.5, self.rng.random() < 0.5, 1.0)
        if r < 0.2:
            return ('exists', self.rng.choice(['tags', 'title', 'body', 'n', 'd']))
        f = self.rng.choice(['n', 'n', 'd'])
        lo = self.num_bound(f) if self.rng.random() < 0.85 else None
        hi = self.num_bound(f) if self.rng.random() < 0.85 else None
        if lo is not None and hi is not None and self.rng.random() < 0.8:
            a, b = self.o._parse_num(f, lo), self.o._parse_num(f, hi)
            if a > b:
                lo, hi = hi, lo
        return ('range', f, lo, hi, self.rng.random() < 0.6, self.rng.random() < 0.6, 1.0)

    def numeq(self):
        if self.rng.random() < 0.6:
            return ('term', 'n', str(self.rng.randint(0, 40)), 1.0)
        return ('term', 'd', random_date(self.rng)[:10], 1.0)

    def leaf(self):
        r = self.rng.random()
        if r < 0.45:
            return self.term()
        if r < 0.6:
            return self.phrase()
        if r < 0.72:
            return self.prefix()
        if r < 0.82:
            return self.fuzzy()
        if r < 0.95:
            return self.range_()
        return self.numeq()

    def group(self, depth=0):
        n = self.rng.randint(2, 4)
        clauses = []
        for i in range(n):
            child = self.group(depth + 1) if depth < 1 and self.rng.random() < 0.2 else self.leaf()
            conj = None if i == 0 else self.rng.choice([None, None, 'AND', 'OR', '&&', '||'])
            mod = self.rng.choice([None, None, None, '+', '-', 'NOT', '!'])
            if conj is None and mod is None and i > 0 and self.rng.random() < 0.3:
                mod = '+'
            clauses.append((conj, mod, child))
        return ('group', clauses, self.boost() if depth > 0 else 1.0)

    def fgroup(self):
        f = self.rng.choice(['title', 'body'])
        clauses = []
        for i in range(self.rng.randint(2, 3)):
            leaf = self.rng.choice([self.term, self.prefix, self.phrase])()
            leaf = (leaf[0], None) + leaf[2:]
            clauses.append((None if i == 0 else self.rng.choice([None, 'AND', 'OR']),
                            self.rng.choice([None, None, '+', '-']), leaf))
        return ('fgroup', f, ('group', clauses, self.boost()))

    def query(self, kind):
        return {
            'term': self.term, 'phrase': self.phrase, 'prefix': self.prefix,
            'wildcard': self.wildcard, 'fuzzy': self.fuzzy, 'range': self.range_, 'numeq': self.numeq,
            'bool': self.group, 'fgroup': lambda: ('group', [(None, None, self.fgroup()),
                                                            (self.rng.choice([None, 'AND', 'OR']),
                                                             None, self.leaf())], 1.0),
        }[kind]()


# ---------------------------------------------------------------------------
# Helpers shared by the test classes


def search_path(index, params):
    return '/indexes/%s/search?%s' % (q(index), urllib.parse.urlencode(params))


def close(a, e, tol=REL_TOL):
    if a == e:
        return True
    return abs(a - e) <= tol * max(abs(a), abs(e))


class SearchMixin:
    """Requests and answer checks; mixed into CorvidTestCase subclasses."""

    def search(self, index, client=None, **params):
        client = client or self.c
        resp = client.get(search_path(index, params))
        self.assertStatus(resp, 200)
        self.checkAnswer(resp)
        return resp.json

    def checkAnswer(self, resp):
        body = resp.json
        self.assertIsInstance(body, dict, resp.describe())
        keys = set(body)
        self.assertTrue(ANSWER_KEYS <= keys <= ANSWER_KEYS | {'facets'},
                        'answer keys %s: %s' % (sorted(keys), resp.describe()))
        self.assertIsInstance(body['stale'], bool, resp.describe())
        self.assertTrue(isinstance(body['indexEtag'], int) and body['indexEtag'] >= 0,
                        resp.describe())
        self.assertTrue(isinstance(body['tookMs'], (int, float)) and body['tookMs'] >= 0,
                        resp.describe())
        self.assertTrue(isinstance(body['total'], int) and body['total'] >= 0, resp.describe())
        self.assertIsInstance(body['hits'], list, resp.describe())
        for hit in body['hits']:
            self.assertIsInstance(hit.get('fields'), dict, 'every hit has "fields": %r' % hit)

    def fresh(self, index, etag, client=None, **params):
        """A search that must see every change up to `etag`."""
        params = dict(params, minEtag=etag, waitMs=WAIT_MS)
        ans = self.search(index, client=client, **params)
        self.assertFalse(ans['stale'], 'stale after minEtag=%d: %r' % (etag, ans))
        self.assertGreaterEqual(ans['indexEtag'], etag)
        return ans

    def bulk(self, collection, docs, client=None):
        client = client or self.c
        body = '\n'.join(json.dumps(d, ensure_ascii=False) for d in docs) + '\n'
        resp = client.post(bulk_path(collection), body, content_type='application/x-ndjson')
        self.assertStatus(resp, 200)
        return resp.json['lastEtag']

    def putIndex(self, name, definition, client=None):
        resp = (client or self.c).put('/indexes/%s' % q(name), json.dumps(definition))
        self.assertIn(resp.status, (200, 201), resp.describe())

    def checkOrder(self, hits, ctx):
        """Server order: score desc, then id ascending bytewise."""
        for a, b in zip(hits, hits[1:]):
            ok = a['score'] > b['score'] or (a['score'] == b['score'] and
                                             bkey(a['id']) < bkey(b['id']))
            self.assertTrue(ok, 'order broken between %r and %r; %s' % (a, b, ctx))

    def checkAgainstOracle(self, index, oracle, node, op='or', filt=None, label=''):
        """Full answer and the limit=10 answer against the oracle. Returns expected."""
        text = render(node)
        params = {'q': text, 'limit': 10000}
        if op != 'or' or self.rng.random() < 0.2:
            params['op'] = op
        ftext = None
        if filt is not None:
            ftext = render(filt)
            params['filter'] = ftext
        ctx = 'query %r (%s) op=%s filter=%r seed=%d' % (text, label, op, ftext, SEED)
        expected = oracle.evaluate(node, op, filt)
        resp = self.c.get(search_path(index, params))
        self.assertStatus(resp, 200)
        self.checkAnswer(resp)
        ans = resp.json
        got = {h['id']: h['score'] for h in ans['hits']}
        self.assertEqual(ans['total'], len(expected), ctx)
        self.assertEqual(len(ans['hits']), len(expected), ctx)
        missing = sorted(set(expected) - set(got))[:10]
        extra = sorted(set(got) - set(expected))[:10]
        self.assertFalse(missing or extra, 'ids missing %r extra %r; %s' % (missing, extra, ctx))
        for i, s in got.items():
            self.assertTrue(close(s, expected[i]),
                            'score of %r: got %r, oracle %r (%s)' % (i, s, expected[i], ctx))
        self.checkOrder(ans['hits'], ctx)
        # the server's order is the oracle's order (allowing last-bit differences)
        for a, b in zip(ans['hits'], ans['hits'][1:]):
            ea, eb = expected[a['id']], expected[b['id']]
            self.assertTrue(ea >= eb - ORDER_TOL * max(abs(ea), abs(eb)),
                            'oracle ranks %r (%r) above %r (%r); %s'
                            % (b['id'], eb, a['id'], ea, ctx))
        # top-10 (MaxScore / top-k path) == first 10 of the full answer
        params['limit'] = 10
        top = self.c.get(search_path(index, params))
        self.assertStatus(top, 200)
        self.checkAnswer(top)
        self.assertEqual(top.json['total'], len(expected), ctx)
        self.assertEqual([(h['id'], h['score']) for h in top.json['hits']],
                         [(h['id'], h['score']) for h in ans['hits'][:10]], 'top-10; ' + ctx)
        return expected


# ---------------------------------------------------------------------------
# 1 + 2: the oracle, then updates and deletes


class CorpusTestCase(SearchMixin, CorvidTestCase):
    """One collection per class with a search index over it and the oracle
    built from the same documents; every test starts once the index has
    seen them all."""

    @classmethod
    def setUpCorpus(cls, seed, coll_name, index):
        cls.rng = random.Random(seed)
        cls.coll_name = coll_name
        cls.index = index
        cls.analyze = Analyzer(cls.c)
        cls.oracle = Oracle(cls.analyze)
        resp = cls.c.put('/indexes/' + cls.index, json.dumps(search_definition(cls.coll_name)))
        assert resp.status == 201, resp.describe()
        cls.last_etag = 0

    @classmethod
    def loadCorpus(cls, docs, chunk=100):
        for i in range(0, len(docs), chunk):
            body = '\n'.join(json.dumps(d, ensure_ascii=False) for d in docs[i:i + chunk])
            resp = cls.c.post(bulk_path(cls.coll_name), body)
            assert resp.status == 200, resp.describe()
            cls.last_etag = resp.json['lastEtag']
        for d in docs:
            cls.oracle.put(d)

    def setUp(self):
        super().setUp()
        self.fresh(self.index, self.last_etag, q='*', limit=0)


class SearchOracleTest(CorpusTestCase):
    DOCS = 600

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.setUpCorpus(SEED, 'oracle_articles', 'articles_search')
        cls.loadCorpus(random_corpus(cls.rng, cls.DOCS))

    def run_queries(self, count_per_kind, label):
        gen = QueryGen(self.rng, self.oracle)
        kinds = ['term', 'phrase', 'prefix', 'wildcard', 'fuzzy', 'range', 'numeq', 'bool', 'fgroup']
        weights = {'bool': 4, 'term': 2}
        nonempty = 0
        checked = 0
        for kind in kinds:
            for _ in range(count_per_kind * weights.get(kind, 1)):
                node = gen.query(kind)
                if node[0] != 'group':
                    node = ('group', [(None, None, node)], 1.0)
                op = 'and' if kind in ('bool', 'fgroup') and self.rng.random() < 0.35 else 'or'
                filt = None
                if self.rng.random() < 0.12:
                    filt = self.rng.choice([gen.range_, gen.term, gen.prefix])()
                    filt = ('group', [(None, None, filt)], 1.0)
                exp = self.checkAgainstOracle(self.index, self.oracle, node, op, filt,
                                              '%s %s' % (label, kind))
                checked += 1
                nonempty += bool(exp)
        # the generator must produce interesting queries, not only empty answers
        self.assertGreater(nonempty, checked // 2, 'too many empty answers: generator broken?')

    def fixed_queries(self):
        """Hand-picked queries with known structure (each also against the oracle)."""
        t = lambda w, f=None, b=1.0: ('term', f, w, b)  # noqa: E731
        g = lambda *cl: ('group', list(cl), 1.0)  # noqa: E731
        return [
            g((None, None, t('dog'))),
            g((None, None, t('Dogs', 'body'))),
            g((None, None, t('the'))),                           # title only (stop word in body)
            g((None, None, t('the', 'body'))),                   # dropped → nothing
            g((None, None, t('dog')), (None, '+', t('the', 'body'))),  # +dropped clause
            g((None, None, t('dog')), ('AND', None, t('cat')), ('OR', None, t('fox'))),
            g((None, 'NOT', t('dog'))),                          # only prohibited: all but
            g((None, '-', t('dog')), (None, '-', t('cat'))),
            g((None, None, t('c++'))),                           # keyword tag vs "c" in text
            g((None, None, t('e-mail'))),                        # several tokens → phrase
            g((None, None, t('Café', 'tags'))),
            g((None, None, t('café'))),
            g((None, None, t('straße'))), g((None, None, t('STRASSE', 'title'))),
            g((None, None, ('term', None, '東京タワー', 1.0))),
            g((None, None, ('phrase', 'body', 'quick brown', 0, 1.0))),
            g((None, None, ('phrase', 'body', 'dog the cat', 1, 2.0))),
            g((None, None, ('prefix', None, 'do', 1.0))),
            g((None, None, ('prefix', 'tags', 'C', 1.0))),
            g((None, None, ('fuzzy', None, 'dgo', None, 1.0))),
            g((None, None, ('fuzzy', 'body', 'runing', 1, 1.0))),
            g((None, None, ('range', 'n', '10', '20', True, False, 1.0))),
            g((None, None, ('range', 'n', None, '5', True, True, 1.0))),
            g((None, None, ('range', 'd', '2024-01-01', None, False, True, 1.0))),
            g((None, None, ('range', 'n', None, None, True, True, 1.0))),
            g((None, None, ('all',))),
            g((None, None, t('dog', None, 3.0)), (None, None, t('cat', 'title', 0.5))),
        ]

    def test_1_oracle_queries(self):
        for node in self.fixed_queries():
            self.checkAgainstOracle(self.index, self.oracle, node, 'or', None, 'fixed')
            self.checkAgainstOracle(self.index, self.oracle, node, 'and', None, 'fixed')
        self.run_queries(25, 'initial')

    def test_2_updates_and_deletes(self):
        rng = self.rng
        coll = self.coll_name
        ids = sorted(self.oracle.docs)
        # single PUTs changing terms (same id, new title/body/tags/n)
        for doc_id in rng.sample(ids, 25):
            doc = random_doc(rng, doc_id)
            doc['title'] = 'replaced ' + doc.get('title', 'title')
            self.last_etag_ = self.putOk(coll, doc_id, json.dumps(doc, ensure_ascii=False))
            self.oracle.put(doc)
        # single DELETEs
        live = sorted(self.oracle.docs)
        for doc_id in rng.sample(live, 10):
            resp = self.c.delete(doc_path(coll, doc_id))
            self.assertStatus(resp, 200)
            self.oracle.delete(doc_id)
        # a bulk: deletes, updates and new documents
        live = sorted(self.oracle.docs)
        lines = [{'id': i, '_deleted': True} for i in rng.sample(live, 15)]
        for i in rng.sample(live, 15):
            lines.append(random_doc(rng, i))
        for k in range(10):
            lines.append(random_doc(rng, 'new%02d' % k))
        last = self.bulk(coll, lines)
        final = {}
        for ln in lines:  # the same id twice in one bulk: the later line wins
            final[ln['id']] = ln
            if ln.get('_deleted'):
                self.oracle.delete(ln['id'])
            else:
                self.oracle.put(ln)
        type(self).last_etag = last
        ans = self.fresh(self.index, last, q='replaced', limit=10000)
        self.assertEqual(ans['total'], len(self.oracle.evaluate(('term', None, 'replaced', 1.0))))
        # admin entries = live documents
        resp = self.c.get('/indexes/' + self.index)
        self.assertStatus(resp, 200)
        self.assertEqual(resp.json['entries'], len(self.oracle.docs), resp.describe())
        # deleted ids never come back
        deleted = [i for i, ln in final.items() if ln.get('_deleted')]
        self.assertTrue(deleted)
        allhits = self.search(self.index, q='*', limit=10000)
        self.assertEqual(allhits['total'], len(self.oracle.docs))
        self.assertFalse(set(deleted) & {h['id'] for h in allhits['hits']})
        for node in self.fixed_queries():
            self.checkAgainstOracle(self.index, self.oracle, node, 'or', None, 'after updates')
        self.run_queries(10, 'after updates')

    def test_3_freshness(self):
        # a future etag with a short wait: 200, stale, indexEtag below it
        last = self.c.last_etag()
        t0 = time.monotonic()
        ans = self.search(self.index, q='dog', minEtag=last + 1000, waitMs=300)
        took = time.monotonic() - t0
        self.assertTrue(ans['stale'], ans)
        self.assertLess(ans['indexEtag'], last + 1000, ans)
        self.assertGreaterEqual(took, 0.25, 'waitMs=300 answered after %.3f s' % took)
        self.assertGreaterEqual(ans['tookMs'], 250, ans)
        # minEtag without waitMs does not wait
        t0 = time.monotonic()
        ans = self.search(self.index, q='dog', minEtag=last + 1000)
        self.assertTrue(ans['stale'], ans)
        self.assertLess(time.monotonic() - t0, 0.25, 'minEtag without waitMs waited')
        # read-your-writes: a PUT then a search under its etag sees it
        etag = self.putOk(self.coll_name, 'fresh1', json.dumps(
            {'title': 'xylophonist extraordinaire', 'body': 'unique xylophonists'}))
        ans = self.fresh(self.index, etag, q='xylophonist')
        self.assertEqual([h['id'] for h in ans['hits']], ['fresh1'], ans)
        resp = self.c.delete(doc_path(self.coll_name, 'fresh1'))
        self.assertStatus(resp, 200)
        ans = self.fresh(self.index, resp.json['etag'], q='xylophonist')
        self.assertEqual(ans['total'], 0, ans)
        # etags of other collections are waited for too
        etag = self.putOk('other_coll', 'x', '{"title": "dog"}')
        ans = self.fresh(self.index, etag, q='dog', limit=1)
        self.assertFalse(ans['stale'])


# ---------------------------------------------------------------------------
# 3: features


def insert_em(text, spans):
    """text with <em>…</em> around the byte spans."""
    raw = text.encode('utf-8')
    out = b''
    p = 0
    for s, e in spans:
        out += raw[p:s] + b'<em>' + raw[s:e] + b'</em>'
        p = e
    return (out + raw[p:]).decode('utf-8')


class SearchFeaturesTest(CorpusTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.setUpCorpus(SEED + 1, 'features', 'feat')
        docs = random_corpus(cls.rng, 150)
        # short bodies for exact highlight checks, long ones for fragments
        docs.append({'id': 'hl1', 'title': 'Running late', 'body': 'The dog was running, dogs run.',
                     'tags': ['go'], 'n': 3, 'd': '2024-02-02'})
        docs.append({'id': 'hl2', 'title': 'Über', 'body': 'Müller läuft; Running über Straße.',
                     'n': 3})
        long_body = ' '.join(['filler words go here'] * 12 + ['dog'] + ['more filler text'] * 12 +
                             ['running dog'] + ['tail words'] * 40)
        docs.append({'id': 'hl3', 'body': long_body, 'tags': ['ml']})
        docs.append({'id': 'hl4', 'body': 'A cat sat near the dog.'})
        cls.loadCorpus(docs, chunk=len(docs))

    def test_sort(self):
        cases = ['n', '-n', 'd', '-d', 'tags', '-tags', 'n,-d', '-n,_score', '_score']
        for query in ('*', 'dog OR cat OR fox OR tags:rust', 'n:[5 TO 30]'):
            node_expected = self.oracle.evaluate(
                {'*': ('all',),
                 'dog OR cat OR fox OR tags:rust': ('group', [
                     (None, None, ('term', None, 'dog', 1.0)),
                     ('OR', None, ('term', None, 'cat', 1.0)),
                     ('OR', None, ('term', None, 'fox', 1.0)),
                     ('OR', None, ('term', 'tags', 'rust', 1.0))], 1.0),
                 'n:[5 TO 30]': ('range', 'n', '5', '30', True, True, 1.0)}[query])
            for sort in cases:
                ctx = 'q=%r sort=%r seed=%d' % (query, sort, SEED)
                ans = self.search(self.index, q=query, sort=sort, limit=10000)
                self.assertEqual(ans['total'], len(node_expected), ctx)
                hits = ans['hits']
                self.assertEqual({h['id'] for h in hits}, set(node_expected), ctx)
                keys = [k.strip() for k in sort.split(',')]
                scored = '_score' in keys
                for h in hits:
                    # without _score among the keys the server need not score (as ES)
                    self.assertTrue(close(h['score'], node_expected[h['id']]) or
                                    (not scored and h['score'] == 0),
                                    'score %r vs %r; %s' % (h, node_expected[h['id']], ctx))

                def key_of(hit):
                    out = []
                    for k in keys:
                        desc = k.startswith('-')
                        f = k.lstrip('-+')
                        if f == '_score':
                            out.append((0, -hit['score']))  # server scores (checked above)
                            continue
                        v = self.oracle.sort_value(hit['id'], f, desc)
                        if v is None:
                            out.append((1, 0))          # missing values last, either way
                        elif isinstance(v, str):
                            b = bkey(v)
                            out.append((0, tuple(-x for x in b) + (1,) if desc else b))
                        else:
                            out.append((0, -v if desc else v))
                    return out
                # the sort keys (and the missing-last rule) decide first
                for a, b in zip(hits, hits[1:]):
                    ka, kb = key_of(a), key_of(b)
                    self.assertLessEqual(ka, kb, 'sort order between %r and %r; %s' % (a, b, ctx))
                    if ka == kb:
                        # then _score desc, then id asc
                        if a['score'] != b['score']:
                            self.assertGreater(a['score'], b['score'], ctx)
                        else:
                            self.assertLess(bkey(a['id']), bkey(b['id']), ctx)
        # explicit check of the keyword key: the smallest tag, bytewise
        ans = self.search(self.index, q='tags:*', sort='tags', limit=10000)
        vals = [self.oracle.sort_value(h['id'], 'tags') for h in ans['hits']]
        self.assertEqual(vals, sorted(vals, key=bkey))
        ans = self.search(self.index, q='*', sort='-n', limit=10000)
        vals = [self.oracle.sort_value(h['id'], 'n', desc=True) for h in ans['hits']]
        present = [v for v in vals if v is not None]
        self.assertEqual(vals, present + [None] * (len(vals) - len(present)),
                         'documents without n must sort last')
        self.assertEqual(present, sorted(present, reverse=True))

    def test_paging(self):
        full = self.search(self.index, q='dog OR cat OR the OR fox', limit=10000)
        self.assertGreater(full['total'], 20)
        pages = []
        for off in range(0, full['total'] + 7, 7):
            ans = self.search(self.index, q='dog OR cat OR the OR fox', offset=off, limit=7)
            self.assertEqual(ans['total'], full['total'])
            pages.extend(ans['hits'])
        self.assertEqual(pages, full['hits'])
        ans = self.search(self.index, q='dog OR cat OR the OR fox', offset=full['total'] + 5)
        self.assertEqual((ans['total'], ans['hits']), (full['total'], []))
        ans = self.search(self.index, q='dog OR cat', limit=0)
        self.assertEqual(ans['hits'], [])
        self.assertGreater(ans['total'], 0)
        ans = self.search(self.index, q='*')
        self.assertEqual(len(ans['hits']), 10, 'limit defaults to 10')
        self.assertEqual(ans['total'], len(self.oracle.docs))
        # sorted paging too
        full = self.search(self.index, q='*', sort='-d', limit=10000)
        pages = []
        for off in range(0, full['total'], 25):
            pages.extend(self.search(self.index, q='*', sort='-d', offset=off, limit=25)['hits'])
        self.assertEqual(pages, full['hits'])

    def test_fields(self):
        ans = self.search(self.index, q='*', limit=10000)
        for h in ans['hits']:
            doc = self.oracle.docs[h['id']]
            want = {k: doc[k] for k in ('title', 'n') if k in doc}
            self.assertEqual(h.get('fields'), want, 'default store; hit %r' % h)
        ans = self.search(self.index, q='*', limit=10000, fields='body,tags,d')
        for h in ans['hits']:
            doc = self.oracle.docs[h['id']]
            self.assertEqual(h.get('fields'), {k: doc[k] for k in ('body', 'tags', 'd') if k in doc})
        ans = self.search(self.index, q='*', limit=50, fields='*')
        for h in ans['hits']:
            resp = self.c.get(doc_path(self.coll_name, h['id']))
            self.assertEqual(h['fields'], json.loads(resp.body), h)

    def test_fields_as_indexed(self):
        """docs/http-choices.md: when `store` lists paths, a hit's fields are the
        values its match was made on (as Elasticsearch returns _source from its
        segments), also while the index is stale; a path the definition does not
        store is read from the document as it is now."""
        coll = self.coll()
        self.putIndex('asindexed', {'type': 'search', 'collection': coll,
                                    'fields': {'title': {'analyzer': 'standard'}}, 'store': ['title', 'n']})
        last = self.bulk(coll, [{'id': '1', 'title': 'red fox', 'n': 1, 'x': 'a'},
                                {'id': '2', 'title': 'red hen', 'n': 2, 'x': 'b'}])
        self.fresh('asindexed', last, q='red')
        self.assertStatus(self.c.post('/admin/indexes/asindexed/pause', ''), 200)
        try:
            self.bulk(coll, [{'id': '1', 'title': 'blue fox', 'n': 10, 'x': 'c'},
                             {'id': '2', '_deleted': True}])
            ans = self.search('asindexed', q='red')
            self.assertTrue(ans['stale'], ans)
            got = sorted((h['id'], h.get('fields')) for h in ans['hits'])
            self.assertEqual(got, [('1', {'title': 'red fox', 'n': 1}), ('2', {'title': 'red hen', 'n': 2})],
                             'stored fields as indexed: %r' % ans)
            ans = self.search('asindexed', q='red', fields='title,x')
            got = sorted((h['id'], h.get('fields')) for h in ans['hits'])
            self.assertEqual(got, [('1', {'title': 'blue fox', 'x': 'c'}), ('2', {})],
                             'a path not stored reads the document store: %r' % ans)
            # A hit whose document is gone still has every key asked for
            # (postings/README.md: highlights has every field asked for).
            ans = self.search('asindexed', q='red', fields='x', highlight='title')
            got = sorted((h['id'], h.get('fields'), h.get('highlights')) for h in ans['hits'])
            self.assertEqual(got, [('1', {'x': 'c'}, {'title': []}), ('2', {}, {'title': []})], ans)
            # Nothing asked for: "fields" is {} (API.md's hits always show it).
            ans = self.search('asindexed', q='red', fields='')
            self.assertEqual(sorted((h['id'], h.get('fields')) for h in ans['hits']), [('1', {}), ('2', {})], ans)
        finally:
            self.assertStatus(self.c.post('/admin/indexes/asindexed/resume', ''), 200)
        ans = self.fresh('asindexed', self.c.last_etag(), q='fox OR hen')
        self.assertEqual([(h['id'], h.get('fields')) for h in ans['hits']], [('1', {'title': 'blue fox', 'n': 10})])
        self.assertStatus(self.c.delete('/indexes/asindexed'), 200)

    def test_dotted_paths(self):
        """API.md: a field key is a dotted path; store/fields return such paths."""
        coll = self.coll()
        self.putIndex('dotted', {'type': 'search', 'collection': coll, 'fields': {
            'author.name': {'analyzer': 'standard'}, 'stats.views': {'type': 'number'}},
            'store': ['author.name', 'stats.views']})
        docs = [{'id': '1', 'author': {'name': 'Ann Lee'}, 'stats': {'views': 5}},
                {'id': '2', 'author': {'name': 'Ann'}, 'stats': {'views': 7}},
                {'id': '3', 'author': {'name': 'Bob'}, 'stats': {'views': 1}, 'x': 1}]
        last = self.bulk(coll, docs)
        ans = self.fresh('dotted', last, q='author.name:ann', sort='-stats.views', limit=10)
        self.assertEqual([h['id'] for h in ans['hits']], ['2', '1'], ans)
        self.assertEqual(self.search('dotted', q='stats.views:[5 TO *]')['total'], 2)
        ans = self.search('dotted', q='bob')
        self.assertEqual(ans['hits'][0].get('fields'), {'author.name': 'Bob', 'stats.views': 1},
                         'stored dotted paths (the definition\'s store): %r' % ans)
        ans = self.search('dotted', q='bob', fields='author.name,x,author.zz')
        self.assertEqual(ans['hits'][0].get('fields'), {'author.name': 'Bob', 'x': 1},
                         'fields=author.name,x: %r' % ans)
        self.assertStatus(self.c.delete('/indexes/dotted'), 200)

    def test_arrays_and_values(self):
        """postings/README.md: array elements are indexed with a position gap
        of 100 (phrases span two elements only with slop >= 100), the field
        length counts every element; numbers/bools in a text field are indexed
        as their text; a non-number in a number field is skipped."""
        coll = self.coll()
        self.putIndex('arrays', {'type': 'search', 'collection': coll, 'fields': {
            'title': {'analyzer': 'standard'}, 'n': {'type': 'number'}}})
        docs = [{'id': 'arr', 'title': ['alpha beta', 'gamma delta'], 'n': [3, 'x', 9]},
                {'id': 'str', 'title': 'alpha beta gamma delta', 'n': 'x'},
                {'id': 'num', 'title': 42},
                {'id': 'bool', 'title': [True, 'omega']}]
        last = self.bulk(coll, docs)
        ans = self.fresh('arrays', last, q='title:"beta gamma"', limit=10)
        self.assertEqual([h['id'] for h in ans['hits']], ['str'], ans)
        ans = self.search('arrays', q='title:"beta gamma"~99')
        self.assertEqual([h['id'] for h in ans['hits']], ['str'], ans)
        ans = self.search('arrays', q='title:"beta gamma"~100')
        self.assertEqual(sorted(h['id'] for h in ans['hits']), ['arr', 'str'], ans)
        # same tokens, same length → same score
        ans = self.search('arrays', q='alpha')
        self.assertEqual(len(ans['hits']), 2, ans)
        self.assertEqual(ans['hits'][0]['score'], ans['hits'][1]['score'], ans)
        self.assertEqual([h['id'] for h in ans['hits']], ['arr', 'str'], 'tie → id order')
        self.assertEqual([h['id'] for h in self.search('arrays', q='42')['hits']], ['num'])
        self.assertEqual([h['id'] for h in self.search('arrays', q='title:true')['hits']],
                         ['bool'])
        ans = self.search('arrays', q='n:[4 TO 10]')
        self.assertEqual([h['id'] for h in ans['hits']], ['arr'], ans)
        ans = self.search('arrays', q='n:*', limit=10)
        self.assertEqual([h['id'] for h in ans['hits']], ['arr'], ans)
        ans = self.search('arrays', q='*', sort='n', limit=10)
        self.assertEqual([h['id'] for h in ans['hits']][0], 'arr', 'smallest value 3 sorts first')
        for q_all in ('', '*', '*:*'):
            self.assertEqual(self.search('arrays', q=q_all)['total'], 4, 'q=%r' % q_all)
        resp = self.c.get('/indexes/arrays')
        self.assertStatus(resp, 200)
        self.assertEqual(resp.json['entries'], 4, resp.describe())
        self.assertGreaterEqual(resp.json['errors']['count'], 2, resp.describe())
        self.assertStatus(self.c.delete('/indexes/arrays'), 200)

    def test_highlight(self):
        ans = self.search(self.index, q='body:running', highlight='body', limit=10000)
        by_id = {h['id']: h for h in ans['hits']}
        self.assertIn('hl1', by_id)
        for doc_id in ('hl1', 'hl2'):
            body = self.oracle.docs[doc_id]['body']
            spans = [(s, e) for t, _, s, e in self.analyze('english', body) if t == 'run']
            self.assertEqual(by_id[doc_id]['highlights'], {'body': [insert_em(body, spans)]},
                             by_id[doc_id])
        self.assertEqual(by_id['hl1']['highlights']['body'],
                         ['The dog was <em>running</em>, dogs <em>run</em>.'])
        # a bare word: the body's analyzed term is highlighted
        ans = self.search(self.index, q='Dogs', highlight='body,title', limit=10000)
        by_id = {h['id']: h for h in ans['hits']}
        self.assertEqual(by_id['hl1']['highlights']['body'],
                         ['The <em>dog</em> was running, <em>dogs</em> run.'])
        self.assertEqual(by_id['hl1']['highlights']['title'], [])
        # terms of prohibited clauses are not highlighted
        ans = self.search(self.index, q='body:dog -body:"dog cat"', highlight='body', limit=10000)
        by_id = {h['id']: h for h in ans['hits']}
        self.assertEqual(by_id['hl4']['highlights'], {'body': ['A cat sat near the <em>dog</em>.']})
        # a long body: fragments with context, "…" where cut, <em> on every match
        ans = self.search(self.index, q='body:dog', highlight='body', limit=10000)
        hl3 = [h for h in ans['hits'] if h['id'] == 'hl3'][0]
        frags = hl3['highlights']['body']
        body = self.oracle.docs['hl3']['body']
        self.assertTrue(1 <= len(frags) <= 5, frags)
        ems = []
        for f in frags:
            self.assertTrue(f.startswith('…') and f.endswith('…'), frags)
            ems += re.findall(r'<em>(.*?)</em>', f)
            plain = f.strip('…').replace('<em>', '').replace('</em>', '')
            self.assertIn(plain, body)
            self.assertLess(len(plain.encode()), 2 * 60 + 40, frags)
            # cut between words, not inside one
            at = body.index(plain)
            self.assertTrue(at == 0 or body[at - 1] in ' \n', (body[at - 10:at + 10], f))
            end = at + len(plain)
            self.assertTrue(end == len(body) or body[end] in ' \n', (body[end - 10:end + 10], f))
        self.assertEqual(ems, ['dog', 'dog'], frags)
        # every other hit: each <em> holds a token analyzed to 'dog'
        for h in ans['hits']:
            for f in h['highlights']['body']:
                for em in re.findall(r'<em>(.*?)</em>', f):
                    self.assertEqual([t[0] for t in self.analyze('english', em)], ['dog'], h)

    def test_facets(self):
        gen = QueryGen(random.Random(SEED + 2), self.oracle)
        queries = [('all',), ('term', None, 'dog', 1.0), ('range', 'n', '0', '20', True, False, 1.0)]
        queries += [gen.group() for _ in range(8)]
        for node in queries:
            node = node if node[0] == 'group' else ('group', [(None, None, node)], 1.0)
            expected = self.oracle.evaluate(node)
            resp = self.c.get(search_path(self.index, {'q': render(node), 'facets': 'tags',
                                                       'limit': 3}))
            self.assertStatus(resp, 200)
            self.checkAnswer(resp)
            ans = resp.json
            self.assertEqual(ans['total'], len(expected), render(node))
            self.assertEqual(list(ans['facets'].keys()), ['tags'])
            self.assertEqual(list(ans['facets']['tags'].items()), self.oracle.facets(expected),
                             'facets for %r (seed %d)' % (render(node), SEED))
        ans = self.search(self.index, q='dog')
        self.assertNotIn('facets', ans, 'no facets key without facets=')

    def test_post_equals_get(self):
        cases = [
            {'q': 'dog OR cat', 'limit': 5, 'facets': 'tags', 'highlight': 'body'},
            {'q': 'title:dog~1 body:ru*', 'sort': '-n', 'fields': 'title,tags', 'offset': 2},
            {'q': '"brown fox"~3 OR n:[1 TO 9]', 'filter': 'd:[2024-01-01 TO *]', 'op': 'and'},
            {'q': 'quick brown', 'op': 'and', 'limit': 20, 'fields': '*'},
        ]
        for params in cases:
            got = self.search(self.index, **params)
            resp = self.c.post('/indexes/%s/search' % self.index, json.dumps(params))
            self.assertStatus(resp, 200)
            self.checkAnswer(resp)
            post = dict(resp.json)
            get = dict(got)
            post.pop('tookMs')
            get.pop('tookMs')
            self.assertEqual(post, get, params)
        # keys in both the query string and the body: the body wins
        resp = self.c.post('/indexes/%s/search?q=cat&limit=2' % self.index,
                           json.dumps({'q': 'dog', 'limit': 4}))
        self.assertStatus(resp, 200)
        want = self.search(self.index, q='dog', limit=4)
        resp.json.pop('tookMs')
        want.pop('tookMs')
        self.assertEqual(resp.json, want)
        # arrays and numbers in the body are the same as the strings
        a = self.c.post('/indexes/%s/search' % self.index, json.dumps(
            {'q': 'dog', 'limit': 3, 'facets': ['tags'], 'fields': ['title', 'n']}))
        b = self.c.post('/indexes/%s/search' % self.index, json.dumps(
            {'q': 'dog', 'limit': '3', 'facets': 'tags', 'fields': 'title,n'}))
        self.assertStatus(a, 200)
        self.assertStatus(b, 200)
        a.json.pop('tookMs')
        b.json.pop('tookMs')
        self.assertEqual(a.json, b.json)

    def test_filter_does_not_score(self):
        plain = self.search(self.index, q='dog', limit=10000)
        filt = self.search(self.index, q='dog', filter='cat OR n:[0 TO 10]', limit=10000)
        sub = self.oracle.evaluate(('group', [(None, None, ('term', None, 'cat', 1.0)),
                                              ('OR', None, ('range', 'n', '0', '10', True, True,
                                                            1.0))], 1.0))
        plain_scores = {h['id']: h['score'] for h in plain['hits']}
        self.assertEqual([h['id'] for h in filt['hits']],
                         [h['id'] for h in plain['hits'] if h['id'] in sub])
        for h in filt['hits']:
            self.assertEqual(h['score'], plain_scores[h['id']], 'filter changed a score')
        resp = self.c.get(search_path(self.index, {'q': 'dog', 'filter': '(cat'}))
        err = self.assertError(resp, 400, 'invalid_query')
        self.assertRegex(err['message'], r'at offset \d+$')

    def test_syntax_errors(self):
        exact = [('(dog', 0), ('dog (cat', 4), ('"dog', 0), ('dog "cat', 4),
                 ('title:(dog cat', 6), ('dog)', 3)]
        for text, off in exact:
            resp = self.c.get(search_path(self.index, {'q': text}))
            err = self.assertError(resp, 400, 'invalid_query')
            self.assertTrue(err['message'].endswith('at offset %d' % off),
                            'q=%r: %s' % (text, resp.describe()))
            self.assertEqual(err.get('offset'), off, 'q=%r: %s' % (text, resp.describe()))
        for text in ['n:[1 TO', 'n:[1 5]', 'n:[1 TO 5', 'n:{1 TO 5', 'n:[abc TO 5]',
                     'd:[2024-13-45 TO *]', 'dog AND', 'OR dog', 'dog^', 'dog AND AND cat',
                     'dog AND OR cat', 'dog NOT NOT cat', '(AND)', 'd*g~1', '+', 'title:',
                     'nosuchfield:dog', 'n:ab*', ')']:
            resp = self.c.get(search_path(self.index, {'q': text}))
            err = self.assertError(resp, 400, 'invalid_query')
            m = re.search(r'at offset (\d+)$', err['message'])
            self.assertIsNotNone(m, 'q=%r: %s' % (text, resp.describe()))
            self.assertLessEqual(int(m.group(1)), len(text.encode()), resp.describe())
            self.assertEqual(err.get('offset'), int(m.group(1)), resp.describe())
        # Lucene's lexer reads a modifier apart from its clause: "dog - cat" is "dog -cat".
        apart = self.search(self.index, q='dog - cat', limit=10000)
        joined = self.search(self.index, q='dog -cat', limit=10000)
        self.assertEqual((apart['total'], apart['hits']), (joined['total'], joined['hits']))
        self.assertGreater(joined['total'], 0)
        # POST carries the same errors
        resp = self.c.post('/indexes/%s/search' % self.index, json.dumps({'q': 'dog (cat'}))
        err = self.assertError(resp, 400, 'invalid_query')
        self.assertTrue(err['message'].endswith('at offset 4'), resp.describe())

    def test_bad_parameters(self):
        bad = [{'q': 'dog', 'sort': 'nosuch'}, {'q': 'dog', 'sort': 'body'},
               {'q': 'dog', 'facets': 'nosuch'}, {'q': 'dog', 'facets': 'body'},
               {'q': 'dog', 'facets': 'n'}, {'q': 'dog', 'highlight': 'nosuch'},
               {'q': 'dog', 'limit': 'abc'}, {'q': 'dog', 'offset': '-1'},
               {'q': 'dog', 'op': 'xor'}, {'q': 'dog', 'bogus': '1'}]
        for params in bad:
            resp = self.c.get(search_path(self.index, params))
            self.assertError(resp, 400, ('invalid_argument', 'invalid_query'))
        resp = self.c.get(search_path('no_such_index', {'q': 'dog'}))
        self.assertError(resp, 404, 'not_found')
        # search on a map/reduce index
        resp = self.c.put('/indexes/feat_mr', json.dumps({
            'type': 'mapreduce', 'collection': self.coll_name, 'map': {'t': 'tags'},
            'groupBy': ['t'], 'reduce': {'c': 'count()'}}))
        self.assertIn(resp.status, (200, 201), resp.describe())
        resp = self.c.get(search_path('feat_mr', {'q': 'dog'}))
        self.assertError(resp, 400, 'invalid_argument')
        resp = self.c.post('/indexes/feat_mr/search', json.dumps({'q': 'dog'}))
        self.assertError(resp, 400, 'invalid_argument')
        resp = self.c.get('/indexes/%s/results' % self.index)
        self.assertError(resp, 400, 'invalid_argument')
        self.assertStatus(self.c.delete('/indexes/feat_mr'), 200)

    def test_parameters_of_the_wrong_json_type(self):
        # POST body keys of the wrong JSON type are a 400 naming the key, never
        # coerced (a number for "fields" used to be read as the field "5").
        path = '/indexes/%s/search' % self.index
        cases = [('fields', 5), ('fields', True), ('fields', {'a': 1}), ('fields', [1]),
                 ('highlight', 7), ('highlight', ['body', 2]), ('facets', 5), ('facets', [None]),
                 ('q', 5), ('q', ['dog']), ('q', True), ('q', {'x': 'dog'}), ('filter', 5),
                 ('sort', 5), ('sort', ['-n']), ('op', 5), ('op', ['and']),
                 ('limit', -1), ('limit', 1.5), ('limit', '1.5'), ('limit', '-1'), ('limit', True),
                 ('limit', [10]), ('offset', -3), ('offset', 2.5), ('minEtag', -1),
                 ('waitMs', 'soon'), ('waitMs', False)]
        for key, value in cases:
            with self.subTest(key=key, value=value):
                body = {'q': 'dog'}
                body[key] = value
                resp = self.c.post(path, json.dumps(body))
                err = self.assertError(resp, 400, 'invalid_argument')
                self.assertIn(key, err['message'], resp.describe())
        resp = self.c.post(path, json.dumps({'q': 'dog', 'bogus': 1}))
        self.assertIn('bogus', self.assertError(resp, 400, 'invalid_argument')['message'])
        # The accepted forms still work: numbers as numbers or strings, lists
        # as strings or arrays of strings, null as absent.
        for body in ({'q': 'dog', 'limit': 3, 'offset': '1', 'fields': ['title'], 'facets': 'tags'},
                     {'q': 'dog', 'limit': '3', 'offset': 1, 'fields': 'title', 'facets': ['tags'],
                      'sort': None, 'highlight': []}):
            resp = self.c.post(path, json.dumps(body))
            self.assertStatus(resp, 200)
            self.checkAnswer(resp)

    def test_invalid_utf8_parameters(self):
        # Text that is not UTF-8 is a 400 naming the parameter, not a search
        # for bytes no document holds (which answered 200 with total 0).
        base = '/indexes/%s/search' % self.index
        for qs, key in (('q=%FF', 'q'), ('q=dog&filter=%C3', 'filter'), ('q=caf%C3%A9%C3', 'q'),
                        ('q=%ED%A0%80', 'q'), ('q=dog&fields=%FF', 'fields'),
                        ('q=dog&sort=%C0%80', 'sort'), ('q=dog&facets=%FE', 'facets')):
            with self.subTest(qs=qs):
                resp = self.c.get(base + '?' + qs)
                err = self.assertError(resp, 400, 'invalid_utf8')
                self.assertIn("'%s'" % key, err['message'], resp.describe())
        resp = self.c.get(base + '?q=dog&%FF=1')
        self.assertError(resp, 400, 'invalid_utf8')
        # JSON escapes can spell a lone surrogate, which is not UTF-8 either.
        for body, key in ((b'{"q":"\\udc00"}', 'q'), (b'{"q":"dog","filter":"a\\udfffb"}', 'filter'),
                          (b'{"q":"dog","fields":["\\udc00"]}', 'fields')):
            with self.subTest(body=body):
                resp = self.c.post(base, body)
                err = self.assertError(resp, 400, 'invalid_utf8')
                self.assertIn(key, err['message'], resp.describe())
        # Valid UTF-8 beyond ASCII is fine.
        self.assertStatus(self.c.get(base + '?q=caf%C3%A9'), 200)
        self.assertStatus(self.c.post(base, '{"q":"caf\\u00e9 \\ud83d\\ude00"}'), 200)

    def test_invalid_definitions(self):
        cases = [
            ({'body': {'analyzer': 'englsh'}}, 'body'),
            ({'body': {'type': 'blob'}}, 'body'),
            ({'score': {'type': 'number'}, 'title': {'analyzer': 'standard', 'boost': 'high'}},
             'title'),
            ({'tags': 'keyword'}, 'tags'),
            ({'body': {'analyzer': 42}}, 'body'),
        ]
        for fields, name in cases:
            definition = {'type': 'search', 'collection': 'x', 'fields': fields}
            resp = self.c.put('/indexes/bad_def', json.dumps(definition))
            err = self.assertError(resp, 400, 'invalid_definition')
            self.assertIn(name, err['message'], resp.describe())
            self.assertIn('fields', err['message'], resp.describe())
        self.assertStatus(self.c.get('/indexes/bad_def'), 404)
        # a valid definition is unchanged when PUT again, and queryable
        self.putIndex('good_def', search_definition('x'))
        resp = self.c.put('/indexes/good_def', json.dumps(search_definition('x')))
        self.assertStatus(resp, 200)
        self.assertEqual(resp.json.get('result'), 'unchanged', resp.describe())
        self.assertStatus(self.c.delete('/indexes/good_def'), 200)


# ---------------------------------------------------------------------------
# 4: kill -9 while indexing


def crash_doc(rng, i):
    return {'id': 'k%05d' % i,
            'title': ' '.join(zipf_word(rng, ENGLISH) for _ in range(rng.randint(2, 6))),
            'body': ' '.join(zipf_word(rng, ENGLISH + STOP) for _ in range(rng.randint(20, 50))),
            'tags': rng.sample(TAGS, rng.randint(1, 3)),
            'n': rng.randint(0, 1000),
            'd': random_date(rng)}


class StoredBigIntegersTest(CorvidTestCase):
    """API.md, General rules: an integer too large for uint64 keeps its
    digits, in a hit's `fields` too. The index's stored fields held the
    double (`1.2345678901234568e29`) while `fields=*` (the store) had the
    digits."""

    def test_stored_fields_keep_the_digits(self):
        c = self.coll()
        docs = {'a': b'{"t":"dogs","big":123456789012345678901234567890,"n":{"neg":-98765432109876543210},'
                     b'"u":18446744073709551615,"x":1.5}',
                'b': b'{"t":"dogs","big":[18446744073709551616,7,-9223372036854775809],"u":0,"x":2}'}
        resp = self.c.put('/indexes/' + c, json.dumps({'type': 'search', 'collection': c, 'fields': {'t': {}},
                                                       'store': ['t', 'big', 'u']}))
        self.assertIn(resp.status, (200, 201), resp.describe())
        for doc_id, body in docs.items():
            self.assertIn(self.c.put(doc_path(c, doc_id), body).status, (200, 201))
        etag = self.c.last_etag()

        def fields(extra=''):
            resp = self.c.get('/indexes/%s/search?q=dogs&minEtag=%d&waitMs=%d%s' % (q(c), etag, WAIT_MS, extra))
            self.assertStatus(resp, 200)
            self.assertFalse(resp.json['stale'])
            hits = {}
            for m in re.finditer(rb'"id":"(\w+)".*?"fields":(\{.*?\})(?:,"sort")', resp.body):
                hits[m.group(1).decode()] = m.group(2)
            self.assertEqual(set(hits), set(docs), resp.describe())
            return hits

        # The definition's store (the index's copy), some of its paths, and a
        # path it does not store (read from the document), as raw JSON text.
        self.assertEqual(fields(), {
            'a': b'{"t":"dogs","big":123456789012345678901234567890,"u":18446744073709551615}',
            'b': b'{"t":"dogs","big":[18446744073709551616,7,-9223372036854775809],"u":0}'})
        self.assertEqual(fields('&fields=big'), {
            'a': b'{"big":123456789012345678901234567890}',
            'b': b'{"big":[18446744073709551616,7,-9223372036854775809]}'})
        self.assertEqual(fields('&fields=n.neg,big'), {
            'a': b'{"n.neg":-98765432109876543210,"big":123456789012345678901234567890}',
            'b': b'{"big":[18446744073709551616,7,-9223372036854775809]}'})
        self.assertEqual(fields('&fields=*'), docs)


class SearchCrashTest(SearchMixin, unittest.TestCase):
    DOCS = 20000
    BULK = 2500

    def setUp(self):
        self.server = CorvidServer()
        self.server.start()
        self.c = self.server.client(retry=False)

    def tearDown(self):
        self.c.close()
        self.server.cleanup()

    def assertStatus(self, resp, status):
        self.assertEqual(resp.status, status, resp.describe())

    def test_kill_while_indexing(self):
        rng = random.Random(SEED + 3)
        coll = 'crash'
        self.putIndex('crashed', search_definition(coll))
        last = 0
        for start in range(0, self.DOCS, self.BULK):
            docs = [crash_doc(rng, i) for i in range(start, start + self.BULK)]
            last = self.bulk(coll, docs)
        # one overwrite and one delete at the end, so they are in the backlog
        last = self.bulk(coll, [{'id': 'k00001', 'title': 'overwritten zebra'},
                                {'id': 'k00002', '_deleted': True}])
        resp = self.c.get('/indexes/crashed')
        backlog = resp.json.get('backlog') if resp.status == 200 else None
        self.c.close()
        self.server.kill()
        print('crash test: killed with backlog %r (lastEtag %d)%s' % (
            backlog, last, '' if backlog else ' -- NOTE: indexing had already finished'),
            flush=True)
        self.server.start()
        self.c = self.server.client(retry=False)
        deadline = time.monotonic() + 120
        while True:
            ans = self.search('crashed', q='*', limit=0, minEtag=last, waitMs=10000)
            if not ans['stale'] or time.monotonic() > deadline:
                break
        self.assertFalse(ans['stale'], 'index still stale 120 s after restart: %r' % ans)
        self.assertEqual(ans['total'], self.DOCS - 1, ans)
        self.putIndex('rebuilt', search_definition(coll))
        self.fresh('rebuilt', last, q='*', limit=0)
        resp = self.c.get('/indexes/crashed')
        self.assertEqual(resp.json['entries'], self.DOCS - 1, resp.describe())
        queries = [
            {'q': 'dog', 'limit': 20},
            {'q': 'zebra', 'fields': 'title'},
            {'q': 'quick AND brown', 'limit': 50, 'facets': 'tags'},
            {'q': 'title:"search engine"~2 OR body:runn*', 'limit': 30},
            {'q': 'computr~1 -tags:rust', 'limit': 30, 'facets': 'tags'},
            {'q': 'n:[100 TO 200} AND (water OR fire)', 'sort': '-n', 'limit': 40},
            {'q': '*', 'sort': 'd', 'limit': 25},
            {'q': 'tags:go', 'sort': '-tags,n', 'limit': 25, 'facets': 'tags'},
        ]
        for params in queries:
            a = self.search('crashed', **params)
            b = self.search('rebuilt', **params)
            for ans in (a, b):
                ans.pop('tookMs')
            self.assertEqual(a, b, 'after kill -9, %r differs from a fresh index' % params)
        self.assertEqual(self.search('crashed', q='zebra')['hits'][0]['id'], 'k00001')
        self.assertEqual(self.search('crashed', q='*', filter='n:*', limit=10000,
                                     fields='n')['total'], self.DOCS - 2)
        self.server.stop()


if __name__ == '__main__':
    main()
