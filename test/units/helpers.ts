// Simulated processes for unit tests: a real Leaser and a real UnitRunner on their own pool of
// the test schema, driven by `run(signal)` with short intervals.
import { randomUUID } from 'node:crypto';
import { Leaser } from '../../src/lease/index.js';
import type { Sql } from '../../src/store/index.js';
import { UnitRunner, type UnitJobRegistry } from '../../src/units/index.js';
import { memoryLog, type LogEntry } from '../support/log.js';
import type { TestDatabase } from '../support/db.js';

/** A simulated process: leaser + unit runner, looping until stopped, killed or frozen. */
export interface Proc {
  processId: string;
  leaser: Leaser;
  runner: UnitRunner;
  sql: Sql;
  log: LogEntry[];
  /** Graceful stop: release every unit (runs stop first), delete the row. */
  stop(): Promise<void>;
  /** Crash: heartbeats and unit runs stop, connections are cut; nothing is released. */
  kill(): Promise<void>;
  /** Heartbeats and ticks stop, but unit runs go on as if the process were paused mid-work (a zombie). */
  freeze(): Promise<void>;
  /** True once stopped or killed. */
  readonly ended: boolean;
}

/** Timing of a simulated process, ms. */
export interface ProcTiming {
  ttlMs?: number;
  heartbeatIntervalMs?: number;
  rebalanceIntervalMs?: number;
}

/** Start a process on its own pool of `db`'s schema. */
export function startProc(db: TestDatabase, jobs: UnitJobRegistry, timing: ProcTiming = {}): Proc {
  const sql = db.connect({ max: 3 });
  const processId = randomUUID();
  const { log, entries } = memoryLog();
  const runner = new UnitRunner({ sql, processId, jobs, log, stopTimeoutMs: 2_000 });
  const leaser = new Leaser(
    sql,
    {
      processId,
      hostname: 'test',
      version: 'test',
      ttlMs: timing.ttlMs ?? 1_000,
      heartbeatIntervalMs: timing.heartbeatIntervalMs ?? 250,
      rebalanceIntervalMs: timing.rebalanceIntervalMs ?? 150,
    },
    runner,
    {
      onEvent: (e) =>
        log(
          e.type === 'error' ? 'error' : 'info',
          `leaser ${e.type}`,
          e.type === 'error' ? { step: e.step, error: String(e.error) } : { ...e },
        ),
    },
  );
  const loop = new AbortController();
  const running = leaser.run(loop.signal);
  const halt = async () => {
    loop.abort();
    await running;
  };
  let ended = false;
  return {
    processId,
    leaser,
    runner,
    sql,
    log: entries,
    get ended() {
      return ended;
    },
    async stop() {
      ended = true;
      await halt();
      await leaser.release();
      await runner.close();
      await leaser.deleteProcess();
      await sql.end({ timeout: 1 });
    },
    async kill() {
      if (ended) return;
      ended = true;
      await halt();
      await runner.close();
      await sql.end({ timeout: 1 });
    },
    freeze: halt,
  };
}

/**
 * Record, in `outbox_marks`, every update that changes a delivery's `delivered_at`, with the
 * owner of its unit at that moment (the tests assert each delivery is marked once, by its owner);
 * and in `outbox_failures`, every failed attempt of a delivery with the retry delay it set, ms.
 */
export async function auditMarks(sql: Sql): Promise<void> {
  await sql.unsafe(`
    create table outbox_marks (id bigint not null, endpoint text not null, owner uuid, old_delivered_at timestamptz, at timestamptz not null default now());
    create table outbox_failures (id bigint not null, endpoint text not null, attempts int not null, delay_ms float8 not null);
    create function outbox_mark_audit() returns trigger language plpgsql as $$
    begin
      if new.delivered_at is distinct from old.delivered_at then
        insert into outbox_marks (id, endpoint, owner, old_delivered_at)
        values (new.message_id, new.endpoint, (select owner from leasehold_units where tenant = new.tenant and shard = new.shard), old.delivered_at);
      elsif new.attempts > old.attempts then
        insert into outbox_failures (id, endpoint, attempts, delay_ms)
        values (new.message_id, new.endpoint, new.attempts, extract(epoch from new.next_attempt_at - now()) * 1000);
      end if;
      return new;
    end $$;
    create trigger outbox_mark_audit after update on leasehold_outbox_deliveries for each row execute function outbox_mark_audit();
  `);
}

/** Messages of `tenant` some endpoint has not taken yet: unassigned, or with a pending delivery. */
export async function undelivered(sql: Sql, tenant: string): Promise<number> {
  const [r] = await sql<{ n: number }[]>`select count(*) as n from leasehold_outbox o where o.tenant = ${tenant}
    and (o.assigned_at is null or exists (select 1 from leasehold_outbox_deliveries d where d.message_id = o.id and d.delivered_at is null))`;
  return r.n;
}
