// The dashboard in a real browser (Debian's Chromium through playwright-core) against a running
// `leasehold dev`, started as a user starts it, with an app of two test jobs and the units demo.
// A check that fails writes a screenshot under test-results/dashboard/ first. With
// LEASEHOLD_SCREENSHOTS=DIR (`npm run screenshots`: DIR is docs/), the last test also writes the
// README's screenshots there.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiBatch } from '../../src/client/index.js';
import { launchBrowser, outputDir, withScreenshot, type TestBrowser } from '../support/browser.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { finishedBatch, killDevProcesses, startDev, type DevProcess } from '../support/dev-process.js';
import { CHROMIUM, needs } from '../support/programs.js';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin', 'leasehold.js');
const APP = join(import.meta.dirname, 'fixtures', 'app.mjs');
const OUT = outputDir('dashboard');
const run = promisify(execFile);
/** The browser's tests skip outside CI on a machine without Chromium; the CLI's still run. */
const withChromium = needs(CHROMIUM);

const db = useTestDatabase();
let project: string;
let dev: DevProcess;
let browser: TestBrowser;
let page: Page;

beforeAll(async () => {
  project = mkdtempSync(join(tmpdir(), 'leasehold-dashboard-'));
  dev = await startDev(
    process.execPath,
    [BIN, 'dev', '--app', APP, '--port', '0', '--units-demo', '4', '--schedule-ms', '1000'],
    {
      cwd: project,
      env: { ...process.env, DATABASE_URL: db.schemaUrl },
    },
  );
  if (!withChromium.skip) {
    browser = await launchBrowser();
    page = browser.page;
  }
}, 120_000);

afterAll(async () => {
  await browser?.close();
  const stopped = await dev?.stop();
  killDevProcesses();
  rmSync(project, { recursive: true, force: true });
  expect(stopped?.code, stopped?.stderr).toBe(0);
});

/** A test of the page: a failing check leaves `test-results/dashboard/<name>.failed.png`. */
function browserTest(name: string, check: () => Promise<void>, timeoutMs = 90_000) {
  it(name, () => withScreenshot(page, OUT, name, check), timeoutMs);
}

/** Start a batch of the test app's jobs through the API. */
async function start(
  job: 'slow' | 'flaky' | 'bulk' | 'waits',
  params: Record<string, unknown>,
  tenant = 'acme',
  datasource = `ds-${randomUUID().slice(0, 8)}`,
  toleratedFailures?: { count: number } | { percent: number },
): Promise<ApiBatch> {
  const { batch } = await dev.api.startBatch({ tenant, datasource, job, params, toleratedFailures });
  return batch;
}

/** The row of batch `id` on the batches page, and its progress bar. */
const rowOf = (id: string) => page.locator(`tr[data-batch="${id}"]`);
const barOf = (id: string) => rowOf(id).getByRole('progressbar');

describe('the dashboard in a browser, against leasehold dev', withChromium, () => {
  browserTest('is served by leasehold dev on the API port, with its own assets and a content security policy', async () => {
    expect(dev.stderr()).toMatch(/dashboard +http:\/\/127\.0\.0\.1:\d+\//);
    const res = await fetch(`${dev.url}/`);
    expect(res.headers.get('content-security-policy')).toMatch(/script-src 'self'/);
    await page.goto(`${dev.url}/`);
    await expect.poll(() => page.title()).toBe('Batches · leasehold');
    await page.getByRole('heading', { name: 'Batches' }).waitFor();
    // How long finished batches are kept, as GET /batches says (LEASEHOLD_RETENTION_DAYS, default 30).
    expect(((await (await fetch(`${dev.url}/batches`)).json()) as { retentionDays: number }).retentionDays).toBe(30);
    await page.locator('[data-retention]').waitFor();
    expect(await page.locator('[data-retention]').textContent()).toBe(
      'Finished batches are kept 30 days, then deleted with their items.',
    );
    // The API's paths still answer JSON next to the page.
    expect((await fetch(`${dev.url}/jobs`)).headers.get('content-type')).toBe('application/json');
  });

  browserTest('shows a running batch whose progress bar advances to 100 % without a reload', async () => {
    // 96 items of 300 ms, 4 at a time: about 7 s, so the page (every 2 s) shows it under way.
    const batch = await start('slow', { n: 96, ms: 300 });
    await page.goto(`${dev.url}/#/batches`);
    await page.evaluate(() => ((window as unknown as { loadedOnce: boolean }).loadedOnce = true));
    const seen: number[] = [];
    const until = Date.now() + 60_000;
    for (;;) {
      const now = Number((await barOf(batch.id).getAttribute('aria-valuenow', { timeout: 10_000 })) ?? -1);
      if (seen.at(-1) !== now) seen.push(now);
      if (now === 96 || Date.now() > until) break;
      await page.waitForTimeout(100);
    }
    expect(seen.filter((v) => v > 0 && v < 96).length, `values seen: ${seen.join(', ')}`).toBeGreaterThanOrEqual(2);
    expect(
      [...seen].sort((a, b) => a - b),
      'the bar never goes back',
    ).toEqual(seen);
    expect(await barOf(batch.id).getAttribute('data-percent')).toBe('100');
    expect(await rowOf(batch.id).locator('.pct').textContent()).toBe('100 %');
    await rowOf(batch.id).getByText('succeeded').waitFor();
    // Live updates, no reload: the page's own state is still there.
    expect(await page.evaluate(() => (window as unknown as { loadedOnce?: boolean }).loadedOnce)).toBe(true);
    expect(browser.pageErrors).toEqual([]);
  });

  browserTest("a batch's page follows its progress stream: it advances while it streams, with no poll of the batch", async () => {
    // 60 items of 300 ms, 4 at a time: about 5 s.
    const batch = await start('slow', { n: 60, ms: 300 });
    const polls: string[] = [];
    const onRequest = (r: { url(): string }) => {
      if (new URL(r.url()).pathname === `/batches/${batch.id}`) polls.push(r.url());
    };
    await page.goto(`${dev.url}/#/batches/${batch.id}`);
    await page.locator('section[data-live="stream"]').waitFor({ timeout: 20_000 });
    page.on('request', onRequest);
    const seen: string[] = [];
    const until = Date.now() + 60_000;
    while (Date.now() < until) {
      const status = (await page.locator('section[aria-labelledby="batch-title"] .badge').first().textContent()) ?? '';
      const done =
        (await page
          .locator('section[aria-labelledby="batch-title"] [role="progressbar"]')
          .first()
          .getAttribute('aria-valuenow')) ?? '';
      if (seen.at(-1) !== done) seen.push(done);
      if (status === 'succeeded') break;
      await page.waitForTimeout(100);
    }
    page.off('request', onRequest);
    expect(seen.filter((v) => Number(v) > 0 && Number(v) < 60).length, `values seen: ${seen.join(', ')}`).toBeGreaterThanOrEqual(
      2,
    );
    expect(seen.at(-1)).toBe('60');
    // The stream alone moved the page: no GET of the batch while it was live (polling every 2 s
    // would have sent two or more over these seconds), only the one read once the stream ended.
    expect(polls.length, polls.join(', ')).toBeLessThanOrEqual(1);
    expect(browser.pageErrors).toEqual([]);
  });

  browserTest("shows a failed item's error and attempts, and redrive turns it done", async () => {
    const batch = await start('flaky', { n: 12, fail: ['item-0004', 'item-0009'] });
    expect((await finishedBatch(dev.api, batch.id)).status).toBe('failed');
    await page.goto(`${dev.url}/#/batches/${batch.id}`);
    const failedRow = page.locator('tr[data-item="item-0004"]');
    await failedRow.waitFor();
    expect(await failedRow.locator('td').nth(1).textContent()).toBe('failed');
    expect(await failedRow.locator('td').nth(2).textContent()).toBe('1');
    expect(await failedRow.locator('td').nth(3).textContent()).toBe('upstream refused item-0004');
    await page.locator('tr[data-item="item-0009"]').getByText('upstream refused item-0009').waitFor();
    await page.locator('figure.chart canvas').first().waitFor();

    await page.getByRole('button', { name: 'Redrive failed items' }).click();
    await page.getByRole('status').getByText('Redrive 1: 2 failed items pending again.').waitFor();
    // The hint and the result read as two sentences, a space between them.
    expect(await page.getByRole('status').locator('xpath=..').textContent()).toMatch(/\. Redrive 1: 2 failed/);
    await page.locator('.facts .badge', { hasText: 'succeeded' }).waitFor({ timeout: 30_000 });
    await page.getByLabel('State').selectOption('');
    const redriven = page.locator('tr[data-item="item-0004"]');
    await expect.poll(() => redriven.getAttribute('data-state'), { timeout: 10_000 }).toBe('done');
    expect(await redriven.locator('td').nth(2).textContent()).toBe('1');
    expect(await page.getByRole('button', { name: 'Redrive failed items' }).isDisabled()).toBe(true);
    const after = await dev.api.getBatch(batch.id);
    expect(after).toMatchObject({ status: 'succeeded', redrives: 1, counts: { done: 12, failed: 0 } });
    expect(browser.pageErrors).toEqual([]);
  });

  browserTest('shows what a batch tolerates, the reason it failed past it, and failures it tolerated', async () => {
    // Two failures, one tolerated: the batch ends failed at the second, saying why.
    const over = await start('flaky', { n: 12, fail: ['item-0001', 'item-0002'] }, 'acme', undefined, { count: 1 });
    expect((await finishedBatch(dev.api, over.id)).status).toBe('failed');
    await page.goto(`${dev.url}/#/batches/${over.id}`);
    await page.locator('dd[data-tolerance]', { hasText: '1 failed item · 2 failed' }).waitFor();
    await page
      .locator('dd[data-reason]', { hasText: 'more items failed than tolerated: 2 failed, 1 tolerated (count 1)' })
      .waitFor();
    expect(await page.locator('.facts .badge', { hasText: 'failed' }).count()).toBe(1);

    // Two failures within 20 % of 12 items (2 allowed): succeeded, its failed items listed.
    const within = await start('flaky', { n: 12, fail: ['item-0003', 'item-0007'] }, 'acme', undefined, { percent: 20 });
    expect((await finishedBatch(dev.api, within.id)).status).toBe('succeeded');
    await page.goto(`${dev.url}/#/batches/${within.id}`);
    await page.locator('dd[data-tolerance]', { hasText: '20 % of the items (2 of 12) · 2 failed' }).waitFor();
    await page.locator('tr[data-item="item-0007"]').getByText('upstream refused item-0007').waitFor();
    expect(await page.locator('dd[data-reason]').count()).toBe(0);
    await page.goto(`${dev.url}/#/batches?tenant=acme`);
    await rowOf(within.id).locator('[data-tolerated]', { hasText: '2 failed, tolerated' }).waitFor();
    expect(browser.pageErrors).toEqual([]);
  });

  browserTest("shows a batch's waiting items with what they wait for and their deadlines, and the waiting count", async () => {
    // A callback (timing out in 10 min, heartbeat due in 5 min) and a sleep of 5 min: the batch
    // parks with both waiting, one item done.
    const batch = await start('waits', {});
    try {
      await expect
        .poll(async () => (await dev.api.getBatch(batch.id)).counts, { timeout: 30_000 })
        .toMatchObject({ done: 1, waiting: 2, pending: 0, running: 0 });
      await page.goto(`${dev.url}/#/batches/${batch.id}`);
      const callback = page.locator('tr[data-item="item-0000"][data-state="waiting"] [data-wait="callback"]');
      const sleep = page.locator('tr[data-item="item-0001"][data-state="waiting"] [data-wait="sleep"]');
      await callback.waitFor({ timeout: 20_000 });
      // Relative to the page's clock when it read the items: a few seconds after the waits began.
      expect(await callback.textContent()).toMatch(
        /^callback · times out in (9 min [1-5]?\d|10 min 0) s · heartbeat due in (4 min [1-5]?\d|5 min 0) s$/,
      );
      expect(await sleep.textContent()).toMatch(/^sleep · wakes in (4 min [1-5]?\d|5 min 0) s$/);
      // Each deadline's absolute time is its title, in the page's one format.
      expect(await sleep.locator('[data-wait-deadline="wakes"]').getAttribute('title')).toMatch(
        /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/,
      );
      expect(await page.locator('tr[data-item="item-0002"] [data-wait]').count()).toBe(0);
      // The waiting count: in the legend, and the state filter, which lists the two alone.
      expect(await page.locator('.legend li[data-part="waiting"] strong').first().textContent()).toBe('2');
      await page.getByLabel('State').selectOption('waiting');
      await expect.poll(() => page.locator('table.items tbody tr').count(), { timeout: 10_000 }).toBe(2);
      expect(await page.getByLabel('State').locator('option[value="waiting"]').textContent()).toBe('waiting (2)');
    } finally {
      // Its waits would keep it open for minutes, beside the later tests' batches of its tenant
      // (the redrive test counted a third run of its batch in CI, 2026-12-07).
      await dev.api.cancelBatch(batch.id).catch(() => {});
    }
    expect(browser.pageErrors).toEqual([]);
  });

  browserTest('cancels an open batch, in two steps, from the batches page', async () => {
    const batch = await start('slow', { n: 400, ms: 500 }, 'globex');
    await page.goto(`${dev.url}/#/batches?tenant=globex`);
    const row = rowOf(batch.id);
    await row.getByRole('button', { name: `Cancel batch ${batch.id.slice(0, 8)}` }).click();
    await row.getByRole('button', { name: 'Yes, cancel for good' }).click();
    await row.locator('.badge', { hasText: 'cancelled' }).waitFor({ timeout: 10_000 });
    expect(await row.getByRole('button', { name: /Cancel/ }).count()).toBe(0);
    expect((await dev.api.getBatch(batch.id)).status).toBe('cancelled');
    expect(browser.pageErrors).toEqual([]);
  });

  browserTest('pauses and resumes an open batch from the batches page, showing it as paused', async () => {
    const batch = await start('slow', { n: 400, ms: 500 }, 'initech');
    await page.goto(`${dev.url}/#/batches?tenant=initech`);
    const row = rowOf(batch.id);
    await row.getByRole('button', { name: `Pause batch ${batch.id.slice(0, 8)}` }).click();
    await row.locator('.badge', { hasText: 'paused' }).waitFor({ timeout: 10_000 });
    expect(await dev.api.getBatch(batch.id)).toMatchObject({ status: 'open', paused: true });
    await row.getByRole('button', { name: `Resume batch ${batch.id.slice(0, 8)}` }).click();
    await row.locator('.badge', { hasText: 'open' }).waitFor({ timeout: 10_000 });
    expect(await dev.api.getBatch(batch.id)).toMatchObject({ status: 'open', paused: false });
    await dev.api.cancelBatch(batch.id);
    expect(browser.pageErrors).toEqual([]);
  });

  browserTest('filters batches by tenant and status through the address', async () => {
    await page.goto(`${dev.url}/#/batches`);
    await page.getByLabel('Tenant').fill('globex');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByLabel('Status').selectOption('cancelled');
    await expect.poll(() => page.evaluate(() => location.hash)).toBe('#/batches?tenant=globex&status=cancelled');
    await expect
      .poll(
        async () =>
          new Set(await page.locator('tr[data-batch]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-status')))),
      )
      .toEqual(new Set(['cancelled']));
    await expect
      .poll(() => page.locator('tr[data-batch] td:nth-child(3)').allTextContents())
      .toEqual(expect.arrayContaining([expect.stringMatching(/^globex \//)]));
  });

  browserTest(
    'shows live processes with their weight against the fair share, expired ones, and changes the desired count',
    async () => {
      // A process that died without leaving: its row stays, expired, until the sweep.
      const dead = randomUUID();
      await db.sql`insert into leasehold_processes (id, hostname, version, expires_at) values (${dead}, 'gone-host', 'test', now() - interval '2 minutes')`;
      await page.goto(`${dev.url}/#/fleet`);
      const live = page.locator('table.processes:not(.expired) tr[data-process]');
      await expect.poll(() => live.count(), { timeout: 30_000 }).toBeGreaterThan(0);
      // The units demo's weight (8) is owned by live processes: some bar shows weight.
      await expect
        .poll(
          async () =>
            (await page.locator('.weight').evaluateAll((bars) => bars.map((b) => Number(b.getAttribute('data-weight'))))).reduce(
              (a, b) => a + b,
              0,
            ),
          {
            timeout: 30_000,
          },
        )
        .toBe(8);
      const label = await page.locator('.weight').first().getAttribute('aria-label');
      // Against the fair share (the bar's mark) and the exact share it rounds up (the percent).
      expect(label).toMatch(/^weight \d+ of fair share \d+ \([\d.]+ % of the even share [\d.]+\)$/);
      const even = Number(await page.locator('dd[data-even-share]').getAttribute('data-even-share'));
      // A fleet process's row (a batch worker's has no share of the units).
      const fleetRow = live.filter({ has: page.locator('[data-share-percent]') }).first();
      const first = Number(await fleetRow.locator('.weight').getAttribute('data-weight'));
      expect(await fleetRow.locator('[data-share-percent]').textContent()).toBe(`${Math.round((1000 * first) / even) / 10} %`);
      await page.locator('[data-weight-legend]').getByText('above the fair share').waitFor();
      await page.locator(`table.expired tr[data-process="${dead}"]`).getByText('gone-host').waitFor();

      await page.getByLabel('Desired live processes').fill('2');
      await page.getByRole('button', { name: 'Set desired count' }).click();
      await page.getByText('Desired count set to 2').waitFor();
      expect((await dev.api.getConcurrency()).desired).toBe(2);
      await page.locator('dd[data-desired="2"]').waitFor();
      await db.sql`delete from leasehold_processes where id = ${dead}`;
      expect(browser.pageErrors).toEqual([]);
    },
  );

  browserTest("shows a cancelled batch's unfinished items as not run, and that it is never redriven", async () => {
    const batch = await start('slow', { n: 200, ms: 300 });
    await expect.poll(async () => (await dev.api.getBatch(batch.id)).counts.running, { timeout: 30_000 }).toBeGreaterThan(0);
    const cancelled = await dev.api.cancelBatch(batch.id);
    await page.goto(`${dev.url}/#/batches/${batch.id}`);
    const notRun = page.locator('.legend [data-part="not run"] strong');
    await notRun.waitFor();
    const after = await dev.api.getBatch(batch.id);
    expect(after.notRun).toBeGreaterThan(0);
    expect(Number(await notRun.textContent())).toBe(after.notRun);
    expect(await page.locator('.legend [data-part="running"]').count()).toBe(0);
    expect(await page.getByRole('progressbar').getAttribute('aria-valuetext')).toContain(`${after.notRun} not run`);
    expect(await page.locator('#redrive-help').textContent()).toContain('A cancelled batch is never redriven');
    expect(cancelled.status).toBe('cancelled');
    expect(browser.pageErrors).toEqual([]);
  });

  browserTest('says so for an unknown batch or page, instead of loading for ever or showing another page', async () => {
    await page.goto(`${dev.url}/#/batches/${randomUUID()}`);
    await page
      .locator('[role="alert"]')
      .getByText(/HTTP 404/)
      .waitFor();
    await page.locator('[data-no-batch]').waitFor();
    expect(await page.getByText('Loading…').count()).toBe(0);
    await page.goto(`${dev.url}/#/no-such-view`);
    await page.locator('[data-unknown-route]').getByText('#/no-such-view').waitFor();
    await expect.poll(() => page.title()).toBe('No such page · leasehold');
    expect(await page.getByRole('heading', { name: 'Batches' }).count()).toBe(0);
    // The unknown batch's 404s, and nothing else; the next tests start clean, once the last poll
    // of the batch view (its items and series may still be on their way) has answered.
    await browser.settled();
    expect(browser.pageErrors.filter((e) => !/status of 404/.test(e))).toEqual([]);
    browser.pageErrors.length = 0;
  });

  browserTest("shows each tenant's units, owners and outbox backlog per endpoint", async () => {
    await page.goto(`${dev.url}/#/units`);
    for (const tenant of ['acme', 'globex']) {
      const article = page.locator(`article[data-tenant="${tenant}"]`);
      await article.waitFor({ timeout: 20_000 });
      await article.getByText(`4 units of outbox-delivery, weight 4`).waitFor();
      const endpoint = article.locator('table.outbox tr[data-endpoint]');
      await endpoint.first().waitFor();
      expect(await endpoint.first().getAttribute('data-endpoint')).toMatch(new RegExp(`/${tenant}/hook$`));
    }
    // A quarantined unit (the state three crashes in a row leave: test/units/poison.test.ts makes
    // them happen) is named with its crashes and its end, until it is released.
    await db.sql`update leasehold_units set owner = null, crashes = 3, quarantines = 1,
        quarantined_until = now() + interval '5 minutes'
      where tenant = 'globex' and shard = 2`;
    const held = page.locator('article[data-tenant="globex"] .quarantine .quarantined[data-shard="2"]');
    await held.waitFor({ timeout: 20_000 });
    expect(await held.textContent()).toMatch(/^shard 2 \(3 crashes in a row\) until /);
    expect(await page.locator('article[data-tenant="acme"] .quarantine').count()).toBe(0);
    await dev.api.releaseUnit('globex', 2);
    await page.locator('article[data-tenant="globex"] .quarantine').waitFor({ state: 'detached', timeout: 20_000 });
    expect(browser.pageErrors).toEqual([]);
  });

  browserTest("lists the pools with their limit and items in flight, linked from a batch's page, and fits 700 px", async () => {
    const name = `pool-${randomUUID().slice(0, 8)}`;
    await dev.api.setPool(name, { limit: 2 });
    // 4 items at a time by its job, 2 by its pool: the pool is full while it runs (cancelled below).
    const { batch } = await dev.api.startBatch({
      tenant: 'acme',
      datasource: `ds-${randomUUID().slice(0, 8)}`,
      job: 'slow',
      params: { n: 200, ms: 500 },
      pool: name,
    });
    try {
      await page.goto(`${dev.url}/#/batches/${batch.id}`);
      await page.locator('[data-pool]').getByRole('link', { name }).click();
      await page.getByRole('heading', { name: `Pool ${name}` }).waitFor();
      await expect.poll(() => page.title()).toBe('Pool · leasehold');
      const tab = page.getByRole('navigation', { name: 'Views' }).getByRole('link', { name: 'Pools' });
      expect(await tab.getAttribute('aria-current')).toBe('page');
      await tab.click();
      const row = page.locator(`table.pools tr[data-pool="${name}"]`);
      for (const width of [1280, 700]) {
        await page.setViewportSize({ width, height: 800 });
        await expect.poll(() => row.locator('[data-in-flight]').textContent(), { timeout: 20_000 }).toBe('2');
        expect(await row.locator('[data-limit]').textContent()).toBe('2');
        expect(await row.getByRole('meter').getAttribute('aria-valuetext')).toBe('2 of 2 in flight (100 %)');
        // The table fits the window: no sideways scrolling.
        const fit = await page.evaluate(() => {
          const table = document.querySelector('table.pools')!;
          return { table: table.scrollWidth, room: table.parentElement!.clientWidth, page: document.documentElement.scrollWidth };
        });
        expect(fit.table, `table at ${width} px`).toBeLessThanOrEqual(fit.room);
        expect(fit.page, `page at ${width} px`).toBeLessThanOrEqual(width);
      }
    } finally {
      await page.setViewportSize({ width: 1280, height: 800 });
      await dev.api.cancelBatch(batch.id).catch(() => {});
    }
    expect(browser.pageErrors).toEqual([]);
  });

  browserTest(
    "draws the chart's count labels whole past 10,000",
    async () => {
      // 10,500 items, then the batch's creation moved an hour back, as if it had waited its turn
      // that long: the chart's buckets are minutes long and the last one holds every item.
      const batch = await start('bulk', { n: 10_500 }, 'acme', 'bulk');
      expect((await finishedBatch(dev.api, batch.id, 150_000)).status).toBe('succeeded');
      await db.sql`update leasehold_batches set created_at = created_at - interval '1 hour' where id = ${batch.id}`;
      await page.goto(`${dev.url}/#/batches/${batch.id}`);
      const chart = page.locator('figure.chart [data-y-ticks]');
      await expect.poll(() => chart.getAttribute('data-y-ticks'), { timeout: 10_000 }).toMatch(/(^| )10,000( |$)/);
      // A label cut at the canvas's left edge ("),000") leaves ink in its first columns.
      const ink = await page.locator('figure.chart canvas').evaluate((canvas: HTMLCanvasElement) => {
        const plot = canvas.parentElement!.querySelector('.u-over')!.getBoundingClientRect();
        const box = canvas.getBoundingClientRect();
        const scale = canvas.width / box.width;
        const rows = Math.floor((plot.bottom - box.top) * scale);
        const { data } = canvas.getContext('2d')!.getImageData(0, 0, Math.ceil(3 * scale), rows);
        let inked = 0;
        for (let i = 3; i < data.length; i += 4) if (data[i] > 0) inked++;
        return { inked, axis: (plot.left - box.left) * scale };
      });
      expect(ink.inked, 'ink in the first 3 px of the y axis').toBe(0);
      expect(ink.axis).toBeGreaterThan(40);
      expect(browser.pageErrors).toEqual([]);
    },
    200_000,
  );

  browserTest('keeps its layout at 1280 and 700 px: the cancel question, ages, times and the chart', async () => {
    const open = await start('slow', { n: 400, ms: 500 }, 'initech-of-a-longer-name', 'a-datasource-with-a-long-name');
    const short = await start('flaky', { n: 12, fail: [] });
    expect((await finishedBatch(dev.api, short.id)).status).toBe('succeeded');
    const columnWidths = () =>
      page.locator('table.batches thead th').evaluateAll((ths) => ths.map((th) => Math.round(th.getBoundingClientRect().width)));
    try {
      for (const width of [1280, 700]) {
        await page.setViewportSize({ width, height: 800 });
        await page.goto(`${dev.url}/#/batches`);
        const row = rowOf(open.id);
        await row.waitFor();
        // The table fits the window: no sideways scrolling.
        const fit = await page.evaluate(() => {
          const table = document.querySelector('table.batches')!;
          return { table: table.scrollWidth, room: table.parentElement!.clientWidth, page: document.documentElement.scrollWidth };
        });
        expect(fit.table, `table at ${width} px`).toBeLessThanOrEqual(fit.room);
        expect(fit.page, `page at ${width} px`).toBeLessThanOrEqual(width);
        // Every age on one line ("10 min 41 s" wrapped to four).
        const ageLines = await page.locator('table.batches tbody td[data-age]').evaluateAll((cells) =>
          cells.map((td) => {
            const range = document.createRange();
            range.selectNodeContents(td);
            return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
          }),
        );
        expect(ageLines.length).toBeGreaterThan(1);
        expect(
          ageLines.every((n) => n === 1),
          `lines per age: ${ageLines.join(', ')}`,
        ).toBe(true);
        // The cancel question widens no column, stays in the window, and Keep it brings the button back.
        const before = await columnWidths();
        await row.getByRole('button', { name: `Cancel batch ${open.id.slice(0, 8)}` }).click();
        const question = row.getByRole('group', { name: `Cancel batch ${open.id.slice(0, 8)} for good?` });
        await question.waitFor();
        expect(await columnWidths()).toEqual(before);
        const box = (await question.boundingBox())!;
        expect(box.x).toBeGreaterThanOrEqual(0);
        expect(box.x + box.width).toBeLessThanOrEqual(width);
        await question.getByRole('button', { name: 'Keep it' }).click();
        await row.getByRole('button', { name: `Cancel batch ${open.id.slice(0, 8)}` }).waitFor();

        // A short batch's chart: as wide as its card, whole-second ticks far enough apart.
        await page.goto(`${dev.url}/#/batches/${short.id}`);
        const plot = page.locator('figure.chart [data-x-ticks]');
        await plot.waitFor();
        const chart = await page.locator('figure.chart').evaluate((figure) => {
          const style = getComputedStyle(figure);
          const inner = figure.getBoundingClientRect();
          const left = inner.left + parseFloat(style.borderLeftWidth) + parseFloat(style.paddingLeft);
          const right = inner.right - parseFloat(style.borderRightWidth) - parseFloat(style.paddingRight);
          const drawn = figure.querySelector('.uplot')!.getBoundingClientRect();
          const area = figure.querySelector('.u-over')!.getBoundingClientRect();
          return { left, right, drawnLeft: drawn.left, drawnRight: drawn.right, areaRight: area.right, areaWidth: area.width };
        });
        expect(Math.abs(chart.drawnLeft - chart.left)).toBeLessThanOrEqual(1);
        expect(Math.abs(chart.drawnRight - chart.right)).toBeLessThanOrEqual(1);
        expect(chart.right - chart.areaRight, 'room right of the plot').toBeLessThanOrEqual(40);
        const ticks = (await plot.getAttribute('data-x-ticks'))!.split(' ');
        expect(ticks.length).toBeGreaterThanOrEqual(1);
        expect(ticks.length).toBeLessThanOrEqual(Math.floor(chart.areaWidth / 90) + 1);
        expect(new Set(ticks).size).toBe(ticks.length);
        expect(
          ticks.every((t) => /^\d\d:\d\d(:\d\d)?$/.test(t)),
          ticks.join(' '),
        ).toBe(true);
        // One way of writing times on the page: the chart's, the facts' and the tables'.
        const times = await page.locator('main time').allTextContents();
        expect(times.length).toBeGreaterThanOrEqual(2);
        expect(
          times.every((t) => /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/.test(t)),
          times.join(' | '),
        ).toBe(true);
        expect(await page.locator('main').innerText()).not.toMatch(/\d+\/\d+\/\d+|\d(am|pm)\b/);
        expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(width);
      }
      // Narrowed while open, with no new page: the chart follows its card down (it stayed 1,222 px
      // wide and the page scrolled sideways, as the chart's box took its width from the plot).
      await page.setViewportSize({ width: 1280, height: 800 });
      await page.goto(`${dev.url}/#/batches/${open.id}`);
      await page.locator('figure.chart [data-x-ticks]').waitFor();
      await page.setViewportSize({ width: 700, height: 800 });
      await expect
        .poll(() =>
          page.locator('figure.chart').evaluate((figure) => {
            const inner = figure.getBoundingClientRect().right - parseFloat(getComputedStyle(figure).paddingRight);
            const over = figure.querySelector('.uplot')!.getBoundingClientRect().right - inner;
            return { within: over <= 1, page: document.documentElement.scrollWidth };
          }),
        )
        .toEqual({ within: true, page: 700 });
    } finally {
      await page.setViewportSize({ width: 1280, height: 800 });
      await dev.api.cancelBatch(open.id).catch(() => {});
    }
    expect(browser.pageErrors).toEqual([]);
  });

  browserTest("shows the fleet's turnover as chains of processes replaced at their deadline", async () => {
    await page.goto(`${dev.url}/#/fleet`);
    await page.locator('[data-turnover]').getByText('a new process with a new id').waitFor();
    // One sentence: htm drops the white space of a line break next to an element ("underleasehold").
    expect(await page.locator('[data-turnover]').textContent()).toContain('about 20 s under leasehold dev, up to');
    // Local fleet processes live about 20 s: within a minute some live one replaced another.
    const replaced = page.locator(
      'table.processes:not(.expired) tr[data-process]:has([data-replacements]:not([data-replacements="0"]))',
    );
    // A process lives about 20 s: the row read may be one that left (replaced) before the API was
    // asked; then the page's next refresh shows its successor, which is read instead.
    let row = replaced.first();
    let shown: { chain: string | null; replacements: number; replaces: string | null } | undefined;
    let p: Awaited<ReturnType<typeof dev.api.listProcesses>>['processes'][number] | undefined;
    let processes: Awaited<ReturnType<typeof dev.api.listProcesses>>['processes'] = [];
    for (let tries = 0; tries < 5 && !p; tries++) {
      if (tries > 0) await page.waitForTimeout(2_000);
      await replaced.first().waitFor({ timeout: 60_000 });
      const id = (await replaced.first().getAttribute('data-process'))!;
      // That row itself, whatever the next refresh puts first.
      row = page.locator(`table.processes tr[data-process="${id}"]`);
      shown = {
        chain: await row.getAttribute('data-chain'),
        replacements: Number(await row.locator('[data-replacements]').getAttribute('data-replacements')),
        replaces: await row.locator('[data-replaces]').getAttribute('data-replaces'),
      };
      ({ processes } = await dev.api.listProcesses());
      p = processes.find((x) => x.id === id);
    }
    if (!p) throw new Error('no process shown as replaced was still listed by the API when it was asked, 5 times');
    expect(shown).toEqual({ chain: p.chainId, replacements: p.replacements, replaces: p.replaces });
    // The one it replaced left (its row is gone, not expired), before this one started.
    expect(processes.map((x) => x.id)).not.toContain(p.replaces);
    expect(Date.parse(p.chainStartedAt)).toBeLessThan(Date.parse(p.startedAt));
    expect(await row.locator('[data-replacements]').textContent()).toMatch(
      new RegExp(`^replaced ${p.replacements} times? since \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d$`),
    );
    expect(browser.pageErrors).toEqual([]);
  });

  it('on failure, a check writes a screenshot under its output folder and fails with its path', async () => {
    await page.goto(`${dev.url}/#/fleet`);
    const failing = withScreenshot(page, OUT, 'a deliberately failing check', async () => {
      await page.getByRole('heading', { name: 'No such heading' }).waitFor({ timeout: 200 });
    });
    await expect(failing).rejects.toThrow(/screenshot: .*a-deliberately-failing-check\.failed\.png/);
    const path = join(OUT, 'a-deliberately-failing-check.failed.png');
    expect(existsSync(path)).toBe(true);
    expect(readFileSync(path).subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
    rmSync(path);
  });
});

describe('leasehold batch redrive, against leasehold dev', () => {
  it('redrives a failed batch once per idempotency key and follows it to the end', async () => {
    const batch = await start('flaky', { n: 5, fail: ['item-0001'] });
    expect((await finishedBatch(dev.api, batch.id)).status).toBe('failed');
    const cli = (args: string[]) =>
      run(process.execPath, [BIN, 'batch', ...args], { cwd: project, env: { ...process.env, LEASEHOLD_API_URL: dev.url } });
    const first = await cli(['redrive', batch.id, '--idempotency-key', 'cli-once', '--follow']);
    expect(first.stdout).toContain(`batch ${batch.id} redriven (redrive 1): 1 failed item pending again`);
    expect(first.stdout).toContain(`batch ${batch.id} succeeded: 5 done, 0 failed`);
    const again = await cli(['redrive', batch.id, '--idempotency-key', 'cli-once']);
    expect(again.stdout).toMatch(
      new RegExp(`already redriven by this idempotency key: batch ${batch.id} redrive 1 \\(1 item\\) at .*; now succeeded`),
    );
    const refused = await cli(['redrive', batch.id]).catch((e: { code: number; stderr: string }) => e);
    expect(refused).toMatchObject({ code: 1, stderr: expect.stringContaining('has no failed item to redrive (HTTP 409)') });
    const shown = await cli(['show', batch.id]);
    // Every run the batch ever had, as the API counts them: one before the redrive and one after,
    // more when a run handed off on a loaded machine (a retry's backoff, a slice).
    const { runs } = await dev.api.getBatch(batch.id);
    expect(runs).toBeGreaterThanOrEqual(2);
    expect(shown.stdout).toMatch(
      new RegExp(
        `runs +none \\(finished\\); ${runs} in all \\(every run it ever had: joins, takeovers and time slices\\); redriven 1 time`,
      ),
    );
  }, 60_000);
});

describe('screenshots of the dashboard', withChromium, () => {
  browserTest(
    'renders every view for the README',
    async () => {
      const readme = process.env.LEASEHOLD_SCREENSHOTS;
      const dirs = [OUT, ...(readme ? [resolve(ROOT, readme)] : [])];
      for (const d of dirs) mkdirSync(d, { recursive: true });
      // A batch under way, one with failures, one done.
      const failed = await start('flaky', { n: 40, ms: 250, fail: ['item-0007', 'item-0021', 'item-0033'] }, 'globex', 'crm');
      await start('slow', { n: 30, ms: 20 }, 'acme', 'reports');
      const running = await start('slow', { n: 600, ms: 400 }, 'acme', 'images');
      await finishedBatch(dev.api, failed.id);
      // The README's pictures show the running batch a fifth of the way and every view settled
      // (its charts drawn, its fonts in); a test run checks that each view renders with no page
      // error, and waits for neither.
      await expect
        .poll(async () => (await dev.api.getBatch(running.id)).counts.done, { timeout: 30_000 })
        .toBeGreaterThan(readme ? 120 : 0);
      const shots: [string, string][] = [
        ['dashboard.png', '#/batches'],
        ['dashboard-batch.png', `#/batches/${failed.id}`],
        ['dashboard-fleet.png', '#/fleet'],
      ];
      for (const [file, hash] of shots) {
        await page.goto(`${dev.url}/${hash}`);
        await page.locator('main h2').first().waitFor();
        await page.waitForLoadState('networkidle');
        if (readme) await page.waitForTimeout(2_500);
        for (const d of dirs) await page.screenshot({ path: join(d, file) });
      }
      expect(existsSync(join(OUT, 'dashboard.png'))).toBe(true);
      await dev.api.cancelBatch(running.id);
      expect(browser.pageErrors).toEqual([]);
    },
    120_000,
  );
});
