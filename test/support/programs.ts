// Programs some tests need that a fresh machine lacks (Chromium, PgBouncer). Outside CI a test
// that needs a missing one is skipped, so `npm test` passes on a fresh clone; the global setup
// then prints one line naming what was skipped and what to install (test/support/global-setup.ts).
// With `CI=true` nothing is skipped: the test runs and fails, saying what is missing, since CI
// installs them (.ci/run).
import { existsSync } from 'node:fs';
import type { TestOptions } from 'vitest';

declare module 'vitest' {
  interface TaskMeta {
    /** Set on a test or suite skipped for programs the machine lacks: their Debian packages. */
    missingPrograms?: string[];
  }
}

/** A program a test runs, where it looks for it and the Debian package that installs it there. */
export interface Program {
  /** What to call it in a message. */
  name: string;
  /** The environment variable that names another binary. */
  env: string;
  /** The binary: `env`'s value, else where Debian's package installs it. */
  path: string;
  /** The Debian package (`apt-get install -y <package>`). */
  package: string;
}

/** Debian's Chromium, driven by playwright-core (test/support/browser.ts); `LEASEHOLD_CHROMIUM` names another. */
export const CHROMIUM: Program = {
  name: 'Chromium',
  env: 'LEASEHOLD_CHROMIUM',
  path: process.env.LEASEHOLD_CHROMIUM ?? '/usr/bin/chromium',
  package: 'chromium',
};

/** Debian's PgBouncer (test/support/pgbouncer.ts); `LEASEHOLD_TEST_PGBOUNCER` names another. */
export const PGBOUNCER: Program = {
  name: 'PgBouncer',
  env: 'LEASEHOLD_TEST_PGBOUNCER',
  path: process.env.LEASEHOLD_TEST_PGBOUNCER ?? '/usr/sbin/pgbouncer',
  package: 'pgbouncer',
};

/** Whether `program`'s binary is there. */
export const installed = (program: Program): boolean => existsSync(program.path);

/** Whether this run is CI's (`CI=true`), where a missing program fails its tests instead. */
export const inCi = (): boolean => process.env.CI === 'true';

/**
 * Options for a `describe` or `it` that needs `programs`: skipped, and marked with the packages
 * that install them, when one is missing outside CI; else none (the test runs, and with a program
 * missing fails saying so).
 */
export function needs(...programs: Program[]): TestOptions {
  const missing = programs.filter((p) => !installed(p));
  if (missing.length === 0 || inCi()) return {};
  return { skip: true, meta: { missingPrograms: missing.map((p) => p.package) } };
}

/** The command that installs `packages`. */
export const installCommand = (packages: Iterable<string>): string =>
  `apt-get install -y ${[...new Set(packages)].sort().join(' ')}`;
