// A real browser for the dashboard's tests: Debian's Chromium (`apt-get install chromium`; .ci/run
// installs it), driven by playwright-core, never a browser download. Each launch gets a fresh
// profile folder, and Chromium's own network traffic (updates, sync, field trials) is off.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

/** Where a test file's screenshots go: `test-results/<name>/` of the repository (git-ignored). */
export function outputDir(name: string): string {
  return resolve(import.meta.dirname, '..', '..', 'test-results', name);
}

/** The Chromium to drive: `LEASEHOLD_CHROMIUM`, else Debian's `/usr/bin/chromium`. */
export function chromiumPath(): string {
  const path = process.env.LEASEHOLD_CHROMIUM ?? '/usr/bin/chromium';
  if (!existsSync(path)) {
    throw new Error(
      `no Chromium at ${path}: install Debian's (apt-get install -y chromium) or set LEASEHOLD_CHROMIUM to a Chromium binary`,
    );
  }
  return path;
}

/** A launched browser with one page, and what went wrong in the page so far. */
export interface TestBrowser {
  context: BrowserContext;
  page: Page;
  /** Uncaught exceptions and console errors of the page, in order. */
  pageErrors: string[];
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
  return {
    context,
    page,
    pageErrors,
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
