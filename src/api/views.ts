// The API's answers built from the library's records (the shapes are declared in wire.ts).
import { batchActivity, type BatchInfo } from '../batch/index.js';
import type { Sql } from '../store/index.js';
import { iso } from './respond.js';
import type { ApiAction, ApiUsage, ApiBatch, ApiConcurrency, ApiOutboxStatus, ApiProcess, ApiTenant, ApiUnit } from './wire.js';
import type { ActionInfo, TenantInfo, TenantUsage, Usage } from '../batch/index.js';
import type { Fleet, ProcessView, UnitView } from '../lease/index.js';
import type { OutboxStatus } from '../units/index.js';

/** A batch as the API shows it: {@link ApiBatch}. */
export type BatchView = ApiBatch;

/** The JSON shape of a batch in every response. */
export function batchView(b: BatchInfo): BatchView {
  return {
    id: b.id,
    tenant: b.tenant,
    datasource: b.datasource,
    job: b.job,
    params: b.params,
    requestKey: b.requestKey,
    priority: b.priority,
    status: b.status,
    total: b.total,
    counts: { ...b.counts },
    // A finished batch's unfinished items: no run works them any more (until a redrive reopens it).
    notRun: b.status !== 'open' ? b.counts.running + b.counts.waiting + b.counts.pending : 0,
    ownerProcess: b.ownerProcess,
    runs: b.runs,
    maxConcurrency: b.maxConcurrency,
    // A finished batch wants no run (until a redrive reopens it), whatever its row still holds.
    target: b.status === 'open' ? b.target : 0,
    paused: b.pausedAt !== null,
    pausedAt: iso(b.pausedAt),
    deadline: iso(b.deadline),
    liveRuns: b.runList.map((r) => ({
      id: r.id,
      process: r.process,
      startedAt: iso(r.startedAt)!,
      beatAt: iso(r.beatAt)!,
      settled: r.settled,
      itemsPerSecond: r.itemsPerSecond,
    })),
    reason: b.reason,
    notify: b.notify,
    toleratedFailures: b.toleratedFailures,
    allowedFailures: b.allowedFailures,
    timeoutMs: b.timeoutMs,
    rateLimit: b.ratePerSecond != null ? { perSecond: b.ratePerSecond } : null,
    pool: b.pool,
    completion: b.minSucceeded != null ? { minSucceeded: b.minSucceeded } : null,
    redrives: b.redrives,
    createdAt: iso(b.createdAt)!,
    beatAt: iso(b.beatAt),
    finishedAt: iso(b.finishedAt),
    source: b.source,
    reading: b.reading,
    sourceErrorLine: b.sourceErrorLine,
    results: b.results,
    resultsManifest: b.resultsManifest,
    resultsError: b.resultsError,
  };
}

/** Batch views with their `ageMs` and `itemsPerSecond`, read in one statement for all of them. */
export async function withActivity(sql: Sql, batches: BatchInfo[]): Promise<BatchView[]> {
  const activity = await batchActivity(
    sql,
    batches.map((b) => b.id),
  );
  return batches.map((b) => ({ ...batchView(b), ...activity.get(b.id) }));
}

/** A unit as the API shows it (times as ISO 8601). */
export function unitView(u: UnitView): ApiUnit {
  return {
    tenant: u.tenant,
    shard: u.shard,
    job: u.job,
    weight: u.weight,
    owner: u.owner,
    claimedAt: iso(u.claimedAt),
    runningSince: iso(u.runningSince),
    crashes: u.crashes,
    quarantines: u.quarantines,
    quarantinedUntil: iso(u.quarantinedUntil),
  };
}

/** A process as the API shows it (times as ISO 8601). */
export function processView(p: ProcessView): ApiProcess {
  return {
    id: p.id,
    role: p.role,
    retiring: p.retiring,
    hostname: p.hostname,
    version: p.version,
    startedAt: iso(p.startedAt),
    expiresAt: iso(p.expiresAt),
    live: p.live,
    units: p.units,
    weight: p.weight,
    replaces: p.replaces,
    chainId: p.chainId,
    chainStartedAt: iso(p.chainStartedAt),
    replacements: p.replacements,
  };
}

/**
 * The knob against the fleet: `desired`, `live` (live fleet processes not retiring: what
 * `desired` is compared with), `coming` (invocations sent and not yet confirmed), `retiring`
 * (asked to leave, not gone yet) and `batch` (workers sent for batches: not counted, owning no
 * unit).
 */
export function concurrencyView(f: Fleet): ApiConcurrency {
  return { desired: f.desired, live: f.live, coming: f.coming, retiring: f.retiring, batch: f.batch };
}

/** A tenant's outbox status as the API shows it (times as ISO 8601). */
export function outboxStatusView(o: OutboxStatus): ApiOutboxStatus {
  return {
    tenant: o.tenant,
    shards: o.shards,
    endpoints: o.endpoints.map((e) => ({
      url: e.url,
      backlog: e.backlog,
      oldest: e.oldest && { id: e.oldest.id, enqueuedAt: iso(e.oldest.enqueuedAt), ageMs: e.oldest.ageMs },
      failures: e.failures,
      lastError: e.lastError && { message: e.lastError.message, at: iso(e.lastError.at) },
      lastDeliveredAt: iso(e.lastDeliveredAt),
      pause: e.pause && {
        until: iso(e.pause.until),
        remainingMs: e.pause.remainingMs,
        askedMs: e.pause.askedMs,
        at: iso(e.pause.at),
      },
    })),
  };
}

/**
 * A tenant as the API shows it: `running` and `waiting` counts, `maxRunning` (its own limit, null
 * when it uses the default), `effectiveMaxRunning` (the limit in force, null: none),
 * `oldestWaitMs` (how long its longest-waiting batch has waited, since its start or last
 * handoff, database clock; null: none waits), and `runningBatches` / `waitingBatches` (at most
 * 100 each; waiting ones in the order its turns take them) as `[{ id, datasource, job, priority,
 * createdAt, since, forMs }]`.
 */
export function tenantView(t: TenantInfo): ApiTenant {
  const batch = (b: TenantInfo['runningBatches'][number]) => ({
    id: b.id,
    datasource: b.datasource,
    job: b.job,
    priority: b.priority,
    createdAt: iso(b.createdAt),
    since: iso(b.since),
    forMs: b.forMs,
    liveRuns: b.liveRuns,
    target: b.target,
  });
  return {
    tenant: t.tenant,
    running: t.running,
    waiting: t.waiting,
    maxRunning: t.maxRunning,
    effectiveMaxRunning: t.effectiveMaxRunning,
    oldestWaitMs: t.oldestWaitMs,
    runningBatches: t.runningBatches.map(batch),
    waitingBatches: t.waitingBatches.map(batch),
  };
}

/** Usage as the API answers it (the library's shape; its times as ISO 8601). */
export function usageView(u: Usage): ApiUsage {
  return {
    workerMs: u.workerMs,
    gbSeconds: u.gbSeconds,
    runs: u.runs,
    diedRuns: u.diedRuns,
    invocations: u.invocations,
    items: u.items,
    s3Requests: u.s3Requests,
    estimatedCost: u.estimatedCost,
  };
}

/** A tenant's usage over a range as the API answers it. */
export function tenantUsageView(u: TenantUsage): ApiUsage & { from: string; to: string } {
  return { from: iso(u.from), to: iso(u.to), ...usageView(u) };
}

/** A bulk action as the API answers it. */
export function actionView(a: ActionInfo): ApiAction {
  return { ...a, createdAt: iso(a.createdAt)!, finishedAt: iso(a.finishedAt) };
}
