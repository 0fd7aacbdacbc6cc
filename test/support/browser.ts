// A real browser for the dashboard's tests: Debian's Chromium (`apt-get install chromium`; .ci/run
// installs it), driven by playwright-core, never a browser download. Each launch gets a fresh
// profile folder, and Chromium's own network traffic (updates, sync, field trials) is off. A test
// that launches it declares so with `needs(CHROMIUM)` (test/support/programs.ts): skipped outside
// CI on a machine without it.
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium, type BrowserContext, type Page, type Request } from 'playwright-core';
import { CHROMIUM, installed } from './programs.js';

/** Where a test file's screenshots go: `test-results/<name>/` of the repository (git-ignored). */
export function outputDir(name: string): string {
  return resolve(import.meta.dirname, '..', '..', 'test-results', name);
}

/** The Chromium to drive: `LEASEHOLD_CHROMIUM`, else Debian's `/usr/bin/chromium`. */
export function chromiumPath(): string {
  if (!installed(CHROMIUM)) {
    throw new Error(
      `no Chromium at ${CHROMIUM.path}: install Debian's (apt-get install -y chromium) or set LEASEHOLD_CHROMIUM to a Chromium binary`,
    );
  }
  return CHROMIUM.path;
}

/** A launched browser with one page, and what went wrong in the page so far. */
export interface TestBrowser {
  context: BrowserContext;
  page: Page;
  /** Uncaught exceptions and console errors of the page, in order. */
  pageErrors: string[];
  /**
   * Resolves once no request of the page is in flight (at most `timeoutMs`, default 10,000 ms,
   * then throws): a test that clears `pageErrors` waits for this first, or an answer still on its
   * way (a poll of the view just left) lands in the next test's errors.
   */
  settled(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/** Launch headless Chromium with a fresh profile and open one page of `width` × `height`. */
export async function launchBrowser(viewport = { width: 1280, height: 800 }): Promise<TestBrowser> {
  const profile = await mkdtemp(join(tmpdir(), 'leasehold-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath(),
    headless: true,
    viewport,
    args: [
      // Root (CI) cannot use Chromium's sandbox.
      '--no-sandbox',
      '--headless',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      // No connections of Chromium's own: the machine's network refuses them.
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const pageErrors: string[] = [];
  page.on('pageerror', (e) => pageErrors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') pageErrors.push(`console: ${m.text()}`);
  });
  const inFlight = new Set<Request>();
  page.on('request', (r) => inFlight.add(r));
  page.on('requestfinished', (r) => inFlight.delete(r));
  page.on('requestfailed', (r) => inFlight.delete(r));
  return {
    context,
    page,
    pageErrors,
    settled: async (timeoutMs = 10_000) => {
      const until = Date.now() + timeoutMs;
      while (inFlight.size > 0) {
        if (Date.now() > until) throw new Error(`${inFlight.size} requests still in flight after ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 50));
      }
      // A response's console message comes to us after its request ends; let it arrive.
      await page.evaluate(() => new Promise((r) => setTimeout(r, 100)));
    },
    close: async () => {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/** A name fit for a file: letters, digits and `-`. */
export const fileName = (name: string) =>
  name
    .replace(/[^A-Za-z0-9]+/g, '-')
    .replace(/^-|-$/g, '')
    .slice(0, 100);

/**
 * Run `check` against `page`; when it throws, first write a screenshot of the page to
 * `<dir>/<name>.failed.png` (and say so in the error), then rethrow.
 */
export async function withScreenshot<T>(page: Page, dir: string, name: string, check: () => Promise<T>): Promise<T> {
  try {
    return await check();
  } catch (e) {
    const path = join(dir, `${fileName(name)}.failed.png`);
    try {
      await mkdir(dir, { recursive: true });
      await page.screenshot({ path, fullPage: true });
      if (e instanceof Error) e.message += `\n(screenshot: ${path})`;
    } catch (shotError) {
      if (e instanceof Error) e.message += `\n(no screenshot: ${(shotError as Error).message})`;
    }
    throw e;
  }
}
