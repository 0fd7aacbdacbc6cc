import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/db-hooks.js';
import { deferred } from '../support/waits.js';

const BIN = resolve(import.meta.dirname, '../../bin/leasehold.js');
const run = promisify(execFile);

const db = useTestDatabase();
let project: string;
let files: string;
/** Enough files that a Ctrl-C sent once the first items were claimed lands before the end. */
let manyFiles: string;
const MANY = 10_000;
beforeAll(async () => {
  project = mkdtempSync(join(tmpdir(), 'leasehold-dev-'));
  files = join(project, 'files');
  for (let d = 0; d < 20; d++) {
    mkdirSync(join(files, `d${d}`), { recursive: true });
    for (let f = 0; f < 100; f++) writeFileSync(join(files, `d${d}`, `f${f}.txt`), `file ${d}/${f}\n`.repeat(50));
  }
  manyFiles = join(project, 'many');
  for (let d = 0; d < MANY / 500; d++) {
    mkdirSync(join(manyFiles, `d${d}`), { recursive: true });
    for (let f = 0; f < 500; f++) writeFileSync(join(manyFiles, `d${d}`, `f${f}.txt`), `file ${d}/${f}\n`);
  }
});
afterAll(async () => {
  rmSync(project, { recursive: true, force: true });
});

const children = new Set<ReturnType<typeof spawn>>();
afterAll(() => {
  for (const c of children) c.kill('SIGKILL');
});

/** Run the CLI in `project` against the test schema; resolves with its exit and output. */
/** Items the Ctrl-C test held locked until its stack exited (0: none could be). */
let heldItems = 0;

function leasehold(args: string[], opts: { interruptMidBatch?: boolean } = {}) {
  const child = spawn(process.execPath, [BIN, ...args, '--port', '0'], {
    cwd: project,
    env: { ...process.env, DATABASE_URL: db.schemaUrl, LEASEHOLD_LOCAL_SCHEDULE_MS: '300' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => {
    stderr += d;
    const demo = /demo: checksum batch ([0-9a-f-]{36})/.exec(stderr);
    if (opts.interruptMidBatch && demo) {
      opts.interruptMidBatch = false;
      // Ctrl-C as soon as a run has claimed items: a fixed delay raced the batch's end on fast runs,
      // and so did this alone once the machine checksummed 10,000 files in the time a Ctrl-C
      // takes. The test first holds a few pending items locked (claims skip locked rows), so the
      // batch cannot end before the Ctrl-C does, whatever the speed; they are let go once the
      // stack has exited.
      void (async () => {
        const hold = deferred();
        const held = deferred<number>();
        const holding = db.sql.begin(async (t) => {
          const rows = await t`select key from leasehold_items where batch_id = ${demo[1]} and state = 'pending'
            order by key desc limit 20 for update skip locked`;
          held.resolve(rows.length);
          await hold.promise;
        });
        holding.catch(held.reject);
        heldItems = await held.promise;
        child.once('exit', () => hold.resolve());
        while (child.exitCode === null) {
          const [r] =
            await db.sql`select exists (select 1 from leasehold_items where batch_id = ${demo[1]} and state <> 'pending') as started`;
          if (r.started) break;
          await new Promise((wake) => setTimeout(wake, 10));
        }
        child.kill('SIGINT');
      })();
    }
  });
  children.add(child);
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((done) =>
    child.on('exit', (code) => {
      children.delete(child);
      done({ code, stdout, stderr });
    }),
  );
}

describe('leasehold dev', () => {
  it('--exit-when-idle with no open batch waits for the scheduler pass under way, and stops clean', async () => {
    // The pass started at launch used to be cut off by the pool's end: `scheduler failed: Error:
    // write CONNECTION_ENDED`, every time, though the exit was 0.
    const r = await leasehold(['dev', '--exit-when-idle'], {});
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/scheduler failed|CONNECTION_ENDED|while stopping/);
    expect(r.stderr).toMatch(/nothing left owned/);
    expect(JSON.parse(r.stdout.trim().split('\n').at(-1)!)).toEqual({ batchId: null, done: 0, failed: 0, seconds: 0 });
  }, 60_000);

  it('--demo DIR --exit-when-idle checksums every file, exits 0 and prints the JSON summary last', async () => {
    const r = await leasehold(['dev', '--demo', files, '--exit-when-idle'], {});
    expect(r.code, r.stderr).toBe(0);
    const last = r.stdout.trim().split('\n').at(-1)!;
    const summary = JSON.parse(last);
    expect(summary).toEqual({ batchId: expect.any(String), done: 2000, failed: 0, seconds: expect.any(Number) });
    expect(r.stderr).toMatch(/api +http:\/\/127\.0\.0\.1:\d+/);
    expect(r.stderr).toMatch(/nothing left owned/);
    // Not a terminal (a pipe): the follow writes a line only when what it says changed, the last
    // one at the end, and never an estimate it cannot make yet ("NFs left").
    const follow = r.stderr.split('\n').filter((l) => /^checksum [0-9a-f-]{36}: /.test(l));
    expect(follow.length).toBeGreaterThan(0);
    expect(follow.filter((l, i) => i > 0 && l === follow[i - 1])).toEqual([]);
    expect(follow.at(-1)).toMatch(/: 2000\/2000 items \(failed 0, runs \d+\) succeeded$/);
    expect(r.stderr).not.toMatch(/NaN|NFs|Infinity/);
    const [b] = await db.sql`select status, live_runs,
        (select count(*) from leasehold_runs where batch_id = ${summary.batchId})::int as run_rows
      from leasehold_batches where id = ${summary.batchId}`;
    expect(b).toEqual({ status: 'succeeded', live_runs: 0, run_rows: 0 });
  }, 60_000);

  it('Ctrl-C mid-batch hands off, leaves nothing owned, and the next start finishes the batch', async () => {
    const first = await leasehold(['dev', '--demo', manyFiles, '--concurrency', '2'], { interruptMidBatch: true });
    expect(first.code, first.stderr).toBe(0);
    expect(heldItems).toBeGreaterThan(0);
    expect(first.stderr).toMatch(/nothing left owned/);
    const id = /demo: checksum batch ([0-9a-f-]{36})/.exec(first.stderr)![1];
    const [mid] =
      await db.sql`select status, live_runs, (select count(*) from leasehold_items where batch_id = ${id} and state = 'running') as running,
        (select count(*) from leasehold_runs where batch_id = ${id})::int as run_rows
      from leasehold_batches where id = ${id}`;
    expect(mid.live_runs).toBe(0);
    expect(mid.run_rows).toBe(0);
    expect(mid.running).toBe(0);
    expect(mid.status).toBe('open');

    const second = await leasehold(['dev', '--exit-when-idle'], {});
    expect(second.code, second.stderr).toBe(0);
    // The sink keeps its port across starts in one folder (.leasehold/sink.json), so endpoints
    // registered against it still reach it.
    const sinkOf = (stderr: string) => /sink +(http:\/\/127\.0\.0\.1:\d+)/.exec(stderr)?.[1];
    expect(sinkOf(first.stderr)).toBeDefined();
    expect(sinkOf(second.stderr)).toBe(sinkOf(first.stderr));
    const [end] = await db.sql`select status from leasehold_batches where id = ${id}`;
    expect(end.status).toBe('succeeded');
    const [counts] = await db.sql`select count(*) filter (where state = 'done') as done, count(*) as total
      from leasehold_items where batch_id = ${id}`;
    expect(counts).toEqual({ done: MANY, total: MANY });
  }, 90_000);
});

describe('leasehold batch', () => {
  it('start --follow, show --json, results and list talk to the running stack', async () => {
    const dev = spawn(process.execPath, [BIN, 'dev', '--port', '0'], {
      cwd: project,
      env: { ...process.env, DATABASE_URL: db.schemaUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.add(dev);
    let devErr = '';
    await new Promise<void>((ready, fail) => {
      dev.stderr.on('data', (d) => {
        devErr += d;
        if (/Ctrl-C stops/.test(devErr)) ready();
      });
      dev.on('exit', () => fail(new Error(devErr)));
    });
    // The banner names the app's batch jobs and its unit jobs (what `units put --job` takes).
    expect(devErr).toMatch(/^ +app +the built-in runner; jobs: .*checksum.*; unit jobs: outbox-delivery$/m);
    const run = (args: string[], cwd = project) =>
      new Promise<{ code: number | null; stdout: string; stderr: string }>((done) => {
        // No --api: the CLI finds the running stack through .leasehold/dev.json.
        const c = spawn(process.execPath, [BIN, ...args], {
          cwd,
          env: { ...process.env, LEASEHOLD_API_URL: '' },
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let stdout = '';
        let stderr = '';
        c.stdout.on('data', (d) => (stdout += d));
        c.stderr.on('data', (d) => (stderr += d));
        c.on('exit', (code) => done({ code, stdout, stderr }));
      });
    try {
      const started = await run([
        'batch',
        'start',
        'checksum',
        '--param',
        'dir=files/d3',
        '--request-key',
        'cli-1',
        '--follow',
        '--json',
      ]);
      expect(started.code, started.stderr).toBe(0);
      const batch = JSON.parse(started.stdout.split('\n')[0]);
      expect(batch).toMatchObject({ job: 'checksum', total: 100, created: true });

      // Each command is a process of its own: those that do not read what another one did run
      // side by side, in two rounds.
      const [again, shown, results, listed, scoped, unfollowedStart, badTolerance, bad] = await Promise.all([
        run(['batch', 'start', 'checksum', '--param', 'dir=files/d3', '--request-key', 'cli-1']),
        // From a subfolder of the project: the CLI finds the stack's dev.json in a folder above.
        run(['batch', 'show', batch.id, '--json'], join(project, 'files', 'd3')),
        run(['batch', 'results', batch.id]),
        run(['batch', 'list', '--json']),
        // A tolerance, and a tenant's own routes: another tenant's batch is not found there.
        run([
          'batch',
          'start',
          'checksum',
          '--param',
          'dir=files/d3',
          '--tenant',
          'acme',
          '--tolerate',
          '5%',
          '--follow',
          '--json',
        ]),
        // A batch this command did not start (no --follow at its start) is followed to its end by show.
        run(['batch', 'start', 'checksum', '--param', 'dir=files/d4', '--json']),
        run(['batch', 'start', 'checksum', '--tolerate', '120%']),
        run(['batch', 'start', 'nope']),
      ]);
      expect(again.stdout).toMatch(new RegExp(`already started by this request key: batch ${batch.id}`));

      expect(JSON.parse(shown.stdout)).toMatchObject({ id: batch.id, status: 'succeeded', counts: { done: 100, failed: 0 } });

      const lines = results.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      expect(lines).toHaveLength(100);
      expect(Object.keys(lines[0])).toEqual(['key', 'state', 'attempts', 'output', 'error']);
      expect(lines.every((l) => l.state === 'done' && l.attempts === 1 && /^[0-9a-f]{64}$/.test(l.output.sha256))).toBe(true);

      expect(JSON.parse(listed.stdout).map((b: { id: string }) => b.id)).toContain(batch.id);

      expect(scoped.code, scoped.stderr).toBe(0);
      const acme = JSON.parse(scoped.stdout.split('\n')[0]);
      expect(acme).toMatchObject({ tenant: 'acme', toleratedFailures: { percent: 5 }, allowedFailures: 5 });
      expect(scoped.stdout).toMatch(new RegExp(`batch ${acme.id} succeeded: 100 done, 0 failed`));
      const unfollowed = JSON.parse(unfollowedStart.stdout);

      expect(badTolerance.code).toBe(1);
      expect(badTolerance.stderr).toMatch(/--tolerate takes N/);
      expect(bad.code).toBe(1);
      expect(bad.stderr).toMatch(/unknown job "nope".*HTTP 404/);

      const [acmeShown, plainShown, followed, elsewhere, acmeList, listedText] = await Promise.all([
        run(['batch', 'show', acme.id, '--tenant', 'acme']),
        run(['batch', 'show', batch.id]),
        run(['batch', 'show', unfollowed.id, '--follow']),
        run(['batch', 'show', acme.id, '--tenant', 'globex']),
        run(['batch', 'list', '--tenant', 'acme', '--json']),
        run(['batch', 'list']),
      ]);
      expect(acmeShown.stdout).toMatch(/tolerates 5% of the items \(5 of 100\)/);
      expect(plainShown.stdout).toMatch(/tolerates no failed item/);
      expect(plainShown.stdout).toMatch(/running \(claimed by its runs: being worked or queued ahead in a run\)/);
      expect(plainShown.stdout).toMatch(/\d+ in all \(every run it ever had: joins, takeovers and time slices\)/);
      expect(followed.code, followed.stderr).toBe(0);
      expect(followed.stdout).toMatch(new RegExp(`^batch +${unfollowed.id}\n`));
      expect(followed.stdout).toMatch(new RegExp(`batch ${unfollowed.id} succeeded: 100 done, 0 failed`));
      expect(elsewhere.code).toBe(1);
      expect(elsewhere.stderr).toMatch(new RegExp(`no batch ${acme.id} \\(HTTP 404\\)`));
      expect(JSON.parse(acmeList.stdout).map((b: { id: string }) => b.id)).toEqual([acme.id]);
      // As text: a heading over columns as wide as their widest cell, so each cell sits under it
      // (the file's other tests left batches of their own in the list).
      const table = listedText.stdout.trimEnd().split('\n');
      expect(table[0]).toMatch(/^id +status +job +prio +finished\/total +tenant\/datasource +created$/);
      expect(table.slice(1).map((l) => l.slice(0, 36))).toEqual(expect.arrayContaining([acme.id, batch.id]));
      const startsAt = (title: string) => table[0].indexOf(title);
      const endsAt = (title: string) => table[0].indexOf(title) + title.length - 1;
      for (const row of table.slice(1)) {
        // A left-aligned cell starts under its heading, a right-aligned one ends under it.
        for (const title of ['status', 'job', 'tenant/datasource', 'created']) {
          expect(row[startsAt(title) - 1] + row[startsAt(title)], `${title} in ${row}`).toMatch(/^ \S$/);
        }
        for (const title of ['prio', 'finished/total']) {
          expect(row[endsAt(title)] + row[endsAt(title) + 1], `${title} in ${row}`).toMatch(/^\S $/);
        }
        expect(row.slice(startsAt('created'))).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z$/);
      }
    } finally {
      dev.kill('SIGINT');
      await new Promise((r) => dev.on('exit', r));
    }
  }, 60_000);
});

describe('leasehold dev --units-demo', () => {
  it('runs the desired count of local processes, each owning units, and delivers the outbox to the sink', async () => {
    const dev = spawn(process.execPath, [BIN, 'dev', '--port', '0', '--units-demo', '--timeout-ms', '20000'], {
      cwd: project,
      env: { ...process.env, DATABASE_URL: db.schemaUrl, LEASEHOLD_LOCAL_SCHEDULE_MS: '500', LEASEHOLD_REBALANCE_MS: '500' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.add(dev);
    let err = '';
    try {
      const seen = await new Promise<string>((done, fail) => {
        const timer = setTimeout(() => fail(new Error(`no full fleet seen:\n${err}`)), 40_000);
        dev.stderr.on('data', (d) => {
          err += d;
          // Three live processes of 3 desired, all eight units owned, the spread within the fair
          // share of 3, deliveries flowing.
          for (const line of err.split('\n')) {
            const m =
              /units: 3 live processes \(desired 3\) \[(.*)\] \| spread: min (\d+), max (\d+), fair share 3 \| deliveries [\d.]+\/s \((\d+) in all\)/.exec(
                line,
              );
            if (!m) continue;
            const owned = m[1].split(' ').map((p) => Number(p.split(':')[1]));
            const [min, max] = [Number(m[2]), Number(m[3])];
            if (
              owned.reduce((a, b) => a + b, 0) === 8 &&
              owned.every((n) => n >= 2) &&
              min >= 2 &&
              max <= 3 &&
              Number(m[4]) > 0
            ) {
              clearTimeout(timer);
              done(line);
            }
          }
        });
        dev.on('exit', () => fail(new Error(err)));
      });
      expect(seen).toMatch(/3 live processes/);
      const [delivered] =
        await db.sql`select count(*) filter (where delivered_at is not null) as n from leasehold_outbox_deliveries`;
      expect(delivered.n).toBeGreaterThan(0);
      // The CLI shows each endpoint of a tenant's outbox (it finds the running stack by its dev.json);
      // two reads, side by side.
      const [show, shownJson] = await Promise.all([
        run(process.execPath, [BIN, 'outbox', 'show', 'acme'], { cwd: project }),
        run(process.execPath, [BIN, 'outbox', 'show', 'globex', '--json'], { cwd: project }),
      ]);
      expect(show.stdout).toMatch(
        /^acme: 4 shards, 1 endpoint\n {2}http:\/\/127\.0\.0\.1:\d+\/acme\/hook\n {4}backlog \d+ \((oldest #\d+, [\d.]+ (ms|s) old|nothing pending)\); 0 failures in a row; last delivered \d{4}-/,
      );
      const json = JSON.parse(shownJson.stdout);
      expect(json).toMatchObject({
        tenant: 'globex',
        shards: 4,
        endpoints: [{ url: expect.stringMatching(/\/globex\/hook$/), failures: 0, lastError: null }],
      });
    } finally {
      dev.kill('SIGINT');
      await new Promise((r) => dev.on('exit', r));
    }
    expect(err).toMatch(/stopped: nothing left owned/);
    const [owned] = await db.sql`select count(*) as n from leasehold_units where owner is not null`;
    expect(owned.n).toBe(0);
  }, 60_000);
});

describe('leasehold dev --app', () => {
  it('refuses, before starting anything, an app file that is missing, fails to load or exports no handlers', async () => {
    writeFileSync(join(project, 'empty.ts'), 'export const nothing = 1;\n');
    writeFileSync(join(project, 'broken.ts'), "import { nope } from './does-not-exist.js';\nexport const worker = nope;\n");
    writeFileSync(
      join(project, 'bare.ts'),
      'export const worker = async () => ({});\nexport const scheduler = async () => ({});\nexport const api = async () => ({});\n',
    );
    const cases: [string, RegExp][] = [
      ['missing.ts', /--app missing\.ts: no such file/],
      [
        'empty.ts',
        /empty\.ts does not export worker, scheduler, api: export the handlers of createHandlers from 'leasehold\/lambda'/,
      ],
      ['broken.ts', /--app broken\.ts: could not load it: .*does-not-exist/s],
      ['bare.ts', /bare\.ts: its worker was not made by createHandlers from 'leasehold\/lambda'/],
    ];
    // Four separate processes, each refused on its own: run side by side.
    const refused = await Promise.all(cases.map(([file]) => leasehold(['dev', '--app', file])));
    for (const [i, [file, message]] of cases.entries()) {
      const r = refused[i]!;
      expect(r.code, file).toBe(2);
      expect(r.stderr, file).toMatch(message);
      expect(r.stderr, file).not.toMatch(/^ +api +http/m);
    }
  }, 60_000);
});
