// CloudWatch metrics in the Embedded Metric Format (EMF): Powertools metrics, written as log
// lines (CloudWatch turns them into metrics; no API call, no extra permission).
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import type { ItemOutcome, RunnerEvent } from '../batch/run/types.js';
import type { Hooks } from '../lease/leaser.js';
import type { SchedulerResult } from './scheduler.js';
import { logSilenced, writeLogLine } from './log.js';

/** CloudWatch namespace of every leasehold metric. */
export const METRICS_NAMESPACE = 'leasehold';

/**
 * Powertools metrics whose EMF lines go through {@link writeLogLine}, so local mode's log sink
 * and `LEASEHOLD_LOG=silent` apply to them, and that never warns about an empty flush.
 */
class LeaseholdMetrics extends Metrics {
  override publishStoredMetrics(): this {
    try {
      if (this.hasStoredMetrics() && !this.isDisabled() && !logSilenced()) {
        writeLogLine(JSON.stringify(this.serializeMetrics()), 'info');
      }
    } finally {
      this.clearMetrics();
      this.clearDimensions();
      this.clearMetadata();
    }
    return this;
  }
}

/**
 * The metrics one function records: counts and durations, buffered and flushed as one EMF line
 * per invocation (and whenever 100 values of one metric are buffered), with the dimension
 * `service`.
 */
export interface RuntimeMetrics {
  /** Add `n` (default 1) to the count `name`. Zero and negative values are not recorded. */
  count(name: string, n?: number): void;
  /** Record a duration, ms. */
  ms(name: string, value: number): void;
  /** Record a level (a count of things at this moment, e.g. units owned). */
  level(name: string, value: number): void;
  /**
   * Record a duration, ms, with the dimension `tenant` besides `service`; written as an EMF line
   * of its own at once.
   */
  msByTenant(name: string, tenant: string, value: number): void;
  /** Write what is buffered as EMF now. */
  flush(): void;
}

const instances = new Map<string, RuntimeMetrics>();

/**
 * The container's metrics for `service` (`worker`, `scheduler`, `api`, `trigger`), namespace
 * {@link METRICS_NAMESPACE}. Created on first use; the invocation middleware flushes them after
 * every invocation.
 */
export function metricsFor(service: string): RuntimeMetrics {
  let m = instances.get(service);
  if (!m) {
    const emf = new LeaseholdMetrics({ namespace: METRICS_NAMESPACE, serviceName: service });
    m = {
      count: (name, n = 1) => {
        if (n > 0) emf.addMetric(name, MetricUnit.Count, n);
      },
      ms: (name, value) => emf.addMetric(name, MetricUnit.Milliseconds, Math.max(0, value)),
      level: (name, value) => emf.addMetric(name, MetricUnit.Count, value),
      msByTenant: (name, tenant, value) => {
        const one = new LeaseholdMetrics({ namespace: METRICS_NAMESPACE, serviceName: service, defaultDimensions: { tenant } });
        one.addMetric(name, MetricUnit.Milliseconds, Math.max(0, value));
        one.publishStoredMetrics();
      },
      flush: () => emf.publishStoredMetrics(),
    };
    instances.set(service, m);
  }
  return m;
}

/** What a worker reports to metrics: lease hooks, runner events and item outcomes. */
export interface WorkerHooks {
  /** The leaser's hooks (units claimed, shed, owned; rebalance duration). */
  lease?: Hooks;
  /** Every runner event (runs started, taken over, ended; items ended; store errors). */
  runner?: (event: RunnerEvent) => void;
  /**
   * One item's turn ended and was stored: `done`, `failed` (for good), `retry` (it will be tried
   * again), `interrupted` (the run stopped while it ran; the attempt counts) or `given-back`
   * (claimed ahead but never started before the run stopped; no attempt used) or `waiting` (the
   * downstream asked for a wait with Retry-After; no attempt used).
   */
  item?: (outcome: ItemOutcome) => void;
  /** A heartbeat failed on a dead connection and was retried on another one. */
  heartbeatRetried?: () => void;
}

/**
 * Worker hooks that record, per invocation flush:
 * - lease: `UnitsClaimed`, `UnitsShed` (counts per tick that moved units), `RebalanceMs`
 *   (duration of each rebalancing tick), `UnitsOwned`, `WeightOwned` and `FairShare` (after
 *   each tick: the Minimum and Maximum statistics of `WeightOwned` give the spread);
 * - runs: `RunsStarted`, `RunsTakenOver`, `BatchesSucceeded`, `BatchesFailed` (finished by this
 *   worker), `RunsHandedOff`, `RunsSliced` (handed off at the end of a time slice), `RunsDrained`
 *   (left a batch its other runs go on with: no work left, or a surplus run), `RunsLost`,
 *   `RunStoreErrors`, `StoreErrors`, `UnknownJobs`;
 * - `QueueWaitMs` with the dimension `tenant`: from a batch's start to its first run (database
 *   clock), once per batch (docs/design.md, "Tenant fairness");
 * - items (as stored): `ItemsDone`, `ItemsFailed`, `ItemsRetried`, `ItemsInterrupted`, `ItemsGivenBack`,
 *   `ItemsResumable` (handed off after a checkpoint, no attempt used), `ItemsStale` (recovered for want of heartbeats);
 * - `HeartbeatRetries`.
 */
export function workerMetricHooks(m: RuntimeMetrics): WorkerHooks {
  return {
    lease: {
      claimed: (n) => m.count('UnitsClaimed', n),
      shed: (n) => m.count('UnitsShed', n),
      rebalanced: (ms) => m.ms('RebalanceMs', ms),
      owned: (units, weight, fairShare) => {
        m.level('UnitsOwned', units);
        m.level('WeightOwned', weight);
        m.level('FairShare', fairShare);
      },
    },
    runner: (e) => {
      switch (e.type) {
        case 'run-started':
          if (e.queueWaitMs !== null) m.msByTenant('QueueWaitMs', e.tenant, e.queueWaitMs);
          return m.count(e.takeover ? 'RunsTakenOver' : 'RunsStarted');
        case 'store-error':
          return m.count('StoreErrors');
        case 'unknown-job':
          return m.count('UnknownJobs');
        case 'run-ended':
          return m.count(RUN_ENDED[e.result.outcome]);
      }
    },
    item: (outcome) => m.count(ITEM_ENDED[outcome]),
    heartbeatRetried: () => m.count('HeartbeatRetries'),
  };
}

const ITEM_ENDED = {
  done: 'ItemsDone',
  failed: 'ItemsFailed',
  retry: 'ItemsRetried',
  interrupted: 'ItemsInterrupted',
  'given-back': 'ItemsGivenBack',
  waiting: 'ItemsWaiting',
  parked: 'ItemsParked',
  resumable: 'ItemsResumable',
  stale: 'ItemsStale',
} as const;

const RUN_ENDED = {
  succeeded: 'BatchesSucceeded',
  failed: 'BatchesFailed',
  'handed-off': 'RunsHandedOff',
  sliced: 'RunsSliced',
  drained: 'RunsDrained',
  parked: 'RunsParked',
  lost: 'RunsLost',
  'store-error': 'RunStoreErrors',
} as const;

/**
 * The fleet's balance as one scheduler run read it, one value each per run: `FairShare`,
 * `WeightMin` and `WeightMax` (the spread of the weight live fleet processes own),
 * `StarvingProcesses` (owning less than `fairShare × (1 − shedHysteresis)` and than `fairShare − 1`),
 * `RetiringProcesses`, `BatchProcesses`, and `ProcessesRetired` (asked to retire by this run).
 */
export function recordFleetBalance(m: RuntimeMetrics, result: Pick<SchedulerResult, 'balance' | 'retired'>): void {
  const b = result.balance;
  m.level('FairShare', b.fairShare);
  m.level('WeightMin', b.minWeight);
  m.level('WeightMax', b.maxWeight);
  m.level('StarvingProcesses', b.starving);
  m.level('RetiringProcesses', b.retiring);
  m.level('BatchProcesses', b.batch);
  m.count('ProcessesRetired', result.retired);
}

/**
 * The runs of open batches as one scheduler run read them (docs/design.md, "Fan-out"), levels:
 * `RunsPerBatch` (the most live runs of one open batch), `LiveRuns` (live runs of all open
 * batches) and `RunningBatches` (open batches with a live run).
 */
export function recordRuns(m: RuntimeMetrics, result: Pick<SchedulerResult, 'runs'>): void {
  m.level('RunsPerBatch', result.runs.maxPerBatch);
  m.level('LiveRuns', result.runs.runs);
  m.level('RunningBatches', result.runs.batches);
}

/**
 * What one scheduler run's retention deleted (docs/design.md, "Retention"), counts of rows:
 * `RetentionBatchesDeleted`, `RetentionItemsDeleted`, `RetentionRedrivesDeleted`,
 * `RetentionDeferredDeleted`, `RetentionOutboxDeleted` (messages), `RetentionDeliveriesDeleted`,
 * `RetentionUsageDeleted` (usage rows), and the level `RetentionBacklog` (1 when a pass stopped at its cap or budget with expired rows
 * left, else 0: a value of 1 run after run means retention falls behind).
 */
export function recordRetention(m: RuntimeMetrics, result: Pick<SchedulerResult, 'retention'>): void {
  const r = result.retention;
  m.count('RetentionBatchesDeleted', r.batches);
  m.count('RetentionItemsDeleted', r.items);
  m.count('RetentionRedrivesDeleted', r.redrives);
  m.count('RetentionDeferredDeleted', r.deferred);
  m.count('RetentionOutboxDeleted', r.outbox.messages);
  m.count('RetentionDeliveriesDeleted', r.outbox.deliveries);
  m.count('RetentionUsageDeleted', r.usage.rows);
  m.level('RetentionBacklog', r.more ? 1 : 0);
}

/**
 * The invocations one scheduler run found unconfirmed (docs/deploy.md, "Faults and how leasehold
 * answers them"), counts: `InvocationsUnconfirmed` (confirmation window passed with no worker
 * heartbeat) and `InvocationsUnstarted` (of those, never claimed by a worker: the platform
 * accepted the invoke and ran nothing, as a worker function throttled to zero does). An alarm on
 * `InvocationsUnstarted` > 0 for a few minutes catches a stopped worker function.
 */
export function recordUnconfirmed(m: RuntimeMetrics, result: Pick<SchedulerResult, 'unconfirmed'>): void {
  m.count('InvocationsUnconfirmed', result.unconfirmed.invocations);
  m.count('InvocationsUnstarted', result.unconfirmed.unstarted);
}
