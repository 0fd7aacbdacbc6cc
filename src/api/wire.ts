// The HTTP API's answers, declared once (docs/api.md): the views the API builds are typed with
// them (src/api/views.ts), the CLI's client reads them (src/cli/client.ts) and the dashboard
// page derives its own, more tolerant types from them (src/dashboard/api.ts). Types only, with
// no imports, so the browser bundle's type-check can read this file; times are ISO 8601 strings.

/** An item's state. */
export type ApiItemState = 'pending' | 'running' | 'waiting' | 'done' | 'failed';

/** A batch as the API shows it (timestamps as ISO 8601 strings). */
export interface ApiBatch {
  id: string;
  tenant: string;
  datasource: string;
  job: string;
  params: unknown;
  requestKey: string;
  /** 0 to 9; orders batches within their tenant only. */
  priority: number;
  status: 'open' | 'succeeded' | 'failed' | 'cancelled';
  total: number;
  /**
   * Items per state, as stored. A cancelled batch keeps the state its items had at the cancel:
   * its `running`, `waiting` and `pending` ones will never run (see `notRun`).
   */
  counts: Record<ApiItemState, number>;
  /**
   * Items that will never run: a finished batch's pending, waiting and running items. No run works
   * a finished batch: a cancel is for good; a batch ended by its deadline or by more failures than
   * it tolerated, or succeeded early (`completion`), keeps them until a redrive reopens it. 0 for
   * an open batch.
   */
  notRun: number;
  /** Process of its oldest live run; null when it has none. */
  ownerProcess: string | null;
  /** Runs that ever worked it (joins and takeovers). */
  runs: number;
  /** Most runs at once (docs/design.md, "Fan-out"). */
  maxConcurrency: number;
  /**
   * Runs it wants now: min(maxConcurrency, ceil(total / 100)), lowered when a run leaves for want
   * of work; 0 while it is paused, and once it finished.
   */
  target: number;
  /**
   * Paused (`POST /batches/{id}/pause`): no run joins it and its runs hand off within a beat; it
   * is not waiting for workers. False once it resumes, and for a finished batch.
   */
  paused: boolean;
  /** When it was paused (ISO 8601, database clock); null: not paused. */
  pausedAt: string | null;
  /** Its deadline (ISO 8601): not finished by then, it ends `failed` with reason `deadline`. Null: none. */
  deadline: string | null;
  /** Its live runs, oldest first. */
  liveRuns: ApiRun[];
  /**
   * Why the batch ended when its items do not tell (it was given up, or more items failed than
   * tolerated); otherwise null.
   */
  reason: string | null;
  /** The webhook the start asked for its `Batch Finished` event, or null. */
  notify: { url: string } | null;
  /** Failed items it tolerates as started (`{ count }` or `{ percent }`); null: none given. */
  toleratedFailures: { count: number } | { percent: number } | null;
  /** Failed items allowed before it ends `failed` (the count, or floor(percent × total / 100)); null: none given. */
  allowedFailures: number | null;
  /** The items' timeout its start set, ms (it wins over the job's `timeoutMs`); null: none set. */
  timeoutMs: number | null;
  /** The rate its start set, items per second per key (it wins over the job's `rateLimit`); null: none set. */
  rateLimit: { perSecond: number } | null;
  /** The concurrency pool its start named (docs/design.md, "Concurrency pools"); null: the job's, if any. */
  pool: string | null;
  /** Early completion as started: it ends `succeeded` once `minSucceeded` items are done; null: every item runs. */
  completion: { minSucceeded: number } | null;
  /** How many times it was redriven. */
  redrives: number;
  createdAt: string;
  beatAt: string | null;
  finishedAt: string | null;
  /**
   * The S3 source its items are read from (an object's `size` and `etag` as found at start);
   * null for items given at start (docs/design.md, "Sources and results").
   */
  source: unknown;
  /** Its source is still being read: status stays `open`, more items are coming, `total` grows. */
  reading: boolean;
  /** The first line (or row) of the source object that could not be read, when reading failed; else null. */
  sourceErrorLine: number | null;
  /** Where its results are written when it finishes (`{ s3: { bucket, prefix } }`); null: none. */
  results: { s3: { bucket: string; prefix: string } } | null;
  /** The results' manifest once written, `s3://bucket/prefix<id>/manifest.json`; else null. */
  resultsManifest: string | null;
  /** Why the last write of its results failed (`try N of 8: …`); null when none failed or once written. */
  resultsError: string | null;
  /** `GET /batches` and `GET /batches/{id}` only: time since it was created, ms (database clock). */
  ageMs?: number;
  /**
   * `GET /batches` and `GET /batches/{id}` only: items finished per second, over the last 10 s
   * while open, over its whole life once finished (database clock).
   */
  itemsPerSecond?: number;
  /** `POST /batches` only: whether this request started it (false: its request key had). */
  created?: boolean;
  /**
   * `GET /batches/{id}` only: what its workers used so far, with an estimated cost (docs/design.md,
   * "Usage and cost"); runs still going are counted when they end.
   */
  usage?: ApiUsage;
}

/**
 * What workers used (docs/design.md, "Usage and cost"): sums over runs, each recorded once at
 * its end (a run that died: from its start to its last beat, by its takeover).
 */
export interface ApiUsage {
  /** Worker time, ms: each run's share of its invocation while it ran. */
  workerMs: number;
  /** Worker time × memory size, GB-seconds (1 GB = 1,024 MB). */
  gbSeconds: number;
  /** Runs recorded. */
  runs: number;
  /** Of them, runs that died without reporting (counted to their last beat). */
  diedRuns: number;
  /** Distinct worker invocations among the runs (each charged one Lambda request). */
  invocations: number;
  /** Item attempts started (a retry is one more). */
  items: number;
  /** S3 requests sent by the source readers and results writers, by price class. */
  s3Requests: { get: number; put: number; list: number };
  /** An estimate at the region's published prices (or `LEASEHOLD_PRICES`), USD; never a bill. */
  estimatedCost: {
    currency: 'USD';
    total: number;
    lambda: number;
    s3: number;
    /** The region whose prices were used. */
    region: string;
    /** Whether `LEASEHOLD_PRICES` overrode any price. */
    overridden: boolean;
  };
}

/** One live run of a batch. */
export interface ApiRun {
  id: string;
  process: string;
  startedAt: string;
  /** Its last beat (database clock). */
  beatAt: string;
  /** Items it stored as done or failed. */
  settled: number;
  /** settled per second since it started. */
  itemsPerSecond: number;
}

/** An item as `GET /batches/{id}/items` lists it. */
export interface ApiItem {
  key: string;
  state: ApiItemState;
  attempts: number;
  output: unknown;
  error: string | null;
  /**
   * What its work last reported with `heartbeat(progress)` (docs/design.md, "Item heartbeats and
   * checkpoints"); null: none. Absent from APIs before migration 024.
   */
  progress?: unknown;
  /** When its work last beat (heartbeat or checkpoint), ISO time, database clock; null: never. */
  heartbeatAt?: string | null;
  /**
   * A waiting item's wait: `kind` (`callback` or `sleep`), `wakeAt` (when it wakes by time: a
   * sleep's wake, a callback's timeout or sooner heartbeat deadline), `timeoutAt` (a callback's
   * timeout), `heartbeatBy` (a callback's heartbeat deadline), ISO times, database clock; null for
   * an item in another state. Absent from APIs before it.
   */
  wait?: { kind: 'callback' | 'sleep'; wakeAt: string; timeoutAt: string | null; heartbeatBy: string | null } | null;
}

/** What `GET /batches/{id}/finished` answers: items finished per bucket of the batch's life. */
export interface ApiSeries {
  from: string;
  bucketMs: number;
  buckets: { at: string; done: number; failed: number }[];
}

/** One redrive of a batch, as `POST /batches/{id}/redrive` answers it. */
export interface ApiRedrive {
  /** 1 for the batch's first redrive, 2 for the next, … */
  number: number;
  /** Failed items put back to pending. */
  items: number;
  idempotencyKey: string | null;
  /** When it was done (ISO 8601). */
  at: string;
}

/** A bulk action as `POST /actions` and `GET /actions/{id}` answer it (docs/api.md, "Bulk actions"). */
export interface ApiAction {
  id: string;
  requestKey: string;
  action: 'cancel' | 'pause' | 'resume' | 'redrive';
  /** The filter as stored: instants as ISO 8601 strings, `status` a list (the action's default filled in). */
  filter: Record<string, unknown>;
  /** Batches the filter matched when the action was made. */
  matched: number;
  /** Batches it changed. */
  done: number;
  /** Batches it left as they were (see `skippedReasons`). */
  skipped: number;
  /** Batches not worked yet. */
  remaining: number;
  skippedReasons: { reason: string; count: number }[];
  /** Up to 20 skipped batches with their reason. */
  skippedBatches: { batchId: string; reason: string }[];
  createdAt: string;
  /** When its last batch was worked; null while it works. */
  finishedAt: string | null;
}

/** A unit as `GET /units` returns it. */
export interface ApiUnit {
  tenant: string;
  shard: number;
  job: string;
  weight: number;
  /** Owning process id, or null when unowned. */
  owner: string | null;
  /** When the owner claimed it (ISO 8601), or null. */
  claimedAt: string | null;
  /** When the owner's current run of the unit job started (ISO 8601), or null while none runs. */
  runningSince: string | null;
  /** Crashes in a row: runs during which the owner died or its lease lapsed (docs/design.md, "Crashes and quarantine"). */
  crashes: number;
  /** Quarantines so far; each lasts twice as long as the one before. */
  quarantines: number;
  /** Not claimed until then (ISO 8601, database clock), or null when not quarantined. */
  quarantinedUntil: string | null;
}

/** A process as `GET /processes` returns it. */
export interface ApiProcess {
  id: string;
  /** `fleet`: counted against the desired count, owns units; `batch`: sent for a batch. */
  role: 'fleet' | 'batch';
  /** Asked to leave: the fleet is above the desired count. */
  retiring: boolean;
  hostname: string;
  version: string;
  startedAt: string;
  expiresAt: string;
  live: boolean;
  /** Units owned. */
  units: number;
  /** Weight of the units owned. */
  weight: number;
  /**
   * The process this one replaced: the one that invoked it at its own deadline, as a fleet
   * process's replacement or a batch process's continuation (docs/design.md, "Process chains").
   * Null for the first of a chain (invoked by the scheduler, a dispatch or a start).
   */
  replaces: string | null;
  /** The process's chain: the id of the chain's first process. */
  chainId: string;
  /** When the chain's first process started (ISO 8601, database clock). */
  chainStartedAt: string;
  /** Processes before this one in its chain: how many times the chain's process was replaced (0: the first). */
  replacements: number;
}

/** What `GET /batches` answers. */
export interface ApiBatchList {
  /** Newest first. */
  batches: ApiBatch[];
  /**
   * How many days a finished batch is kept before the scheduler deletes it with its items
   * (`LEASEHOLD_RETENTION_DAYS`); 0: kept for ever.
   */
  retentionDays: number;
}

/** The desired count against the fleet, as `GET /concurrency` returns it. */
export interface ApiConcurrency {
  desired: number;
  /** Live fleet processes not retiring. */
  live: number;
  /** Invocations sent and not yet confirmed. */
  coming: number;
  /** Live fleet processes asked to leave, not gone yet. */
  retiring: number;
  /** Live workers sent for batches (not counted, owning no unit). */
  batch: number;
}

/** The fleet and its balance, as `GET /processes` returns it next to the processes. */
export interface ApiFleet extends ApiConcurrency {
  totalWeight: number;
  /** The weight a live fleet process claims up to: the exact share rounded up. */
  fairShare: number;
  /**
   * The exact share (weight left after heavy units over the processes left; 8 over 3: 2.67): a
   * process's weight against it is its real share of the work.
   */
  evenShare: number;
  /** Least and most weight a live fleet process (not retiring) owns. */
  minWeight: number;
  maxWeight: number;
  /**
   * Live fleet processes owning less than `fairShare × (1 − shedHysteresis)`, and less than
   * `fairShare − 1` (a process one below the rounded-up share is not starving).
   */
  starving: number;
}

/** What `PUT /tenants/{tenant}/units` answers. */
export interface ApiUnitsPut {
  tenant: string;
  job: string;
  shards: number;
  weight: number;
  added: number;
  removed: number;
}

/** One endpoint of a tenant's outbox as `GET /tenants/{tenant}/outbox` returns it (times as ISO strings). */
export interface ApiOutboxEndpoint {
  url: string;
  /** Messages not yet delivered to it. */
  backlog: number;
  /**
   * The oldest of them, with its age in ms (database clock); null when none. `id` is the
   * message's 64-bit id as decimal text: exact past 2^53, where a JSON number is not.
   */
  oldest: { id: string; enqueuedAt: string; ageMs: number } | null;
  /** Failed attempts since its last success. */
  failures: number;
  lastError: { message: string; at: string } | null;
  lastDeliveredAt: string | null;
  /**
   * Its `Retry-After` pause while one is in force, else null: `until` when the last of the
   * tenant's shards may post to it again (the wait, capped at 15 minutes by default, plus its
   * wake-up jitter), `remainingMs` until then and `askedMs` (the wait it asked for, before the
   * cap), `at` when it asked.
   */
  pause: { until: string; remainingMs: number; askedMs: number; at: string } | null;
}

/** What `POST /tenants/{tenant}/outbox` answers: the message id (64-bit, as decimal text) and its shard. */
export interface ApiOutboxMessage {
  id: string;
  shard: number;
}

/** What `GET /tenants/{tenant}/outbox` answers. */
export interface ApiOutboxStatus {
  tenant: string;
  shards: number;
  endpoints: ApiOutboxEndpoint[];
}

/** A batch as `GET /tenants/{tenant}` lists it. */
export interface ApiTenantBatch {
  id: string;
  datasource: string;
  job: string;
  priority: number;
  createdAt: string;
  /** Running: when a run last joined it; waiting: when it began to wait. */
  since: string;
  /** ms since `since` (database clock). */
  forMs: number;
  /** Its live runs and the runs it wants (docs/design.md, "Fan-out"). */
  liveRuns: number;
  target: number;
}

/** What `GET /tenants/{tenant}` and `PUT /tenants/{tenant}/limits` answer. */
export interface ApiTenant {
  tenant: string;
  running: number;
  waiting: number;
  /** The tenant's own limit; null: the default. */
  maxRunning: number | null;
  /** The limit in force; null: none. */
  effectiveMaxRunning: number | null;
  /** ms the longest-waiting batch has waited; null: none waits. */
  oldestWaitMs: number | null;
  runningBatches: ApiTenantBatch[];
  waitingBatches: ApiTenantBatch[];
  /**
   * `GET /tenants/{tenant}` only: what the tenant's runs used that were recorded in
   * `[from, to)` (`?from=&to=`, ISO 8601; default the last 30 days), for charging back.
   */
  usage?: ApiUsage & { from: string; to: string };
}

/** A concurrency pool as `GET /pools` and `GET`/`PUT /pools/{name}` answer it (docs/design.md, "Concurrency pools"). */
export interface ApiPool {
  name: string;
  /** Most items in flight at once, for a pool without a per-key cap; null for a per-key pool. */
  limit: number | null;
  /** Most items in flight per key; null: no per-key cap. */
  perKey: number | null;
  /** Most items in flight at once across its keys (`limit` for a pool without a per-key cap). */
  total: number;
  /** Items in flight now: permits held by live runs (database clock). */
  inFlight: number;
  /** Runs holding permits now. */
  runs: number;
  /** Keys with permits out now, the busiest first (at most 100). */
  keys: { key: string; inFlight: number }[];
  /** When its limits were last set (ISO 8601). */
  updatedAt: string;
}
