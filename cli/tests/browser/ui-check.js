// Drives Debian's Chromium headless (Playwright's core) against a node's /ui, as
// cli/tests/integration/ui.rs runs it:
//   1. the page loads with no console error and no uncaught exception;
//   2. every node (map marker and card) and every edge's area is on the page, and the call
//      stream is live with every peer's stream connected;
//   3. a call made with the `curl` binary appears in the call list, run by the expected node,
//      and as a dot on the map, within two seconds of curl's answer;
//   4. that node's card then shows its recent latency percentiles;
//   5. screenshots (laptop and phone sizes) are saved.
// Input (environment): UI_URL, NODES and AREAS (comma-separated ids), CALL_ARGS (JSON array
// of curl arguments), EXTRA_CALLS (JSON array of such arrays: calls made first, for the
// picture), CALL_ID (its X-Request-Id), CALL_NODE (the node that must run it),
// CURL_CWD (folder curl runs in), SHOT and SHOT_PHONE (PNG paths), CHROMIUM (default
// /usr/bin/chromium). Exits 0 and prints "ui-check: ok" when everything held.
'use strict';
const { execFile } = require('child_process');
const { chromium } = require('playwright-core');

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`ui-check: ${name} is not set`);
  return v;
};

function curl(args, cwd) {
  return new Promise((resolve, reject) => {
    execFile('curl', args, { cwd }, (err, stdout, stderr) => {
      if (err) reject(new Error(`curl ${args.join(' ')}: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

async function main() {
  const url = env('UI_URL');
  const nodes = env('NODES').split(',');
  const areas = env('AREAS').split(',');
  const callArgs = JSON.parse(env('CALL_ARGS'));
  const callId = env('CALL_ID');
  const callNode = env('CALL_NODE');
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-background-networking', '--disable-gpu'],
  });
  const errors = [];
  try {
    const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 860 } });
    const page = await context.newPage();
    page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()}`); });
    page.on('pageerror', (e) => errors.push(`exception: ${e.message}`));
    page.on('requestfailed', (r) => {
      // The stream is cut when the page closes; anything else failing is a fault.
      if (!r.url().includes('/events')) errors.push(`request failed: ${r.url()} ${r.failure() && r.failure().errorText}`);
    });
    const resp = await page.goto(`${url}/ui`, { waitUntil: 'load' });
    if (!resp || resp.status() !== 200) throw new Error(`GET /ui answered ${resp && resp.status()}`);
    for (const id of nodes) {
      await page.waitForSelector(`svg [data-node="${id}"]`, { state: 'attached', timeout: 10000 });
      await page.waitForSelector(`[data-node-card="${id}"] .badge.up`, { timeout: 10000 });
    }
    for (const id of areas) await page.waitForSelector(`svg [data-area="${id}"]`, { state: 'attached', timeout: 10000 });
    await page.waitForSelector('#stream[data-state="open"]', { timeout: 10000 });
    await page.waitForFunction((n) => document.querySelectorAll('[data-peer][data-connected="true"]').length === n,
      nodes.length - 1, { timeout: 10000 });
    await page.waitForSelector('#land path', { state: 'attached', timeout: 10000 });

    for (const args of JSON.parse(process.env.EXTRA_CALLS || '[]')) await curl(args, env('CURL_CWD'));
    const answer = await curl(callArgs, env('CURL_CWD'));
    const answered = Date.now();
    await page.waitForSelector(`#calls li[data-request-id="${callId}"][data-node="${callNode}"]`, { timeout: 2000 });
    await page.waitForSelector(`[data-call="${callId}"]`, { state: 'attached', timeout: Math.max(1, 2000 - (Date.now() - answered)) });
    const seenMs = Date.now() - answered;
    // The node that ran it reports its recent latency percentiles on its card.
    await page.waitForFunction((id) => /p50 [0-9.]+ · p90 [0-9.]+ · p99 [0-9.]+ ms/.test(
      document.querySelector(`[data-node-card="${id}"]`).textContent), callNode, { timeout: 10000 });

    await page.screenshot({ path: env('SHOT'), fullPage: true });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: env('SHOT_PHONE'), fullPage: false });
    if (errors.length) throw new Error(`the page reported errors:\n${errors.join('\n')}`);
    console.log(`ui-check: ok nodes=${nodes.length} areas=${areas.length} call=${callId} on ${callNode} seen ${seenMs} ms after curl's answer (${JSON.stringify(answer.trim())})`);
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  console.error(`ui-check: FAILED: ${e.stack || e}`);
  process.exit(1);
});
