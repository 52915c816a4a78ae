// The web console in a real browser (issue 30): Debian's Chromium driven by
// playwright-core against `corvid serve` with an API key and real data.
// It logs in (a wrong key first), reads the collections and a document,
// watches an index's progress bar move (at least once a second) while a
// backlog is indexed, pauses and resumes an index from its buttons, runs
// a search (highlights are elements, a document's markup stays text),
// filters by a facet, opens the map/reduce table and sorts it, and checks
// the page's weight and its first render with data. Every step saves a
// screenshot under --screenshots.
//
//   node tests/browser/console_test.mjs --binary build/corvid [--screenshots build/screenshots]
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? acc.concat([[a.slice(2), all[i + 1]]]) : acc), []));
const binary = args.binary;
const shots = args.screenshots || join(process.cwd(), 'screenshots');
const chromiumPath = process.env.CORVID_CHROMIUM || '/usr/bin/chromium';
assert.ok(binary && existsSync(binary), 'pass --binary path/to/corvid');
assert.ok(existsSync(chromiumPath), `no Chromium at ${chromiumPath} (scripts/setup.sh installs Debian's chromium)`);
let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch (e) {
  throw new Error('playwright-core is not installed: run scripts/setup.sh (npm ci in tests/browser)');
}
mkdirSync(shots, { recursive: true });

const KEY = 'console-test-key';
const work = mkdtempSync(join(tmpdir(), 'corvid-browser-'));
const server = spawn(binary, ['serve', '--data', join(work, 'data'), '--listen', '127.0.0.1:0', '--api-key', KEY],
  { stdio: ['ignore', 'pipe', 'pipe'] });
let stderr = '';
server.stderr.on('data', (d) => { stderr += d; });
const base = await new Promise((resolve, reject) => {
  let out = '';
  server.stdout.on('data', (d) => {
    out += d;
    const m = out.match(/corvid listening on (\S+)/);
    if (m) resolve('http://' + m[1]);
  });
  server.on('exit', (code) => reject(new Error(`corvid exited (${code}): ${stderr}`)));
  setTimeout(() => reject(new Error('corvid did not start')), 30000);
});

async function call(method, path, body, type = 'application/json') {
  const r = await fetch(base + path, { method, headers: { Authorization: 'Bearer ' + KEY, 'Content-Type': type }, body });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}
const words = ['red', 'fox', 'lazy', 'dog', 'quick', 'brown', 'jumps', 'river', 'stone', 'cloud'];
const categories = ['news', 'sports', 'science', 'arts'];
async function load(from, count) {
  const lines = [];
  for (let i = from; i < from + count; i++) {
    lines.push(JSON.stringify({ id: 'a' + String(i).padStart(6, '0'), title: `${words[i % 10]} ${words[(i * 7) % 10]} ${i}`,
      body: Array.from({ length: 12 }, (_, j) => words[(i * 3 + j * 5) % 10]).join(' '),
      category: categories[i % 4], score: i % 100 }));
  }
  await call('POST', '/docs/articles/_bulk', lines.join('\n') + '\n', 'application/x-ndjson');
}
async function idle() {
  for (let t = 0; t < 600; t++) {
    const ix = await call('GET', '/admin/indexes');
    if (ix.indexes.every((i) => i.state === 'idle' && i.backlog === 0)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('indexes did not catch up');
}

let browser;
let step = 0;
const results = [];
try {
  for (let i = 0; i < 5000; i += 2500) await load(i, 2500);
  // A document whose text is markup: shown as text, never run.
  await call('PUT', '/docs/articles/xss', JSON.stringify({ id: 'xss', title: 'fox <img src=x onerror="window.__xss=1"> trap',
    body: 'the <script>window.__xss=2</script> fox', category: 'news', score: 1 }));
  await call('PUT', '/indexes/text', JSON.stringify({ type: 'search', collection: 'articles',
    fields: { title: { boost: 2 }, body: { analyzer: 'english' }, category: { analyzer: 'keyword', facet: true }, score: { type: 'number' } },
    store: ['title', 'score'] }));
  await call('PUT', '/indexes/by_category', JSON.stringify({ type: 'mapreduce', collection: 'articles',
    map: { c: 'category', s: 'score' }, groupBy: ['c'], reduce: { n: 'count()', total: 'sum(s)', best: 'max(s)' } }));
  await idle();

  browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox', '--disable-gpu', '--disable-quic',
    '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  const external = [];
  page.on('request', (r) => { if (!r.url().startsWith(base)) external.push(r.url()); });
  const shot = async (name) => page.screenshot({ path: join(shots, `${String(++step).padStart(2, '0')}-${name}.png`), fullPage: true });
  const ok = (what) => { results.push(what); console.log('ok   ' + what); };

  // Log in: a wrong key is refused, the right one kept for the tab.
  await page.goto(base + '/#/collections');
  await page.waitForSelector('#login[open]');
  await shot('login');
  await page.fill('#login-key', 'wrong');
  await page.click('#login-form button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#login-error').textContent.includes('refused'));
  await page.fill('#login-key', KEY);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#collections');
  ok('asks for the API key, refuses a wrong one, accepts the right one');

  // First render with data, the key already in the tab's session.
  const t0 = Date.now();
  await page.reload();
  await page.waitForSelector('#collections td');
  const firstRender = Date.now() - t0;
  const row = await page.textContent('#collections');
  assert.match(row, /articles\s*5,001/);
  assert.ok(firstRender < 1000, `first render with data took ${firstRender} ms`);
  await shot('collections');
  ok(`collections with counts (first render with data in ${firstRender} ms)`);

  // A collection's newest documents and the document viewer.
  await page.click('text=articles');
  await page.waitForSelector('#newest');
  await page.fill('#doc-id', 'a000042');
  await page.click('form.row button[type=submit]');
  await page.waitForSelector('#doc-json');
  const doc = JSON.parse(await page.textContent('#doc-json'));
  assert.equal(doc.id, 'a000042');
  assert.equal(doc.score, 42);
  assert.match(await page.textContent('#newest'), /xss/);
  await shot('document');
  ok('document viewer and newest documents');

  // Indexes: pause with its button, load a backlog, resume, watch the bar.
  await page.goto(base + '/#/indexes');
  await page.waitForSelector('#indexes tr[data-index="text"]');
  await page.click('tr[data-index="text"] button[data-action="pause"]');
  await page.waitForFunction(() => document.querySelector('tr[data-index="text"] .state')?.textContent === 'paused');
  ok('pause from the console: state shows paused');
  for (let i = 5000; i < 305000; i += 20000) await load(i, 20000);
  await page.waitForFunction(() => Number(document.querySelector('tr[data-index="text"] [role=progressbar]')?.getAttribute('aria-valuenow')) < 5);
  await shot('paused-backlog');
  await page.click('tr[data-index="text"] button[data-action="resume"]');
  const seen = new Set();
  const updates = [];
  let last = null;
  let shotIndexing = false;
  for (let t = 0; t < 600; t++) {
    const s = await page.evaluate(() => {
      const r = document.querySelector('tr[data-index="text"]');
      return r && { v: Number(r.querySelector('[role=progressbar]').getAttribute('aria-valuenow')), state: r.querySelector('.state').textContent,
        updated: Number(document.querySelector('#indexes').dataset.updated) };
    });
    if (s) {
      if (s.v < 100) seen.add(s.v);
      if (s.updated !== last) { updates.push({ at: s.updated, v: s.v, state: s.state }); last = s.updated; }
      if (seen.size === 2 && !shotIndexing) { shotIndexing = true; await shot('indexing'); }
      if (s.state === 'idle' && s.v >= 100) break;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const moving = updates.filter((u) => u.state === 'indexing');
  const gaps = moving.slice(1).map((u, i) => u.at - moving[i].at);
  assert.ok(seen.size >= 2, `the progress bar did not move: ${[...seen]}`);
  assert.ok(gaps.length >= 1 && Math.max(...gaps) <= 1100, `updates while indexing every ${gaps} ms`);
  assert.equal(updates[updates.length - 1].v, 100);
  await shot('caught-up');
  ok(`resume from the console; the bar moved through ${seen.size} values, updated every ${Math.max(...gaps)} ms at most while indexing`);

  // Search: hits, highlights as elements, markup in a document as text.
  await page.goto(base + '/#/search?index=text&q=' + encodeURIComponent('fox AND trap'));
  await page.waitForSelector('#hits .hit');
  assert.equal(await page.textContent('#hits .hit-id'), 'xss');
  assert.ok(await page.locator('#hits em').count() >= 1, 'highlights are <em> elements');
  assert.match(await page.textContent('#hits'), /<img src=x onerror/);
  assert.equal(await page.locator('#hits img, #hits script').count(), 0);
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  await shot('search-markup');
  const count = (text) => Number(text.trim().split(' ')[0].replace(/,/g, ''));
  await page.fill('#q', 'fox');
  await page.click('form.row button[type=submit]');
  await page.waitForFunction(() => Number((document.querySelector('#search-total')?.textContent || '').split(' ')[0].replace(/,/g, '')) > 1000);
  const total = await page.textContent('#search-total');
  const all = count(total);
  assert.ok(all > 1000, total);
  await page.click('.facet button:has-text("sports")');
  await page.waitForSelector('.chip');
  await page.waitForFunction((n) => Number((document.querySelector('#search-total')?.textContent || '').split(' ')[0].replace(/,/g, '')) < n, all);
  const filtered = await page.textContent('#search-total');
  assert.ok(count(filtered) > 0 && count(filtered) < all, `${filtered} vs ${total}`);
  await page.click('button:has-text("Next →")');
  await page.waitForFunction(() => location.hash.includes('offset=10'));
  await page.waitForSelector('#hits .hit');
  await shot('search-facet-page2');
  ok(`search: ${total.trim()}; a facet filters (${filtered.trim()}); paging`);

  // Map/reduce rows, sorted by a click.
  await page.goto(base + '/#/results?index=by_category');
  await page.waitForSelector('#rows td');
  const rows = await page.locator('#rows tr').count();
  assert.equal(rows, 1 + 4);
  await page.click('#rows th:has-text("total")');
  await page.waitForFunction(() => location.hash.includes('sort=total'));
  await page.waitForSelector('#rows td');
  await page.click('#rows th:has-text("total")');
  await page.waitForFunction(() => location.hash.includes('sort=-total'));
  await page.waitForSelector('#rows td');
  const firstTotal = await page.textContent('#rows tr:nth-child(2) td:nth-child(3)');
  assert.ok(firstTotal.length > 0);
  await page.selectOption('#group-level', '0');
  await page.waitForFunction(() => document.querySelectorAll('#rows tr').length === 2);
  assert.match(await page.textContent('#rows'), /305,?001/);
  await shot('mapreduce');
  ok('map/reduce rows: sortable, group level 0 rolls up every row');

  // Overview: the live chart.
  await page.goto(base + '/#/overview');
  await page.waitForSelector('svg.chart');
  await page.waitForTimeout(2200);
  await shot('overview');
  ok('overview with live charts');

  // Page weight: every file the console loads.
  let weight = 0;
  for (const f of ['/', '/ui/console.js', '/ui/console.css']) weight += (await (await fetch(base + f)).arrayBuffer()).byteLength;
  assert.ok(weight <= 200 * 1024, `the console weighs ${weight} bytes`);
  ok(`page weight ${weight} bytes`);
  assert.deepEqual(external, [], 'requests outside the server');
  assert.deepEqual(pageErrors, [], 'JavaScript errors');
  ok('no request outside the server, no JavaScript error');
  console.log(`\n${results.length} checks passed; screenshots in ${shots}`);
} catch (e) {
  console.error('FAILED: ' + (e.stack || e));
  if (browser) {
    for (const c of browser.contexts()) for (const p of c.pages()) await p.screenshot({ path: join(shots, 'failed.png'), fullPage: true }).catch(() => {});
  }
  console.error('corvid stderr:\n' + stderr.slice(-3000));
  process.exitCode = 1;
} finally {
  if (browser) await browser.close();
  server.kill('SIGTERM');
  await new Promise((r) => server.on('exit', r));
  rmSync(work, { recursive: true, force: true });
}
