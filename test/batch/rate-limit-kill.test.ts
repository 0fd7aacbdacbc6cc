// A fleet-wide rate limit under real process faults (issue 22, "Tests"; docs/design.md, "Rate
// limits"): one batch limited to 20/s, worked by 8 runs in 4 child processes
// (fixtures/rate-runner.ts, up to 2 runs each); mid-batch two of them are killed with SIGKILL
// (their runs, queued items and held tokens gone at once) and two new ones join, taking the dead
// runs over once they are stale. Every start of an item's work is timed by the process that made
// it; the checks are the limit's bound in every one-second window across all of them, that every
// item ran, and the bucket afterwards.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { createBatch, getBatch } from '../../src/batch/index.js';
import { type TestDatabase } from '../support/db.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { mostInWindow } from '../support/random.js';
import { waitFor } from '../support/waits.js';
import { newBatch } from './helpers.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/rate-runner.ts', import.meta.url));
const RATE = 20;
const ITEMS = 200;

interface Start {
  key: string;
  attempt: number;
  at: number;
}

class RateProcess {
  readonly child: ChildProcess;
  readonly starts: Start[] = [];
  ready = false;
  private partial = '';

  constructor(db: TestDatabase) {
    this.child = spawn(process.execPath, ['--import', 'tsx', FIXTURE, db.url, db.schema, String(RATE), '100', '1000'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    live.add(this);
    this.child.stdout!.setEncoding('utf8');
    this.child.stdout!.on('data', (d: string) => {
      const parts = (this.partial + d).split('\n');
      this.partial = parts.pop()!;
      for (const p of parts) {
        const line = JSON.parse(p) as { type: string } & Start;
        if (line.type === 'ready') this.ready = true;
        else if (line.type === 'start') this.starts.push({ key: line.key, attempt: line.attempt, at: line.at });
      }
    });
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
  }
}
const live = new Set<RateProcess>();

const db = useTestDatabase();
afterAll(async () => {
  for (const p of live) p.kill();
});

describe('a fleet-wide rate limit under SIGKILL', () => {
  it('holds 20/s in every 1 s window over 8 runs on 4 processes while two are killed and their runs taken over; every item runs', async () => {
    const job = `killed-${Math.random().toString(36).slice(2, 8)}`;
    const { batch } = await createBatch(db.sql, newBatch(ITEMS, { job, maxConcurrency: 8 }), { maxOpen: 10 });
    const first = Array.from({ length: 4 }, () => new RateProcess(db));
    await waitFor('the processes to be ready', () => first.every((p) => p.ready), { timeoutMs: 60_000 });
    const all = () => [...live].flatMap((p) => p.starts);
    await waitFor('a third of the items to start', () => all().length >= ITEMS / 3, { timeoutMs: 60_000 });
    first[0]!.kill();
    first[1]!.kill();
    const later = Array.from({ length: 2 }, () => new RateProcess(db));
    try {
      await waitFor('the batch to finish', async () => (await getBatch(db.sql, batch.id)).status !== 'open', {
        timeoutMs: 90_000,
      });
    } finally {
      for (const p of [...first, ...later]) p.kill('SIGTERM');
    }
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded' });
    const starts = all();
    const at = starts.map((s) => s.at).sort((a, b) => a - b);
    // No token invented: at most perSecond + burst (1 at 20/s) + what tokens taken in the 50 ms
    // before a window may start in it (20 × 0.05 = 1), however the runs came and went.
    expect(mostInWindow(at, 1_000)).toBeLessThanOrEqual(RATE + 2);
    // Every item ran; one a killed process had started may have run again (its attempt counted).
    expect(new Set(starts.map((s) => s.key)).size).toBe(ITEMS);
    expect(starts.length).toBeLessThanOrEqual(ITEMS + 2 * 2 * 4);
    // The bucket holds no more than its burst after it all.
    const [bucket] = await db.sql<
      { tokens: number }[]
    >`select tokens from leasehold_rate_buckets where job = ${job} and key = ''`;
    expect(bucket!.tokens).toBeLessThanOrEqual(1);
  }, 150_000);
});
