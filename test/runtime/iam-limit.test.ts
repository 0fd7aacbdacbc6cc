// IAM login limits (issue 18, item 5): RDS refuses IAM logins beyond its rate with `28000` "too
// many competing requests". A proxy stands in for RDS's IAM front: it asks every new connection
// for its token and refuses the first N logins that way before the real server sees them; a login
// it lets through it completes with the server's real password (test/support/pgproxy.ts), so the
// cases run on any test server, the embedded one (which asks for a password) included.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { handleApi } from '../../src/api/index.js';
import { defaultRegistry } from '../../src/jobs/index.js';
import { NO_WORKER_LIMIT } from '../../src/lease/index.js';
import { isConnectionRefused, retryRefusedConnection } from '../../src/runtime/index.js';
import { WorkerDispatcher } from '../../src/runtime/dispatch.js';
import { connect, type Sql } from '../../src/store/index.js';
import { silentLog } from '../../src/log.js';
import { apiEvent } from '../support/api.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { PgProxy } from '../support/pgproxy.js';

const db = useTestDatabase();
let proxy: PgProxy;
beforeAll(async () => {
  proxy = await PgProxy.start(db.url);
});
afterAll(async () => {
  await proxy.close();
});

/** A pool through the proxy whose password is a fresh "token" per call, as the RDS signer's is. */
function signedPool(max: number): { sql: Sql; signed: () => number } {
  const u = new URL(proxy.url);
  let n = 0;
  const sql = connect(
    {
      host: u.hostname,
      port: Number(u.port),
      database: u.pathname.slice(1) || 'postgres',
      user: decodeURIComponent(u.username) || 'postgres',
      password: () => `token-${++n}`,
    },
    { max, schema: db.schema, applicationName: 'leasehold-test-iam' },
  );
  return { sql, signed: () => n };
}

describe('an IAM login refused for its rate', () => {
  it('is a refused connection, retried with jittered backoff until a login succeeds; the pool signs one token per connection and keeps it across warm invocations', async () => {
    const iam = proxy.iamLogins(3);
    const { sql, signed } = signedPool(2);
    try {
      const waits: number[] = [];
      const errors: unknown[] = [];
      const [{ n }] = await retryRefusedConnection(() => sql<{ n: number }[]>`select 1 as n`, {
        untilMs: Date.now() + 20_000,
        onRetry: (e, waitMs) => {
          errors.push(e);
          waits.push(waitMs);
        },
      });
      expect(n).toBe(1);
      // The front's own counters: three refused, one let through, each with a token of its own.
      expect(iam.refused).toBe(3);
      expect(iam.accepted).toBe(1);
      expect(iam.passwords).toEqual(['token-1', 'token-2', 'token-3', 'token-4']);
      expect(errors).toHaveLength(3);
      for (const e of errors) {
        expect(e).toMatchObject({ code: '28000' });
        expect(isConnectionRefused(e)).toBe(true);
      }
      // Full jitter within the doubling caps (100, 200, 400 ms).
      waits.forEach((w, i) => expect(w).toBeLessThanOrEqual(100 * 2 ** i));
      // Warm invocations: many statements, two at a time, on the pool's two connections.
      for (let i = 0; i < 10; i++) await Promise.all([sql`select 1`, sql`select 2`]);
      expect(signed()).toBe(5);
      expect(iam.accepted).toBe(2);
    } finally {
      await sql.end();
    }
  });

  it('gives up when the refusals outlast the retry window, and the API answers 503 with Retry-After', async () => {
    const iam = proxy.iamLogins(1_000);
    const { sql } = signedPool(1);
    try {
      const started = Date.now();
      const error = await retryRefusedConnection(() => sql`select 1`, { untilMs: Date.now() + 500 }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toMatchObject({ code: '28000' });
      expect(Date.now() - started).toBeLessThan(2_000);
      expect(iam.refused).toBeGreaterThan(1);

      const answer = await handleApi(apiEvent('GET', '/batches'), {
        sql,
        jobs: defaultRegistry(),
        config: { maxOpen: 4, maxBodyBytes: 65_536 },
        workers: new WorkerDispatcher(
          sql,
          { invoke: async () => {} },
          { maxWorkers: NO_WORKER_LIMIT, invocationPendingMs: 30_000 },
        ),
        log: silentLog,
      });
      expect(answer.statusCode).toBe(503);
      expect(answer.headers).toMatchObject({ 'retry-after': '1' });
      expect(JSON.parse(String(answer.body))).toMatchObject({ error: { code: 'database_unavailable' } });
    } finally {
      await sql.end({ timeout: 1 });
    }
  });
});

/** A Lambda context as the invocation middleware leaves it, with 60 s left. */
async function lambdaContext(service: string, log: import('../../src/log.js').Log) {
  const { metricsFor } = await import('../../src/runtime/metrics.js');
  return {
    getRemainingTimeInMillis: () => 60_000,
    leasehold: {
      service,
      log,
      metrics: metricsFor(`${service}-test`),
      deadline: new AbortController().signal,
      deadlineAt: Date.now() + 60_000,
    },
  } as unknown as import('aws-lambda').Context;
}

describe('every function with IAM logins refused for their rate', () => {
  for (const fn of ['scheduler', 'api', 'trigger'] as const) {
    it(`the ${fn} retries within its run with full jitter and does its work (3 rounds)`, async () => {
      const handlers = await import('../../src/runtime/handlers.js');
      const { loadConfig } = await import('../../src/runtime/index.js');
      const { memoryLog } = await import('../support/log.js');
      for (let round = 0; round < 3; round++) {
        const { sql } = signedPool(2);
        const { log, entries } = memoryLog();
        const iam = proxy.iamLogins(3);
        try {
          const deps = {
            config: loadConfig({ DATABASE_URL: db.url }),
            sql,
            jobs: defaultRegistry(),
            dispatcher: { invoke: async () => {} },
            sendEvents: async () => ({ sent: 0, failed: 0 }),
          } as unknown as import('../../src/runtime/deps.js').RuntimeDeps;
          const context = await lambdaContext(fn, log);
          const run = () => {
            if (fn === 'scheduler') return handlers.schedulerInvocation(deps, {}, context);
            if (fn === 'api') return handlers.apiInvocation(deps, apiEvent('GET', '/batches'), context);
            // An event of no rule: dropped with a log line once the schema was checked.
            return handlers.triggerInvocation(deps, { source: 'test', 'detail-type': 'nothing', detail: {} }, context);
          };
          const result = await run().then(
            (r) => r,
            (e: unknown) => e,
          );
          const retries = entries.filter((e) => /refused; retrying/.test(e.message));
          console.log(
            `[iam] ${fn} round ${round}: refused ${iam.refused}, retries logged ${retries.length}, ${result instanceof Error ? `failed: ${result.message}` : `answered ${JSON.stringify(result).slice(0, 80)}`}`,
          );
          // The front's own counters: three logins refused, then let through.
          expect(iam.refused).toBe(3);
          expect(iam.accepted).toBeGreaterThan(0);
          expect(result).not.toBeInstanceOf(Error);
          if (fn === 'api') expect(result).toMatchObject({ statusCode: 200 });
          expect(retries).toHaveLength(3);
          retries.forEach((r, i) => expect((r.fields as { waitMs: number }).waitMs).toBeLessThanOrEqual(100 * 2 ** i));
        } finally {
          proxy.iamLogins(0);
          await sql.end({ timeout: 1 });
        }
      }
    }, 60_000);
  }
});
