import type { RateLimit } from './rate.js';
import type { PoolSpec } from './pool.js';

/**
 * Lifecycle of a batch. `failed` means "finished with failures": at least one item failed (more
 * than its {@link ToleratedFailures} allow, when it set some), or it was given up.
 */
export type BatchStatus = 'open' | 'succeeded' | 'failed' | 'cancelled';

/**
 * Lifecycle of an item. `waiting`: its work waits for the outside world (a callback or a sleep,
 * docs/design.md, "Waiting items: callbacks and sleeps"), holding no run slot: pending, but parked
 * until a completion, its timeout or its wake time makes it due again.
 */
export type ItemState = 'pending' | 'running' | 'waiting' | 'done' | 'failed';

/** One item of a batch as given at start. `key` is unique within the batch. */
export interface ItemInput {
  key: string;
  /** Optional JSON input handed to the item's work. */
  input?: unknown;
}

/** Where a start's items come from: an array, or any iterable or async iterable of items. */
export type ItemSource = Iterable<ItemInput> | AsyncIterable<ItemInput>;

/**
 * How many failed items a batch tolerates (docs/design.md, "Batches": "End"): `{ count }`, a
 * whole number ≥ 0, or `{ percent }` of its items, 0 to 100 (the allowed count is
 * `floor(percent × total / 100)`). Once more items have failed than allowed, the batch ends
 * `failed` at once; otherwise it ends `succeeded`, its failed items listed. Without one, every
 * item runs and the batch ends `failed` when any item failed.
 */
export type ToleratedFailures = { count: number } | { percent: number };

/** What {@link createBatch} and `Runner.start` take. */
export interface NewBatch {
  tenant: string;
  datasource: string;
  job: string;
  params: unknown;
  /** Idempotency key: the same (tenant, request key) always answers the same batch. */
  requestKey: string;
  /** The items: an array, or an iterable or async iterable read once while the batch starts. */
  items: ItemSource;
  /** Failed items tolerated; default none given (any failed item fails the batch, at its end). */
  toleratedFailures?: ToleratedFailures | null;
  /**
   * 0 (lowest) to 9 (highest); orders the batches of its tenant only, never across tenants
   * (docs/design.md, "Tenant fairness"). Default `BATCH_DEFAULTS.priority` (5).
   */
  priority?: number;
  /**
   * Most runs that work the batch at once, 1 to {@link MAX_CONCURRENCY} (docs/design.md,
   * "Fan-out"); changeable while it runs (`setMaxConcurrency`). Default `BATCH_DEFAULTS.maxConcurrency`
   * (1) here; the runtime's default is `LEASEHOLD_BATCH_CONCURRENCY`.
   */
  maxConcurrency?: number;
  /**
   * Most time one attempt of an item may take, ms (docs/design.md, "Item timeouts"): then its
   * signal aborts and the attempt fails with `timed out after N ms`. Wins over the job's
   * `timeoutMs`; default none (the job's, or no timeout). 1 to {@link MAX_ITEM_TIMEOUT_MS}.
   */
  timeoutMs?: number | null;
  /**
   * Its own fleet-wide rate, items per second per key (docs/design.md, "Rate limits"): wins over
   * the job's `rateLimit.perSecond`; a job without one gets one key for all its items. From
   * {@link MIN_RATE_PER_SECOND} to {@link MAX_RATE_PER_SECOND}. Default none.
   */
  ratePerSecond?: number | null;
  /**
   * The concurrency pool its items count against (docs/design.md, "Concurrency pools"): a pool
   * that exists (`PUT /pools/{name}` or a job's `pool`); it wins over the job's. Default none.
   */
  pool?: string | null;
  /**
   * Early completion (docs/design.md, "End"): the batch ends `succeeded` once this many of its
   * items are done, 1 to {@link MAX_MIN_SUCCEEDED}; the rest never run. Default none.
   */
  minSucceeded?: number | null;
  /**
   * Where to POST the batch's `Batch Finished` event as a signed webhook when it ends
   * (docs/design.md, "Events"); an absolute http(s) URL of at most 2,048 characters. The address
   * policy of outbox delivery applies when it is sent. Default none.
   */
  notify?: { url: string } | null;
  /** Where results go when the batch finishes (docs/design.md, "Sources and results"). Default none. */
  results?: ResultsTarget | null;
  /**
   * A source its runs read the items from, as checked at start (`checkSource`); `items` is then
   * ignored and the batch starts `reading`, with no items. Default none.
   */
  source?: StoredSource | null;
  /**
   * A deadline for the whole batch, an instant (docs/design.md, "Pause, deadline and startBy"):
   * not finished by then, it ends `failed` with reason `deadline`. Wins over `deadlineMs`.
   * Default none.
   */
  deadline?: Date | null;
  /** A deadline in ms from the start (database clock), 1 to {@link MAX_DEADLINE_MS}. Default none. */
  deadlineMs?: number | null;
  /**
   * The W3C `traceparent` of the span that started it (docs/design.md, "Traces"): its runs
   * continue that trace. Null or absent: none.
   */
  traceContext?: string | null;
}

/** Longest `deadlineMs` of a batch (and `startByMs` of a trigger firing), ms: 366 days. */
export const MAX_DEADLINE_MS = 366 * 86_400_000;

/** Largest `minSucceeded` of a batch. */
export const MAX_MIN_SUCCEEDED = 10_000_000;

/** Longest item timeout, ms: Lambda's longest invocation (15 minutes). */
export const MAX_ITEM_TIMEOUT_MS = 900_000;

/** Largest `maxConcurrency` of a batch (as Step Functions' Distributed Map allows children). */
export const MAX_CONCURRENCY = 10_000;

/** One live run of a batch: a lease of its own (docs/design.md, "Fan-out"). */
export interface RunInfo {
  /** The run's id: its fencing token. */
  id: string;
  /** The process the run belongs to. */
  process: string;
  startedAt: Date;
  /** Its last beat (database clock). */
  beatAt: Date;
  /** Items it stored as done or failed. */
  settled: number;
  /** settled / seconds since it started (database clock), one decimal. */
  itemsPerSecond: number;
}

/** Highest priority a batch may have (the lowest is 0). */
export const MAX_PRIORITY = 9;

/** A batch as stored, with item counts per state. */
export interface BatchInfo {
  id: string;
  tenant: string;
  datasource: string;
  job: string;
  params: unknown;
  requestKey: string;
  /** 0 to 9: within its tenant, a higher priority is taken first (docs/design.md, "Tenant fairness"). */
  priority: number;
  status: BatchStatus;
  total: number;
  counts: Record<ItemState, number>;
  /** Process id of the batch's oldest live run, or null when it has none. */
  ownerProcess: string | null;
  /** How many runs have worked the batch (every start of a run: joins and takeovers). */
  runs: number;
  /** Most runs at once (docs/design.md, "Fan-out"). */
  maxConcurrency: number;
  /**
   * Runs it wants now: `min(maxConcurrency, ceil(total / 100))`, lowered when a run leaves for
   * want of work.
   */
  target: number;
  /** Runs working it now (a run that died counts until it is taken over). */
  liveRuns: number;
  /** Those runs, oldest first. */
  runList: RunInfo[];
  /**
   * Runs in a row, the current one included, that stored no item move (store errors, crashes,
   * lost batches). Past the runner's `maxStalledRuns` the batch is given up: it ends `failed`
   * with a {@link BatchInfo.reason}.
   */
  stalledRuns: number;
  /**
   * Why the batch ended, when its items do not tell (it was given up, or more items failed than
   * tolerated); otherwise null.
   */
  reason: string | null;
  /** The webhook the start asked for (`notify`), or null. */
  notify: { url: string } | null;
  /** Failed items it tolerates, as started; null: none given. */
  toleratedFailures: ToleratedFailures | null;
  /**
   * Failed items allowed before it ends `failed`: the count, or `floor(percent × total / 100)`;
   * null when no tolerance was given.
   */
  allowedFailures: number | null;
  /** The items' timeout its start set, ms (it wins over the job's); null: none set. */
  timeoutMs: number | null;
  /**
   * Its own rate limit, items per second (a start's or a PATCH's; it wins over the job's
   * `rateLimit.perSecond`; docs/design.md, "Rate limits"); null or absent: the job's, if any.
   */
  ratePerSecond?: number | null;
  /** The concurrency pool its start named (docs/design.md, "Concurrency pools"); null: the job's, if any. */
  pool: string | null;
  /** It ends `succeeded` once this many items are done (docs/design.md, "End"); null: every item runs. */
  minSucceeded: number | null;
  /** How many times the batch was redriven (its failed items put back to pending: `redriveBatch`). */
  redrives: number;
  createdAt: Date;
  /** The latest beat of its live runs; null when none. */
  beatAt: Date | null;
  finishedAt: Date | null;
  /**
   * The source its runs read items from (docs/design.md, "Sources and results"), as stored (an
   * object's size and ETag included); null for items given at start.
   */
  source: StoredSource | null;
  /** Its source is still being read: more items are coming, and it does not finish. */
  reading: boolean;
  /** Pages of its source stored so far. */
  sourcePages: number;
  /** The first line (or row) of the source object that could not be read, when reading failed. */
  sourceErrorLine: number | null;
  /** Where its results go when it finishes; null: none are written. */
  results: ResultsTarget | null;
  /** The results' manifest once written (`s3://bucket/key`), else null. */
  resultsManifest: string | null;
  /**
   * Why the last write of its results failed (`try N of 8: …`); null when none failed or once
   * written. After the 8th failed try its results are no longer written.
   */
  resultsError: string | null;
  /**
   * When it was paused (database clock; docs/design.md, "Pause, deadline and startBy"): no run
   * joins it and its runs hand off until it resumes. Null: not paused (always null once finished).
   */
  pausedAt: Date | null;
  /** Its deadline: not finished by then, it ends `failed` with reason `deadline`. Null: none. */
  deadline: Date | null;
  /**
   * The W3C `traceparent` of the span that started it (docs/design.md, "Traces"), which its runs
   * continue; null or absent: none.
   */
  traceContext?: string | null;
}

/** One item's stored result, as `leasehold batch results` prints it. */
export interface ItemResult {
  key: string;
  state: ItemState;
  attempts: number;
  output: unknown;
  error: string | null;
  /**
   * The progress its work last reported with `heartbeat` (docs/design.md, "Item heartbeats and
   * checkpoints"); null when none. Set by item pages (`itemsPage`, `GET /batches/{id}/items`).
   */
  progress?: unknown;
  /** When its work last beat (heartbeat or checkpoint), database clock; null when never. Set by item pages. */
  heartbeatAt?: Date | null;
  /**
   * A waiting item's wait and its deadlines (docs/design.md, "Waiting items: callbacks and
   * sleeps"); null for an item in any other state. Set by item pages.
   */
  wait?: ItemWait | null;
}

/** What a waiting item waits for and until when (database clock). */
export interface ItemWait {
  kind: 'callback' | 'sleep';
  /**
   * When it wakes by time if nothing else wakes it first: a sleep's wake time; a callback's
   * timeout, or its heartbeat deadline when that comes sooner (the expiry pass wakes it then,
   * timed out).
   */
  wakeAt: Date;
  /** A callback's overall timeout (`timeoutMs` after it was registered); null for a sleep. */
  timeoutAt: Date | null;
  /** A callback's heartbeat deadline (moved by each `/heartbeat`); null: no `heartbeatTimeoutMs`, or a sleep. */
  heartbeatBy: Date | null;
}

/** What one item's work receives. */
export interface ItemContext {
  key: string;
  input: unknown;
  /** 1-based attempt number of this execution. */
  attempt: number;
  /**
   * Aborted when the run stops, loses its batch or hands off, when the attempt times out, and
   * when the item is recovered for want of heartbeats (reason an `ItemStaleError`).
   */
  signal: AbortSignal;
  batch: { id: string; tenant: string; datasource: string; job: string; params: unknown };
  /**
   * Keep this attempt's claim alive and report its progress (docs/design.md, "Item heartbeats and
   * checkpoints"). `progress` (any JSON, at most {@link MAX_PROGRESS_BYTES} bytes; omitted: the
   * last one stays) shows in `GET /batches/{id}/items`. Writes are coalesced: at most one in
   * flight per item, at most one a second (a quarter of `itemStaleMs` when that is shorter); the
   * newest progress wins. Never waits and never fails for the store (a failed write is reported
   * as a `store-error` event). An attempt whose last heartbeat (or start) is older than the job's
   * `itemStaleMs` is recovered by its run: its signal aborts, and it is retried or failed.
   * @throws {CheckpointTooLargeError} progress over {@link MAX_PROGRESS_BYTES} bytes of JSON.
   * @throws {UnstorableStateError} progress that JSON or PostgreSQL cannot hold (NUL, BigInt, a cycle).
   */
  heartbeat(progress?: unknown): void;
  /**
   * Store `state` (any JSON, at most {@link MAX_CHECKPOINT_BYTES} bytes, 64 KiB) for the item's
   * next attempt, which receives it as {@link ItemContext.checkpointed}; also a heartbeat.
   * Resolves once stored. An attempt interrupted by a handoff (the run's deadline) after it
   * stored a checkpoint uses no attempt: the next run goes on from the checkpoint. `null` clears it.
   * @throws {CheckpointTooLargeError} a state over {@link MAX_CHECKPOINT_BYTES} bytes of JSON (nothing is stored).
   * @throws {UnstorableStateError} a state that JSON or PostgreSQL cannot hold (nothing is stored).
   * @throws {ItemLostError} the attempt no longer holds the item (recovered, the run lost its batch, or it ended).
   * @throws the store's error once the run's `moveTries` tries failed.
   */
  checkpoint(state: unknown): Promise<void>;
  /** The state the item's last checkpoint stored before this attempt began; undefined when none. */
  checkpointed: unknown;
  /**
   * Park the item until the outside world answers (docs/design.md, "Waiting items: callbacks and
   * sleeps"): registers a callback and resolves to its token (and URL, when the API's address is
   * known). Hand the token to the other system, then return: the attempt ends, the item is
   * `waiting` (no run slot, no Lambda time; whatever the work returns is ignored) until
   * `POST /callbacks/{token}/succeed` or `/fail` wakes it, and its next run (the same attempt
   * number) reads the answer in {@link ItemContext.callback}. Not completed within `timeoutMs`
   * (1 ms to one year), or not heartbeated (`/heartbeat`) within `heartbeatTimeoutMs`, the attempt
   * fails with a `CallbackTimeoutError` and is retried by the job's policy. At most one wait per
   * attempt; a new wait replaces the item's last answer.
   * @throws {InvalidWaitError} a setting out of range, a payload over 8 KiB of JSON, a second wait in one attempt.
   * @throws {ItemLostError} the attempt no longer holds the item.
   */
  waitForCallback(options: WaitForCallbackOptions): Promise<CallbackHandle>;
  /**
   * Park the item for `ms` (0 to one year) with no run slot and no Lambda time; then return from
   * the work. Its next run (the same attempt number) has {@link ItemContext.slept} true. Woken by
   * the batch's run while one still works it (a sleep of up to 15 min, when it comes due), else by
   * the scheduler's pass (every minute on AWS), so such a wake may come up to a pass late.
   * @throws {InvalidWaitError} a time out of range, a second wait in one attempt.
   * @throws {ItemLostError} the attempt no longer holds the item.
   */
  sleep(ms: number): Promise<void>;
  /** {@link ItemContext.sleep} until `date` (the wait computed from the database clock's now). */
  sleepUntil(date: Date): Promise<void>;
  /**
   * How the callback this attempt waited on ended, in the run that goes on after it: `succeeded`
   * with the `result` posted, or `failed` with the `error` posted (the work decides what that
   * means: throw to fail the attempt), or in the attempt after it when that run died (a crash is
   * not a failure: the answer is not lost). Undefined in any other run: a later attempt (after
   * this one failed) starts over and waits again; what it must keep, the work stores with
   * `checkpoint`. (A timed-out callback fails its attempt before the work runs.)
   */
  callback: CallbackOutcome | undefined;
  /** Whether this run goes on after a sleep of the same attempt. */
  slept: boolean;
}

/** What {@link ItemContext.waitForCallback} takes. */
export interface WaitForCallbackOptions {
  /** ms until the callback times out (1 ms to {@link MAX_WAIT_MS}). */
  timeoutMs: number;
  /** ms a callback may go without a `/heartbeat` (1 ms to `timeoutMs`); default none. */
  heartbeatTimeoutMs?: number;
  /** Any JSON (at most {@link MAX_PROGRESS_BYTES} bytes), shown with the waiting item. */
  payload?: unknown;
}

/** A registered callback: its token, and its URL when the API's address is configured. */
export interface CallbackHandle {
  /** The signed token (HMAC, bound to the batch, item, attempt and this wait). */
  token: string;
  /** `{LEASEHOLD_CALLBACK_URL}/callbacks/{token}`; null when no address is configured. */
  url: string | null;
  /**
   * Withdraw the wait before the work returns (a token handed out in case the other side answers
   * "waiting", which it did not: `lambda-invoke`'s `callback`): the item does not park, and the
   * attempt may wait again. A completion stored before is ignored (never wakes the item); one
   * after answers 404 `callback_not_found`. Best effort: a wait the store could not drop is deleted by the expiry
   * pass at its time, and never wakes an item that did not wait on it.
   */
  cancel(): Promise<void>;
}

/** How a callback ended, as the item's next attempt reads it. */
export type CallbackOutcome =
  | { status: 'succeeded'; result: unknown }
  | { status: 'failed'; error: string }
  | { status: 'timedOut'; reason: 'timeout' | 'heartbeat' };

/** The longest wait (a callback's timeout, a sleep), ms: one year. */
export const MAX_WAIT_MS = 366 * 86_400_000;

/** Largest checkpoint state an item may store, bytes of JSON (64 KiB). */
export const MAX_CHECKPOINT_BYTES = 65_536;
/** Largest progress a heartbeat may report, bytes of JSON (8 KiB). */
export const MAX_PROGRESS_BYTES = 8_192;
/** Shortest and longest `itemStaleMs` a job or executor may set, ms (100 ms; 15 minutes). */
export const ITEM_STALE_LIMITS_MS = { min: 100, max: MAX_ITEM_TIMEOUT_MS } as const;

/** Runs one item; resolves to its JSON output or throws to fail this attempt. */
export type ItemWork = (item: ItemContext) => Promise<unknown>;

/**
 * One item's answer in a batched call ({@link ItemsWork}; docs/design.md, "Item batching"): its
 * output (JSON, stored as the item's output), or an `error` (not `undefined`) that fails this
 * attempt of this item only, as a throw of one item's work would: a `RetryAfterError` waits, an
 * error with `permanent: true` fails it at once, anything else is retried with backoff. A string
 * (or other non-Error value) is the attempt's error message.
 */
export type ItemCallResult = { key: string; output: unknown; error?: undefined } | { key: string; error: unknown };

/** What one batched call receives ({@link ItemsWork}). */
export interface ItemsCall {
  /** 1 to `itemsPerCall` items, each with its own key, input, attempt and signal, in claim order. */
  items: ItemContext[];
  /**
   * Aborted once every item of the call has been told to stop (its run stops, hands off or lost
   * its batch, or each item's timeout passed); pass it to the call's I/O.
   */
  signal: AbortSignal;
  batch: ItemContext['batch'];
}

/**
 * Runs several items of one batch in one call (docs/design.md, "Item batching"); resolves to one
 * {@link ItemCallResult} per item, by key, in any order. An item the answer leaves out, or
 * answers twice, fails this attempt saying so; keys that are not the call's are ignored (and
 * named in those errors). A throw (or a rejection) fails this attempt of every item of the call.
 */
export type ItemsWork = (call: ItemsCall) => Promise<readonly ItemCallResult[]>;

/** How to run a batch's items: the work plus per-job overrides of the runner's options. */
export interface Executor {
  work: ItemWork;
  /** Items run at once by one run (with `itemsPerCall`: calls at once). Default: the runner's `parallel`. */
  parallel?: number;
  /** Attempts per item before it is `failed`. Default: the runner's `attempts`. */
  attempts?: number;
  /** First backoff interval in ms, doubled per attempt; a retry waits a random time within it. Default: the runner's `backoffMs`. */
  backoffMs?: number;
  /** Longest backoff interval (so the longest retry delay) in ms. Default: the runner's `maxBackoffMs`. */
  maxBackoffMs?: number;
  /**
   * Most time one attempt may take, ms (docs/design.md, "Item timeouts"); a batch's own
   * `timeoutMs` wins. Default none.
   */
  timeoutMs?: number;
  /** Retry-After waits per item that use no attempt (docs/design.md, "Retry-After"). Default: the runner's (10). */
  maxRetryAfter?: number;
  /** A fleet-wide rate limit per key (docs/design.md, "Rate limits"). Default none. */
  rateLimit?: RateLimit;
  /** A concurrency pool its items count against (docs/design.md, "Concurrency pools"). Default none. */
  pool?: PoolSpec;
  /**
   * Item batching (docs/design.md, "Item batching"): most items one call of {@link Executor.workMany}
   * gets, 1 to 1,000 (`MAX_ITEMS_PER_CALL`). With it, items run through `workMany` (required), and
   * `parallel` counts calls at once, so a run holds up to `parallel × itemsPerCall` items
   * running. Attempts, retries, timeouts and results stay per item. Default none: `work`, one
   * item per call.
   */
  itemsPerCall?: number;
  /**
   * With `itemsPerCall`: most bytes of the items' `{ key, input }` as JSON that one call gets; an
   * item larger than this alone goes in a call of its own. A whole number of at least 1.
   * Default none (only `itemsPerCall` bounds a call).
   */
  bytesPerCall?: number;
  /**
   * With `itemsPerCall`: how long items wait for more to fill a call before a call with fewer
   * than `itemsPerCall` goes, ms, 0 to 10,000. Default 20 (`DEFAULT_GATHER_MS`).
   */
  gatherMs?: number;
  /** Runs a call of up to `itemsPerCall` items; required with `itemsPerCall`, unused without it. */
  workMany?: ItemsWork;
  /**
   * An attempt whose last heartbeat (`ctx.heartbeat`, `ctx.checkpoint`; or its start) is older
   * than this, ms (database clock), is recovered without waiting for its run to go stale: back to
   * pending with the attempt counted, or `failed` when its attempts are used up (docs/design.md,
   * "Item heartbeats and checkpoints"). Checked at each beat of the run. {@link ITEM_STALE_LIMITS_MS}.
   * Default none: items are never recovered for want of heartbeats.
   */
  itemStaleMs?: number;
}

/** Finds the executor for a stored batch (usually by its job name); undefined when unknown. */
export type Resolve = (batch: BatchInfo) => Executor | undefined;

/** How a run ended. */
export type RunOutcome =
  /** The batch finished by this run: all items done. */
  | 'succeeded'
  /**
   * The batch finished by this run with at least one failed item (more than it tolerates, when it
   * set a tolerance: then at once), or given up by it.
   */
  | 'failed'
  /** Its lease was taken over, or the batch was cancelled or finished by another run. */
  | 'lost'
  /** Stopped by `stop`/`close`: its run row deleted so another process joins at once. */
  | 'handed-off'
  /**
   * Left the batch while its other runs go on, using no attempt (docs/design.md, "Fan-out"):
   * no work was left for it (the target drops with it), or it was a surplus run above a
   * lowered `maxConcurrency`. Nothing replaces it.
   */
  | 'drained'
  /**
   * Handed off at the end of its time slice (`sliceMs`) because another tenant's batch was
   * waiting; no attempt was used (docs/design.md, "Tenant fairness").
   */
  | 'sliced'
  /**
   * Left as the batch's last run while only waiting items remain (docs/design.md, "Waiting items:
   * callbacks and sleeps"): the batch parks with no runs until a wake gives it one again.
   */
  | 'parked'
  /** The store kept failing; the batch stays unfinished for takeover. */
  | 'store-error';

/** Result of one run. */
export interface RunResult {
  batchId: string;
  runId: string;
  outcome: RunOutcome;
  /** Items this run moved to `done` or `failed`. */
  finishedItems: number;
  /**
   * Store statements this run sent (recovery, claims, moves, beats, finish, handoff), retries
   * included: its cost in round trips.
   */
  statements: number;
  error?: Error;
}

/** A CSV field delimiter, by name (as Step Functions' ItemReader `CSVDelimiter`): `,` `\t` `;` `|` or a space. */
export type CsvDelimiter = 'comma' | 'tab' | 'semicolon' | 'pipe' | 'space';

/**
 * How a CSV object is read (docs/design.md, "Sources and results"); every field optional:
 * `delimiter` (default `comma`), `header` (`first-row`, the default: the first record names the
 * columns; or the column names themselves, and the first record is data), `quote` (one ASCII
 * character that quotes a field, doubled inside it to stand for itself; default `"`; null: no
 * quoting).
 */
export interface CsvOptions {
  delimiter?: CsvDelimiter;
  header?: 'first-row' | string[];
  quote?: string | null;
}

/** One object as a start names it: read per line (`jsonl`) or per row (`csv`, with its options). */
export type ObjectSourceSpec = { bucket: string; key: string; format: 'jsonl' | 'csv'; keyColumn?: string } & CsvOptions;

/**
 * An S3 Inventory report as a start names it: its `manifest.json` (docs/api.md, "source"); one
 * item per object the report lists, read from its CSV parts, never listed.
 */
export type ManifestSourceSpec = { bucket: string; manifest: string };

/**
 * An inventory report as stored at start, from its manifest: the report's columns (`fileSchema`,
 * in order) and its parts (`files`: keys in `bucket`, compressed sizes in bytes), read in order.
 */
export type StoredManifestSource = ManifestSourceSpec & { columns: string[]; parts: { key: string; size: number }[] };

/**
 * A source as a start names it: a prefix (one item per object), one object (per line or row), or
 * an inventory report's manifest (one item per object it lists).
 */
export interface BatchSource {
  s3: { bucket: string; prefix: string } | ObjectSourceSpec | ManifestSourceSpec;
}

/**
 * A source as stored with its batch: an object's size (bytes) and ETag are fixed at start, and
 * on a versioned bucket its `versionId` too (every range reads that version).
 */
export interface StoredSource {
  s3:
    | { bucket: string; prefix: string }
    | (ObjectSourceSpec & { size: number; etag: string; versionId?: string })
    | StoredManifestSource;
}

/**
 * How an object's bytes become text, found from its first bytes and `Content-Encoding` on its
 * first page: `gzip` (decompressed as it streams) and the character set (`utf-8`, or UTF-16 by
 * its byte order mark, decoded to UTF-8). Such an object is read as one stream from its byte 0,
 * never by ranges.
 */
export interface SourceEncoding {
  gzip: boolean;
  charset: 'utf-8' | 'utf-16le' | 'utf-16be';
}

/**
 * One chain of a prefix's listing: the keys after `after` (exclusive) up to `until` (inclusive;
 * null: to the prefix's end), listed on from `token` once the chain has begun. Keys compare as
 * S3 orders them, by their UTF-8 bytes.
 */
export interface ListChain {
  /** The last key listed by this chain, or where it begins ('' : the prefix's start). */
  after: string;
  /** ListObjectsV2 continuation token; null before the chain's first call. */
  token: string | null;
  until: string | null;
}

/**
 * Where reading goes on. A prefix: its listing chains, each a disjoint key range (`split`: the
 * listing has been cut into them; `alphabet`: the characters of the first page's keys, which
 * place the cuts); `{ token }`, the single chain an earlier version stored, is read on as it
 * was. An object: the byte after the last complete line stored.
 */
export type SourceCursor =
  | { token: string | null }
  | { chains: ListChain[]; split: boolean; alphabet?: string }
  | {
      /** Byte offset of the first line not yet read. */
      offset: number;
      /** Lines (physical, `\n`-terminated) before `offset`. */
      line: number;
      /** Items (JSON Lines: lines with a value; CSV: data rows) before `offset`. */
      row: number;
      /** CSV: the header's columns, once read. */
      columns?: string[];
      /**
       * Absent: plain UTF-8 text, read by byte ranges, `offset` a byte of the object. Present: the
       * object is read as one stream (gzip, UTF-16) and `offset` is a byte of the text it decodes
       * to (UTF-8, after any byte order mark); a takeover reads it again from byte 0, decoding and
       * skipping to `offset`.
       */
      encoding?: SourceEncoding;
      /** An inventory report: the part (index into its manifest's `files`) the offset is in. */
      part?: number;
    };

/** Where a batch's results go: JSON Lines parts and a manifest under `prefix` + the batch id. */
export interface ResultsTarget {
  s3: { bucket: string; prefix: string };
}
