import { defineConfig } from 'vitest/config';

/**
 * The files `LEASEHOLD_TEST_POOLER=1 npm test` runs through PgBouncer in transaction mode (see
 * test/support/global-setup.ts; `LEASEHOLD_TEST_POOLER=all` takes every file, or the ones named): the pooler's own evidence, and a part of the batch, lease and
 * runtime suites that covers starts, claims, moves, takeovers, stops, redrives, heartbeats,
 * sweeps, quarantine, the scheduler, a worker's handoff and a stuck session, small enough for CI
 * (docs/development.md, "Tests through a pooler").
 */
export const POOLER_SUITE = [
  'test/store/pooler.test.ts',
  'test/batch/fencing.test.ts',
  'test/batch/takeover.test.ts',
  'test/batch/retries.test.ts',
  'test/batch/faults.test.ts',
  'test/batch/redrive.test.ts',
  'test/lease/edge.test.ts',
  'test/lease/quarantine.test.ts',
  'test/lease/release-race.test.ts',
  'test/runtime/handoff.test.ts',
  'test/runtime/stuck-transaction.test.ts',
  'test/runtime/worker-signal.test.ts',
];

/**
 * The files `npm run test:quick` runs (`LEASEHOLD_TEST_QUICK=1`), for the edit-test loop: a fast
 * file or two of each area (batch starts, moves, fencing, takeover, retries, stops and finishes;
 * the lease's shares and edges; the units runner; the API, the CLI's output, the docs' settings
 * table, a built-in job, a worker's handoff), under a minute on two cores. `npm test` runs them all
 * (docs/development.md, "Tests").
 */
export const QUICK_SUITE = [
  'test/clock.test.ts',
  'test/batch/pipeline.test.ts',
  'test/batch/fencing.test.ts',
  'test/batch/takeover.test.ts',
  'test/batch/retries.test.ts',
  'test/batch/stop.test.ts',
  'test/batch/finish.test.ts',
  'test/lease/edge.test.ts',
  'test/runtime/heartbeat.test.ts',
  'test/runtime/handoff.test.ts',
  'test/units/runner.test.ts',
  'test/api/batches.test.ts',
  'test/api/errors.test.ts',
  'test/cli/table.test.ts',
  'test/store/schema.test.ts',
  'test/docs/configuration.test.ts',
  'test/jobs/checksum.test.ts',
];

/**
 * Files that run each in a fresh process (vitest's `isolate`, the default): they change what
 * outlives a file — environment variables, globals, `process` listeners, module mocks — or
 * check how modules load (lazy imports, bundles, packed installs). Every other file shares its
 * worker process, and so its loaded modules, with the files before it: loading `src` and the AWS
 * SDK again for each of 164 files cost about 150 s of a pass's CPU.
 */
export const ISOLATED = [
  // Environment variables, globals, process listeners, module mocks.
  'test/api/units.test.ts',
  'test/batch/source-s3.test.ts',
  'test/batch/sources.test.ts',
  'test/batch/store-faults.test.ts',
  'test/dashboard/signing.test.ts',
  'test/functions/bundle.test.ts',
  'test/functions/handlers.test.ts',
  'test/infra/sst-config.test.ts',
  'test/jobs/lambda-invoke.test.ts',
  'test/jobs/lambda-invoke-traces.test.ts',
  'test/local/invoke-endpoint.test.ts',
  'test/local/traces.test.ts',
  'test/package/boundaries.test.ts',
  'test/package/packed-install.test.ts',
  'test/runtime/event-size.test.ts',
  'test/runtime/events.test.ts',
  'test/runtime/iam-limit.test.ts',
  'test/runtime/late-events.test.ts',
  'test/runtime/rds-ca-lazy.test.ts',
  'test/runtime/stream.test.ts',
  'test/runtime/throttled-worker.test.ts',
  'test/runtime/webhook-traces.test.ts',
  'test/store/connection-death.test.ts',
  'test/store/transactions-under-load.test.ts',
  'test/units/endpoint-guard.test.ts',
];

/**
 * Files that never reach a database: each passes with `DATABASE_URL` naming a server that does
 * not answer (checked with `DATABASE_URL=postgres://postgres@127.0.0.1:1/none npx vitest run
 * <these files>`; docs/development.md, "Tests"). `LEASEHOLD_TEST_DATABASE_ONLY=1` leaves them
 * out: CI's second pass, on the machine's PostgreSQL, runs only what another server could change.
 */
export const DATABASE_FREE = [
  'test/api/errors.test.ts',
  'test/batch/key-order.test.ts',
  'test/batch/source-csv-plain.test.ts',
  'test/cli/s3-put.test.ts',
  'test/cli/table.test.ts',
  'test/cli/terminal.test.ts',
  'test/cli/usage.test.ts',
  'test/clock.test.ts',
  'test/dashboard/counts.test.ts',
  'test/dashboard/pools.test.ts',
  'test/dashboard/wait.test.ts',
  'test/docs/api.test.ts',
  'test/docs/configuration.test.ts',
  'test/infra/sst-config.test.ts',
  'test/jobs/schemas.test.ts',
  'test/lease/config.test.ts',
  'test/local/embedded.test.ts',
  'test/local/http-server.test.ts',
  'test/local/invoke-endpoint.test.ts',
  'test/local/s3.test.ts',
  'test/local/sink.test.ts',
  'test/local/traces.test.ts',
  'test/package/boundaries.test.ts',
  'test/package/exports.test.ts',
  'test/runtime/config-batch.test.ts',
  'test/runtime/config-db.test.ts',
  'test/runtime/db-signer.test.ts',
  'test/runtime/maintenance.test.ts',
  'test/runtime/rds-ca-lazy.test.ts',
  'test/runtime/rds-ca.test.ts',
  'test/store/failover.test.ts',
  'test/units/endpoint-guard.test.ts',
];

/** The files of this run: the pooler's suite, the quick one, or every test. */
function include(): string[] {
  if (process.env.LEASEHOLD_TEST_POOLER === '1') return POOLER_SUITE;
  if (process.env.LEASEHOLD_TEST_QUICK === '1') return QUICK_SUITE;
  return ['test/**/*.test.ts'];
}

/** Files left out of this run: the database-free ones with `LEASEHOLD_TEST_DATABASE_ONLY=1`. */
function excluded(): string[] {
  return process.env.LEASEHOLD_TEST_DATABASE_ONLY === '1' ? DATABASE_FREE : [];
}

/** The shared project's files and the isolated one's (a project with no files is left out). */
function projects() {
  const out = excluded();
  const files = include().filter((f) => !out.includes(f));
  const all = files.some((f) => f.includes('*'));
  const isolated = (all ? ISOLATED : files.filter((f) => ISOLATED.includes(f))).filter((f) => !out.includes(f));
  const shared = all ? files : files.filter((f) => !ISOLATED.includes(f));
  return [
    ...(shared.length
      ? [{ extends: true, test: { name: 'shared', include: shared, exclude: [...ISOLATED, ...out], isolate: false } }]
      : []),
    ...(isolated.length ? [{ extends: true, test: { name: 'isolated', include: isolated } }] : []),
  ];
}

// Tests run against a real PostgreSQL (see test/support/global-setup.ts and test/support/db.ts).
export default defineConfig({
  test: {
    // The SDK's notice that its 2027 releases need Node 22 (deploys run nodejs22.x).
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
    globalSetup: ['test/support/global-setup.ts'],
    // Concurrency tests wait for beats to turn stale; the embedded server takes seconds to init.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
    pool: 'forks',
    // Two cores: most test time is spent waiting on the database and timers (a pass used about
    // 1.2 cores with 3 files at once), so a few files at once still pay off without starving
    // the server: 4 at once took the embedded pass from 370 s to 327 s. With 164 files, 6 at once
    // took an idle PostgreSQL 15 pass from 324 s to 300 s, but in CI the embedded pass then took
    // 359-455 s and timing-bound tests failed in 3 of 4 runs (load average about 9-10): 4.
    maxWorkers: 4,
    projects: projects(),
  },
});
