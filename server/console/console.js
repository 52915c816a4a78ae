// Corvid's web console: plain JavaScript over the HTTP API (API.md), no
// build step and nothing fetched from elsewhere. Text from the server is
// only ever set with textContent (or as <em> elements a highlight names),
// never as HTML. Live pages poll: every call sends the API key as
// Authorization: Bearer, which EventSource cannot.
'use strict';

const KEY = 'corvid-api-key';
const main = document.getElementById('main');
let timer = null;      // the current page's next refresh
let pageToken = 0;     // bumped on navigation: late answers of an old page are dropped

// ---- HTTP --------------------------------------------------------------------
class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, { method = 'GET', body } = {}) {
  const headers = {};
  const key = sessionStorage.getItem(KEY);
  if (key) headers['Authorization'] = 'Bearer ' + key;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  // 401: no key or not a bearer key; 403 "wrong API key": not one of the
  // server's keys (a read key refused a write gets its own 403, shown).
  const wrongKey = r.status === 403 && json && json.error && json.error.message === 'wrong API key';
  if (r.status === 401 || wrongKey) {
    await askKey(key ? 'That key was refused.' : '');
    return api(path, { method, body });
  }
  if (!r.ok) throw new HttpError(r.status, (json && json.error && json.error.message) || text || r.statusText);
  return json === null ? text : json;
}

let keyPrompt = null;
function askKey(why) {
  if (keyPrompt) return keyPrompt;
  const dlg = document.getElementById('login');
  document.getElementById('login-error').textContent = why;
  keyPrompt = new Promise((resolve) => {
    const form = document.getElementById('login-form');
    form.onsubmit = (e) => {
      e.preventDefault();
      sessionStorage.setItem(KEY, document.getElementById('login-key').value);
      document.getElementById('logout').hidden = false;
      dlg.close();
      keyPrompt = null;
      resolve();
    };
  });
  if (!dlg.open) dlg.showModal();
  return keyPrompt;
}

document.getElementById('logout').onclick = () => { sessionStorage.removeItem(KEY); location.reload(); };
if (sessionStorage.getItem(KEY)) document.getElementById('logout').hidden = false;

// ---- DOM helpers -----------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}
const fmt = (n) => (typeof n === 'number' ? n.toLocaleString('en-US', { maximumFractionDigits: 1 }) : String(n ?? ''));
const enc = encodeURIComponent;
function show(...nodes) { main.replaceChildren(...nodes.flat(Infinity).filter((n) => n !== null && n !== undefined)); }
function failure(e) { return el('p', { class: 'error' }, String(e.message || e)); }
function params() { return new URLSearchParams(location.hash.split('?')[1] || ''); }
function setHash(page, p) { location.hash = '#/' + page + (p && [...p].length ? '?' + p : ''); }
function poll(fn, ms) { clearTimeout(timer); timer = setTimeout(fn, ms); }
function bar(fraction) {
  const b = el('span', { class: 'bar', role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100 }, el('span'));
  setBar(b, fraction);
  return b;
}
function setBar(b, fraction) {
  const pct = Math.max(0, Math.min(100, fraction * 100));
  b.firstChild.style.width = pct + '%';
  b.setAttribute('aria-valuenow', pct.toFixed(1));
}
// A highlight fragment: the server marks matches with <em>...</em>; the
// rest is text, shown as text whatever it holds.
function highlighted(fragment) {
  const out = el('span');
  const parts = String(fragment).split(/(<em>|<\/em>)/);
  let inEm = false;
  for (const p of parts) {
    if (p === '<em>') { inEm = true; continue; }
    if (p === '</em>') { inEm = false; continue; }
    if (p) out.append(inEm ? el('em', {}, p) : document.createTextNode(p));
  }
  return out;
}

// ---- Overview ----------------------------------------------------------------------
const samples = [];  // {t, requests, seconds}
function parseMetrics(text) {
  let requests = 0, seconds = 0, count = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('corvid_http_requests_total')) requests += Number(line.split(' ').pop());
    else if (line.startsWith('corvid_http_request_duration_seconds_sum')) seconds += Number(line.split(' ').pop());
    else if (line.startsWith('corvid_http_request_duration_seconds_count')) count += Number(line.split(' ').pop());
  }
  return { requests, seconds, count };
}

function chart(points, label) {
  const w = 600, h = 100, max = Math.max(1, ...points);
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('class', 'chart');
  svg.setAttribute('viewBox', `0 0 ${w} ${h + 20}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  const line = document.createElementNS(svg.namespaceURI, 'polyline');
  const step = w / Math.max(1, 59);
  line.setAttribute('points', points.map((v, i) => `${(i * step).toFixed(1)},${(h + 10 - (v / max) * h).toFixed(1)}`).join(' '));
  line.setAttribute('fill', 'none');
  line.setAttribute('stroke', '#2f6fdf');
  line.setAttribute('stroke-width', '2');
  line.setAttribute('vector-effect', 'non-scaling-stroke');
  svg.append(line);
  return el('div', {}, el('div', { class: 'muted' }, `${label}: now ${fmt(points[points.length - 1])}, max ${fmt(max)}`), svg);
}

async function overview(token) {
  const [cols, idx, metrics] = await Promise.all([api('/collections'), api('/admin/indexes'), api('/metrics')]);
  if (token !== pageToken) return;
  const m = parseMetrics(metrics);
  const now = performance.now() / 1000;
  samples.push({ t: now, ...m });
  while (samples.length > 61) samples.shift();
  const rates = [], latencies = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1], b = samples[i], dt = b.t - a.t;
    rates.push(dt > 0 ? (b.requests - a.requests) / dt : 0);
    const dc = b.count - a.count;
    latencies.push(dc > 0 ? ((b.seconds - a.seconds) / dc) * 1000 : 0);
  }
  const docs = cols.collections.reduce((s, c) => s + c.count, 0);
  const busy = idx.indexes.filter((i) => i.state === 'indexing').length;
  const card = (n, what) => el('div', { class: 'card' }, el('div', { class: 'n' }, fmt(n)), el('div', { class: 'muted' }, what));
  show(
    el('h1', {}, 'Overview'),
    el('div', { class: 'cards' },
      card(docs, 'documents'), card(cols.collections.length, 'collections'), card(cols.lastEtag, 'last etag'),
      card(idx.indexes.length, `indexes (${busy} indexing)`),
      card(rates.length ? rates[rates.length - 1] : 0, 'requests/s'),
      card(latencies.length ? latencies[latencies.length - 1] : 0, 'mean latency, ms')),
    el('h2', {}, 'Requests per second, last minute'),
    chart(rates.length ? rates : [0], 'req/s'),
    el('h2', {}, 'Mean latency (ms), last minute'),
    chart(latencies.length ? latencies : [0], 'ms'));
  poll(() => route(), 1000);
}

// ---- Collections and documents ---------------------------------------------------------
async function collections(token) {
  const cols = await api('/collections');
  if (token !== pageToken) return;
  const rows = cols.collections.map((c) => el('tr', {},
    el('td', {}, el('a', { href: '#/collection?name=' + enc(c.name) }, c.name)),
    el('td', { class: 'num' }, fmt(c.count)), el('td', { class: 'num' }, fmt(c.tombstones))));
  show(el('h1', {}, 'Collections'),
    el('p', { class: 'muted' }, `last etag ${fmt(cols.lastEtag)}`),
    rows.length ? el('table', { id: 'collections' }, el('tr', {}, el('th', {}, 'Name'), el('th', { class: 'num' }, 'Documents'),
      el('th', { class: 'num' }, 'Tombstones')), rows) : el('p', { class: 'muted' }, 'No collections yet.'));
  poll(() => route(), 2000);
}

async function collection(token) {
  const name = params().get('name') || '';
  const after = params().get('after') || '';
  const viewer = el('div');
  const idInput = el('input', { placeholder: 'document id', class: 'grow', id: 'doc-id' });
  const openDoc = async (id) => {
    viewer.replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
    try {
      const doc = await api(`/docs/${enc(name)}/${enc(id)}`);
      viewer.replaceChildren(el('h2', {}, id), el('pre', { id: 'doc-json' }, JSON.stringify(doc, null, 2)));
    } catch (e) { viewer.replaceChildren(failure(e)); }
  };
  const [cols, page] = await Promise.all([api('/collections'), api(`/docs/${enc(name)}?limit=50` + (after ? '&after=' + enc(after) : ''))]);
  if (token !== pageToken) return;
  // The newest documents: the tail of the change feed for this collection.
  const since = Math.max(0, cols.lastEtag - 2000);
  const feed = await api(`/changes?collection=${enc(name)}&since=${since}&limit=2000`);
  if (token !== pageToken) return;
  const newest = feed.results.filter((c) => !c.deleted).slice(-20).reverse();
  const link = (id) => el('button', { class: 'link', onclick: () => openDoc(id) }, id);
  show(
    el('h1', {}, 'Collection ', name),
    el('form', { class: 'row', onsubmit: (e) => { e.preventDefault(); if (idInput.value) openDoc(idInput.value); } },
      idInput, el('button', { class: 'primary', type: 'submit' }, 'Open')),
    viewer,
    el('div', { class: 'layout2' },
      el('div', {}, el('h2', {}, 'Newest'),
        newest.length ? el('table', { id: 'newest' }, newest.map((c) => el('tr', {}, el('td', {}, link(c.id)), el('td', { class: 'num muted' }, c.etag))))
          : el('p', { class: 'muted' }, 'No recent changes.')),
      el('div', {}, el('h2', {}, 'By id'),
        el('table', { id: 'by-id' }, page.results.map((r) => el('tr', {}, el('td', {}, link(r.id)),
          el('td', { class: 'muted' }, JSON.stringify(r.doc).slice(0, 140))))),
        page.next ? el('p', {}, el('a', { href: `#/collection?name=${enc(name)}&after=${enc(page.next)}` }, 'Next page →')) : null)));
}

// ---- Indexes -----------------------------------------------------------------------------
function eta(i) {
  if (!i.backlog) return '—';
  if (!i.etaSeconds && i.etaSeconds !== 0) return '?';
  const s = Math.round(i.etaSeconds);
  return s < 90 ? `${s} s` : `${Math.round(s / 60)} min`;
}

async function act(name, action) {
  if (action === 'reset' && !confirm(`Rebuild ${name} from scratch?`)) return;
  try { await api(`/admin/indexes/${enc(name)}/${action}`, { method: 'POST' }); } catch (e) { alert(e.message); }
  route();
}

function indexRow(i, last) {
  const actions = el('td', {},
    i.state === 'paused' ? el('button', { onclick: () => act(i.name, 'resume'), 'data-action': 'resume' }, 'Resume')
      : el('button', { onclick: () => act(i.name, 'pause'), 'data-action': 'pause' }, 'Pause'),
    ' ', el('button', { onclick: () => act(i.name, 'reset'), 'data-action': 'reset' }, 'Reset'));
  const progress = el('td', {}, bar(i.progress), ' ', el('span', { class: 'pct' }, (i.progress * 100).toFixed(1) + '%'));
  const rows = [el('tr', { 'data-index': i.name },
    el('td', {}, el('a', { href: '#/index?name=' + enc(i.name) }, i.name)),
    el('td', {}, i.type), el('td', {}, i.collection),
    el('td', {}, el('span', { class: 'state ' + i.state }, i.state)),
    progress,
    el('td', { class: 'num' }, `${fmt(i.lastIndexedEtag)} / ${fmt(last)}`),
    el('td', { class: 'num' }, fmt(i.backlog)), el('td', { class: 'num' }, fmt(Math.round(i.docsPerSec))),
    el('td', { class: 'num' }, eta(i)), el('td', { class: 'num' }, fmt(i.entries)),
    el('td', { class: 'num' }, i.errors.count ? el('a', { href: '#/index?name=' + enc(i.name) }, fmt(i.errors.count)) : '0'),
    actions)];
  if (i.replacing) {
    rows.push(el('tr', { class: 'muted' }, el('td', {}, '↳ replacing'), el('td', { colspan: 3 }, i.replacing.state),
      el('td', {}, bar(i.replacing.progress), ' ', (i.replacing.progress * 100).toFixed(1) + '%'),
      el('td', { class: 'num' }, fmt(i.replacing.lastIndexedEtag)), el('td', { class: 'num' }, fmt(i.replacing.backlog)),
      el('td', { class: 'num' }, fmt(Math.round(i.replacing.docsPerSec))), el('td', { class: 'num' }, eta(i.replacing)),
      el('td', { colspan: 3 })));
  }
  return rows;
}

async function indexes(token) {
  const data = await api('/admin/indexes');
  if (token !== pageToken) return;
  const head = el('tr', {}, ['Name', 'Type', 'Collection', 'State', 'Progress', 'Indexed / last etag', 'Backlog', 'Docs/s', 'ETA',
    'Entries', 'Errors', ''].map((h) => el('th', {}, h)));
  show(el('h1', {}, 'Indexes'),
    data.indexes.length ? el('table', { id: 'indexes', 'data-updated': Date.now() }, head, data.indexes.map((i) => indexRow(i, data.lastEtag)))
      : el('p', { class: 'muted' }, 'No indexes. PUT /indexes/{name} with a definition, or `corvid index create`.'));
  const busy = data.indexes.some((i) => i.state === 'indexing' || i.backlog > 0 || i.replacing);
  poll(() => route(), busy ? 500 : 1000);
}

async function indexPage(token) {
  const name = params().get('name') || '';
  const data = await api('/indexes/' + enc(name));
  if (token !== pageToken) return;
  const last = (await api('/admin/indexes')).lastEtag;
  if (token !== pageToken) return;
  const errs = data.errors.recent.slice().reverse();
  show(el('h1', {}, 'Index ', name),
    el('table', { id: 'indexes', 'data-updated': Date.now() }, indexRow(data, last)),
    el('h2', {}, `Errors (${fmt(data.errors.count)})`),
    errs.length ? el('table', { id: 'errors' }, el('tr', {}, el('th', {}, 'Etag'), el('th', {}, 'Document'), el('th', {}, 'Message'), el('th', {}, 'At')),
      errs.map((e) => el('tr', {}, el('td', { class: 'num' }, e.etag),
        el('td', {}, e.id ? el('a', { href: `#/collection?name=${enc(data.collection)}` }, e.id) : '—'),
        el('td', {}, e.message), el('td', { class: 'muted' }, e.at || ''))))
      : el('p', { class: 'muted' }, 'No errors.'),
    el('h2', {}, 'Definition'), el('pre', { id: 'definition' }, JSON.stringify(data.definition, null, 2)),
    data.replacing ? el('h2', {}, 'Replacing with (building beside the current definition)') : null,
    data.replacing ? el('pre', { id: 'replacing-definition' }, JSON.stringify(data.replacing.definition || {}, null, 2)) : null);
  poll(() => route(), data.state === 'indexing' || data.backlog > 0 ? 500 : 1000);
}

// ---- Query pages ------------------------------------------------------------------------------
// The indexes of `type`, the one the hash names (else the first) and its
// definition; null when the page changed meanwhile or there is none (then
// the page says so).
async function pickIndex(token, type, title) {
  const all = (await api('/admin/indexes')).indexes.filter((i) => i.type === type);
  if (token !== pageToken) return null;
  if (!all.length) {
    show(el('h1', {}, title), el('p', { class: 'muted' }, `No ${type} index yet.`));
    return null;
  }
  const name = params().get('index') || all[0].name;
  const def = (await api('/indexes/' + enc(name))).definition || {};
  return token === pageToken ? { all, name, def } : null;
}

// Goes to `page` with the current parameters changed: each key of
// `changes` replaced by its value (an array: repeated), or dropped when
// empty.
function navigate(page, changes) {
  const n = params();
  for (const [k, v] of Object.entries(changes)) {
    n.delete(k);
    for (const x of [].concat(v)) if (x !== '' && x !== null && x !== undefined) n.append(k, x);
  }
  setHash(page, n);
}

// ---- Search ---------------------------------------------------------------------------------
async function search(token) {
  const p = params();
  const picked = await pickIndex(token, 'search', 'Search');
  if (!picked) return;
  const { all, name, def } = picked;
  const textFields = Object.entries(def.fields || {})
    .filter(([, f]) => (f.type || 'text') === 'text' && f.analyzer !== 'keyword').map(([k]) => k);
  const facetFields = Object.entries(def.fields || {}).filter(([, f]) => f.facet).map(([k]) => k);
  const q = p.get('q') || '';
  const sort = p.get('sort') || '';
  const limit = Number(p.get('limit') || 10);
  const offset = Number(p.get('offset') || 0);
  const filters = p.getAll('filter');
  const go = (changes) => navigate('search', changes);
  const qInput = el('input', { class: 'grow', id: 'q', value: q, placeholder: 'query (Lucene syntax): fox AND title:"red fox"' });
  const sortInput = el('input', { id: 'sort', value: sort, placeholder: 'sort (e.g. -score)', size: 14 });
  const select = el('select', { id: 'search-index', onchange: () => go({ index: select.value, offset: 0, filter: [] }) },
    all.map((i) => el('option', { value: i.name, selected: i.name === name }, i.name)));
  const form = el('form', { class: 'row', onsubmit: (e) => { e.preventDefault(); go({ q: qInput.value, sort: sortInput.value, offset: 0 }); } },
    select, qInput, sortInput, el('button', { class: 'primary', type: 'submit' }, 'Search'));
  const chips = filters.length ? el('p', {}, 'Filters: ', filters.map((f) => el('span', { class: 'chip' }, f,
    el('button', { title: 'remove', onclick: () => go({ filter: filters.filter((x) => x !== f), offset: 0 }) }, '×')))) : null;
  if (!q) return show(el('h1', {}, 'Search'), form);
  let res;
  try {
    const body = { q, limit, offset, highlight: textFields.join(',') };
    if (sort) body.sort = sort;
    if (facetFields.length) body.facets = facetFields.join(',');
    if (filters.length) body.filter = filters.map((f) => '(' + f + ')').join(' AND ');
    res = await api(`/indexes/${enc(name)}/search`, { method: 'POST', body });
  } catch (e) {
    return show(el('h1', {}, 'Search'), form, chips, failure(e));
  }
  if (token !== pageToken) return;
  const facets = Object.entries(res.facets || {}).map(([field, counts]) => el('div', { class: 'facet' }, el('strong', {}, field),
    Object.entries(counts).map(([value, n]) => el('button', {
      onclick: () => go({ filter: filters.concat(`${field}:${JSON.stringify(value)}`), offset: 0 }),
    }, `${value} (${fmt(n)})`))));
  const hits = res.hits.map((h) => el('div', { class: 'hit' },
    el('div', {}, el('a', { href: `#/collection?name=${enc(def.collection)}` }, el('strong', { class: 'hit-id' }, h.id)),
      el('span', { class: 'muted' }, '  score ' + (typeof h.score === 'number' ? h.score.toFixed(3) : ''))),
    Object.entries(h.highlights || {}).filter(([, frags]) => frags.length).map(([f, frags]) => el('div', { class: 'highlight' }, el('span', { class: 'muted' }, f + ': '),
      frags.map((fr) => highlighted(fr)))),
    h.fields ? el('div', { class: 'muted' }, JSON.stringify(h.fields).slice(0, 300)) : null));
  const pager = el('div', { class: 'row' },
    el('button', { disabled: offset === 0, onclick: () => go({ offset: Math.max(0, offset - limit) }) }, '← Previous'),
    el('span', { class: 'muted' }, `${fmt(offset + 1)}–${fmt(offset + res.hits.length)} of ${fmt(res.total)}`),
    el('button', { disabled: offset + limit >= res.total, onclick: () => go({ offset: offset + limit }) }, 'Next →'));
  show(el('h1', {}, 'Search'), form, chips,
    el('p', { class: 'muted', id: 'search-total' }, `${fmt(res.total)} hits in ${res.tookMs} ms${res.stale ? ' (the index is still catching up)' : ''}`),
    facets.length ? el('div', { class: 'facets' }, facets) : null,
    el('div', { class: 'hits', id: 'hits' }, hits), pager);
}

// ---- Map/reduce -----------------------------------------------------------------------------
async function results(token) {
  const p = params();
  const picked = await pickIndex(token, 'mapreduce', 'Map/Reduce');
  if (!picked) return;
  const { all, name, def } = picked;
  const groups = def.groupBy || [];
  const level = p.has('groupLevel') ? Number(p.get('groupLevel')) : groups.length;
  const sort = p.get('sort') || '';
  const go = (changes) => navigate('results', changes);
  const q = new URLSearchParams({ limit: 1000 });
  if (level < groups.length) q.set('groupLevel', level);
  if (sort) q.set('sort', sort);
  const ranges = {};
  for (const g of groups) for (const op of ['gte', 'lte']) {
    const v = p.get(`${g}.${op}`);
    ranges[`${g}.${op}`] = v || '';
    if (v) q.set(`${g}.${op}`, v);
  }
  let res;
  try { res = await api(`/indexes/${enc(name)}/results?${q}`); } catch (e) { return show(el('h1', {}, 'Map/Reduce'), failure(e)); }
  if (token !== pageToken) return;
  const select = el('select', { id: 'results-index', onchange: () => setHash('results', new URLSearchParams({ index: select.value })) },
    all.map((i) => el('option', { value: i.name, selected: i.name === name }, i.name)));
  const levelSelect = el('select', { id: 'group-level', onchange: () => go({ groupLevel: levelSelect.value }) },
    [...Array(groups.length + 1).keys()].map((n) => el('option', { value: n, selected: n === level }, `group level ${n}`)));
  const rangeInputs = groups.slice(0, Math.max(level, 1)).flatMap((g) => ['gte', 'lte'].map((op) =>
    el('input', { name: `${g}.${op}`, value: ranges[`${g}.${op}`], placeholder: `${g} ${op === 'gte' ? '≥' : '≤'}`, size: 12 })));
  const form = el('form', { class: 'row', onsubmit: (e) => {
    e.preventDefault();
    const changes = {};
    for (const i of rangeInputs) changes[i.name] = i.value;
    go(changes);
  } }, select, levelSelect, rangeInputs, el('button', { type: 'submit' }, 'Filter'));
  const cols = res.rows.length ? Object.keys(res.rows[0]) : groups.slice(0, level);
  const head = el('tr', {}, cols.map((c) => {
    const active = sort === c ? ' ▲' : sort === '-' + c ? ' ▼' : '';
    return el('th', { class: 'sortable', onclick: () => go({ sort: sort === c ? '-' + c : c }) }, c + active);
  }));
  show(el('h1', {}, 'Map/Reduce'), form,
    el('p', { class: 'muted' }, `${fmt(res.total)} rows${res.stale ? ' (the index is still catching up)' : ''}`),
    el('table', { id: 'rows' }, head, res.rows.map((r) => el('tr', {}, cols.map((c) => el('td', { class: typeof r[c] === 'number' ? 'num' : '' },
      typeof r[c] === 'object' ? JSON.stringify(r[c]) : fmt(r[c])))))));
}

// ---- Routing ----------------------------------------------------------------------------------
const pages = { overview, collections, collection, indexes, index: indexPage, search, results };

async function route() {
  clearTimeout(timer);
  const token = ++pageToken;
  const page = (location.hash.replace(/^#\//, '').split('?')[0]) || 'overview';
  for (const a of document.querySelectorAll('nav a')) {
    const p = a.dataset.page;
    a.classList.toggle('active', p === page || (p === 'collections' && page === 'collection') || (p === 'indexes' && page === 'index'));
  }
  const fn = pages[page] || overview;
  try {
    await fn(token);
    document.getElementById('status').textContent = '';
  } catch (e) {
    if (token !== pageToken) return;
    if (e instanceof HttpError) show(failure(e));
    else document.getElementById('status').textContent = 'server unreachable: ' + (e.message || e);
    poll(() => route(), 2000);
  }
}

window.addEventListener('hashchange', route);
route();
