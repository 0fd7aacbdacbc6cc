// A pool whose server turned read-only is replaced (docs/design.md, "Database connections":
// failover). After a writer switch the old writer may live on as a reader (Aurora restarts it
// so; a proxy or a DNS answer cached before the switch keeps leading to it), and every
// connection the pool already holds stays open to it: each write then fails with `25006`
// read_only_sql_transaction while reads succeed, for as long as the connection lives. postgres.js
// closes a connection only when the server or the network does, and its `close()` leaves the
// slots of connections that were never opened unusable (3.4.9), so the pool itself is swapped:
// the first `25006` retires the whole pool (its statements in flight get a few seconds, then its
// connections are ended) and later statements open fresh connections, each with a fresh DNS
// look-up of the host.
import { AsyncLocalStorage } from 'node:async_hooks';
import type postgres from 'postgres';
import { isUnsupportedStartupParameter, PoolerModeError } from './errors.js';

/** leasehold's postgres.js client (`Sql` of connect.ts, named here to keep the imports one way). */
type Sql = postgres.Sql<Record<string, never>>;

/** SQLSTATE `25006` read_only_sql_transaction: a write reached a server that is read-only. */
export function isReadOnlyError(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === '25006';
}

/**
 * What a query was not answered in time reports to its pool's watcher (see {@link dropPoolOf}):
 * the connection it was sent on may be silent (its peer gone without a FIN or RST).
 */
const UNANSWERED = Object.freeze({ code: 'LEASEHOLD_UNANSWERED' });

/** The watcher of the pool each live query was made by (queries are weakly held). */
const watchers = new WeakMap<object, (error: unknown) => void>();

/**
 * When a query was handed to its pool (`queuedAt`) and when the server began on it (`sentAt`:
 * postgres.js marks a statement active once every statement before it on its connection was
 * answered), `performance.now()` ms. A statement waits between the two in the pool's queue or
 * pipelined behind a busy statement of its connection.
 */
interface Timing {
  queuedAt?: number;
  sentAt?: number;
  settled?: boolean;
  /** Its pool's progress: when the server last began on or answered any of the pool's statements. */
  pool?: { at: number };
}
const timings = new WeakMap<object, Timing>();

/** Each pool's progress (keyed by its map of statements in flight), see {@link Timing.pool}. */
const progressOf = new WeakMap<Map<object, number>, { at: number }>();

/** Queries made within a {@link trackQueries} call, by that call. */
const scopes = new AsyncLocalStorage<Set<object>>();

/**
 * Run `fn`, collecting every query a pool from {@link replaceOnReadOnly} makes within it (in its
 * async continuations too) into `made`: `withTimeout` cancels those a timed-out call left running.
 */
export function trackQueries<T>(fn: () => Promise<T>, made: Set<object>): Promise<T> {
  return scopes.run(made, fn);
}

/** Where a query of a pool from {@link replaceOnReadOnly} stands; `unknown` for any other promise. */
export type QueryState = 'unknown' | 'made' | 'queued' | 'running' | 'settled';

/**
 * Where `query` stands, and how long it has waited so far without the server working on it
 * (queued in its pool or pipelined behind another statement of its connection), ms.
 */
export function queryWait(query: object, now = performance.now()): { state: QueryState; queuedMs: number; stalledMs: number } {
  const t = timings.get(query);
  if (!t) return { state: 'unknown', queuedMs: 0, stalledMs: 0 };
  if (t.queuedAt === undefined) return { state: t.settled ? 'settled' : 'made', queuedMs: 0, stalledMs: 0 };
  const queuedMs = (t.sentAt ?? (t.settled ? t.queuedAt : now)) - t.queuedAt;
  const state = t.settled ? 'settled' : t.sentAt === undefined ? 'queued' : 'running';
  // Queued while its pool made no progress at all: no statement of the pool began or was
  // answered (a connection that cannot be opened, a silent server), not a busy pool.
  const stalledMs = state === 'queued' ? now - Math.max(t.queuedAt, t.pool?.at ?? -Infinity) : 0;
  return { state, queuedMs, stalledMs };
}

/** Cancel `query` on the server if it is a postgres.js query still waiting for its answer. */
export function cancelQuery(query: object): void {
  const t = timings.get(query);
  if (!t || t.settled) return;
  // A query still queued is rejected by its cancel (57014) at once: its caller gave up on it at
  // the timeout and may never read it, so the rejection is marked handled here. (The query was
  // executed when it was queued, so catch() sends nothing more.)
  (query as { catch?: (f: () => void) => unknown }).catch?.(() => {});
  const p = (query as { cancel?: () => Promise<void> | undefined }).cancel?.();
  // A cancel request that cannot reach the server fails on its own connection: nothing to do.
  if (p && typeof p.catch === 'function') p.catch(() => {});
}

/** Pools from {@link replaceOnReadOnly} not yet ended: each answers whether it has a statement unanswered for `ms`. */
const pools = new Set<(ms: number, endAfterMs: number) => void>();

/**
 * Retire every pool (see {@link dropPoolOf}) that has a statement sent at least `ms` ago and not
 * answered yet: for a timeout whose promise is not itself a query (an async function that ran
 * statements), so the pool it waited on is not known.
 */
export function dropPoolsWithUnanswered(ms: number, endAfterMs = RETIRE_TIMEOUT_S * 1000): void {
  for (const check of pools) check(ms, endAfterMs);
}

/**
 * Retire the pool that made `query` (a query of a pool from `connect`, or of one of its
 * transactions) as a read-only server's pool is retired: later statements open fresh
 * connections, and the old pool's connections are ended once their statements in flight are
 * answered, at most 5 s from now. For a statement not answered in time: postgres.js pipelines
 * statements onto busy connections and cancels only on the server, so a silent connection would
 * otherwise stay in the pool, with every statement sent to it waiting until TCP gives up
 * (minutes). Does nothing for any other promise, or when that pool was retired already.
 */
export function dropPoolOf(query: unknown, endAfterMs = RETIRE_TIMEOUT_S * 1000): boolean {
  const w = query && typeof query === 'object' ? watchers.get(query) : undefined;
  w?.({ ...UNANSWERED, endAfterMs });
  return w !== undefined;
}

/** Least time between two replacements of a pool whose server keeps refusing writes, ms. */
const READ_ONLY_MIN_GAP_MS = 500;
/** Largest cap of the jittered wait between two such replacements, ms. */
const READ_ONLY_MAX_WAIT_MS = 8_000;
/** A read-only episode ends once its probe answered this long after the last 25006, ms. */
const READ_ONLY_CLEAR_MS = 1_000;

/** What a query's watcher is told when the query was answered (see `watch`). */
const ANSWERED = Object.freeze({ code: 'LEASEHOLD_ANSWERED' });

/** Seconds a read-only server's retired pool's statements in flight get before its connections are ended. */
const RETIRE_TIMEOUT_S = 5;

const isUnanswered = (error: unknown): error is { code: string; endAfterMs?: number } =>
  (error as { code?: unknown } | null)?.code === UNANSWERED.code;

type AnyFn = (...args: unknown[]) => unknown;

/** Told of every error of a pool's statements; answers the error the statement fails with. */
type Watcher = (error: unknown) => unknown;

/**
 * A pool that opens `open()` and replaces it with a new `open()` when a statement of it fails
 * with `25006` ({@link isReadOnlyError}). The returned object is used exactly like a postgres.js
 * pool (tagged templates, `unsafe`, `begin`, `savepoint`, helpers); `end()` ends the current pool
 * and any retired one still ending. `onReplace` is called once per replacement with the error that
 * caused it ({@link dropPoolOf} replaces it too). The failing statement itself still fails: the caller retries it as it retries any
 * store error.
 */
export function replaceOnReadOnly(
  open: (max?: number) => Sql,
  onReplace?: (error: unknown) => void,
  random: () => number = Math.random,
): Sql {
  let current = open();
  let generation = 0;
  const retired = new Set<Promise<void>>();
  // Statements of the current pool sent and not yet answered, with when they were sent.
  let inFlight = new Map<object, number>();
  // A read-only episode: from the first 25006 until a pool answers for READ_ONLY_CLEAR_MS with
  // none (see `readOnly`).
  let episode: { replaces: number; nextAt: number; lastAt: number } | undefined;

  const swap = (next: Sql, endAfterS: number) => {
    const old = current;
    current = next;
    generation++;
    inFlight = new Map();
    const ending = old.end({ timeout: endAfterS }).catch(() => {});
    retired.add(ending);
    void ending.finally(() => retired.delete(ending)); // settles once old's connections are closed
  };

  // While the server keeps refusing writes, every new pool met 25006 again at once and was
  // replaced: a reconnect storm against the new writer's neighbour (issue 38: 11 new connections
  // a second per container). So a 25006 replaces the pool with a probe of one connection, at
  // most once per wait drawn with full jitter from a doubling cap, never sooner than
  // READ_ONLY_MIN_GAP_MS: at most 2 new connections a second. The statements meanwhile meet
  // 25006 on the probe's one connection, opening none. `onReplace` hears of the episode once.
  const readOnly = (error: unknown) => {
    const now = performance.now();
    if (!episode) {
      episode = { replaces: 0, nextAt: 0, lastAt: now };
      onReplace?.(error);
    }
    episode.lastAt = now;
    if (now < episode.nextAt) return;
    episode.replaces++;
    const capMs = Math.min(READ_ONLY_MAX_WAIT_MS, READ_ONLY_MIN_GAP_MS * 2 ** Math.min(episode.replaces, 20));
    episode.nextAt = now + Math.max(READ_ONLY_MIN_GAP_MS, random() * capMs);
    swap(open(1), RETIRE_TIMEOUT_S);
  };

  // Only an error of the current pool replaces it: the other statements in flight on a retired
  // pool fail the same way and must not retire its successor.
  // A pooler that refuses the pool's startup settings refuses every connection: the first such
  // error is kept, and every later statement fails with it at once (see PoolerModeError).
  let refusal: PoolerModeError | undefined;
  const seen = (gen: number) => (error: unknown) => {
    if (error === ANSWERED) {
      // The episode is over once the probe answered with no 25006 for a while: back to a full pool.
      if (episode && gen === generation && performance.now() - episode.lastAt >= READ_ONLY_CLEAR_MS) {
        episode = undefined;
        swap(open(), RETIRE_TIMEOUT_S);
      }
      return error;
    }
    if (isUnsupportedStartupParameter(error)) return (refusal ??= new PoolerModeError(error));
    if (gen !== generation) return error;
    if (isReadOnlyError(error)) {
      readOnly(error);
      return error;
    }
    if (!isUnanswered(error)) return error;
    onReplace?.(error);
    swap(open(episode ? 1 : undefined), (error.endAfterMs ?? RETIRE_TIMEOUT_S * 1000) / 1000);
    return error;
  };

  const check = (ms: number, endAfterMs: number) => {
    const before = performance.now() - ms;
    for (const sent of inFlight.values()) {
      if (sent <= before) return seen(generation)({ ...UNANSWERED, endAfterMs });
    }
  };
  pools.add(check);
  const pool = (() => current) as unknown as AnyFn;
  return wrap(
    pool,
    () => current as unknown as AnyFn,
    () => seen(generation),
    async (options) => {
      pools.delete(check);
      await Promise.all([current.end(options), ...retired]);
    },
    () => inFlight,
    () => refusal,
  ) as unknown as Sql;
}

/**
 * A proxy of a postgres.js `sql` function (the pool's, or a transaction's): every query it makes
 * reports its rejection to `watcher()`'s callback before it rejects, and transactions and
 * savepoints hand their callbacks a wrapped `sql` of their own.
 */
function wrap(
  target: AnyFn,
  resolve: () => AnyFn,
  watcher: () => Watcher,
  end?: (options?: { timeout?: number }) => Promise<void>,
  tracked: () => Map<object, number> = () => new Map(),
  refused: () => unknown = () => undefined,
): AnyFn {
  const watched = (q: unknown, w: Watcher): unknown => watch(q, w, tracked(), refused);
  const scoped = (kind: 'begin' | 'savepoint') => {
    return (...args: unknown[]) => {
      const w = watcher();
      const s = resolve() as unknown as Record<string, AnyFn>;
      const i = args.findIndex((a) => typeof a === 'function');
      if (i >= 0) {
        const fn = args[i] as AnyFn;
        const live = tracked();
        args[i] = (tx: AnyFn) =>
          fn(
            wrap(
              tx,
              () => tx,
              () => w,
              undefined,
              () => live,
              refused,
            ),
          );
      }
      const refusal = refused();
      if (refusal !== undefined) return Promise.reject(refusal);
      return ((s[kind] as AnyFn)(...args) as Promise<unknown>).then(undefined, (e: unknown) => {
        throw w(e);
      });
    };
  };
  return new Proxy(target, {
    apply: (_t, thisArg, args) => {
      const w = watcher();
      return watched(Reflect.apply(resolve(), thisArg, args), w);
    },
    get: (_t, prop) => {
      // Only what the wrapped `sql` has: callers probe for `savepoint` to learn whether they are
      // inside a transaction.
      const own = Reflect.get(resolve(), prop) as unknown;
      if (typeof own !== 'function') return own;
      if (prop === 'begin' || prop === 'savepoint') return scoped(prop);
      if (prop === 'unsafe' || prop === 'file') {
        return (...args: unknown[]) => {
          const w = watcher();
          const s = resolve() as unknown as Record<string, AnyFn>;
          return watched((s[prop] as AnyFn)(...args), w);
        };
      }
      if (prop === 'end' && end) return end;
      return own;
    },
    has: (_t, prop) => Reflect.has(resolve(), prop),
  });
}

/**
 * Instrument `q` when it is a postgres.js query, once it runs: its rejection is reported to `w`
 * first, it joins the {@link trackQueries} scope it was made in, and its {@link Timing} is kept,
 * with `live` holding it from when the server begins on it until it settles. A fragment nested
 * in another statement never runs, so it costs only the wrapper of its `handle` (a move builds
 * its statement from a dozen fragments: instrumenting each one eagerly was a measurable part of
 * a run's CPU; docs/development.md, "Where an item's time goes").
 */
function watch(q: unknown, w: Watcher, live: Map<object, number>, refused: () => unknown): unknown {
  // A postgres.js query is a lazy promise whose `reject` settles it (query.js); every failure of
  // a statement that runs goes through it. Fragments and helpers (`sql(name)`) have none.
  const query = q as { reject?: (e: unknown) => void; then?: unknown } | null;
  if (!query || typeof query.then !== 'function' || typeof query.reject !== 'function') return q;
  const scope = scopes.getStore();
  const q2 = query as unknown as { handle?: () => unknown; executed?: boolean };
  const handle = q2.handle;
  if (typeof handle !== 'function') {
    instrument(query as Watched, w, live, scope);
    return q;
  }
  // `handle` runs on the query's first then/catch/finally/execute and on each later one; it
  // sends the statement once (`executed`).
  let timing: Timing | undefined;
  q2.handle = function (this: unknown) {
    if (!timing) {
      timing = instrument(query as Watched, w, live, scope);
      if (!q2.executed) timing.queuedAt = performance.now();
    }
    // A pool its pooler refuses opens no more connections: its statements fail at once.
    const refusal = refused();
    if (refusal !== undefined && !q2.executed) {
      q2.executed = true;
      return void query.reject!(refusal);
    }
    return handle.call(this);
  };
  return q;
}

/** A postgres.js query as {@link instrument} changes it. */
type Watched = { reject: (e: unknown) => void; resolve?: (v: unknown) => void };

/** Does what {@link watch} says for a query about to run; returns its {@link Timing}. */
function instrument(query: Watched, w: Watcher, live: Map<object, number>, scope: Set<object> | undefined): Timing {
  watchers.set(query, w);
  scope?.add(query);
  // Timed from when the server begins on it (docs/design.md, "Database connections": a busy
  // pool is not a silent connection): postgres.js sets `active` on the statement its
  // connection is answering now; one queued in the pool or pipelined behind another waits
  // unset.
  let pool = progressOf.get(live);
  if (!pool) progressOf.set(live, (pool = { at: -Infinity }));
  const timing: Timing = { pool };
  timings.set(query, timing);
  let active = false;
  Object.defineProperty(query, 'active', {
    configurable: true,
    enumerable: true,
    get: () => active,
    set: (v: boolean) => {
      active = v;
      if (v && timing.sentAt === undefined && !timing.settled) {
        timing.sentAt = performance.now();
        pool.at = timing.sentAt;
        live.set(query, timing.sentAt);
      }
    },
  });
  // Kept wrapped when reassigned: a cursor's next() puts its own resolve and reject on the query
  // for each page (query.js), and its last resolve is the one that settles it.
  wrapped(query, 'resolve', (resolveQ) => (v: unknown) => {
    timing.settled = true;
    pool.at = performance.now();
    live.delete(query);
    w(ANSWERED);
    resolveQ(v);
  });
  wrapped(query, 'reject', (reject) => (e: unknown) => {
    timing.settled = true;
    live.delete(query);
    reject(w(e));
  });
  return timing;
}

/**
 * Make `query[key]` (a settling function) an accessor that returns what is assigned to it wrapped
 * by `wrap`, the function it holds now included. Nothing when it holds none.
 */
function wrapped(query: Watched, key: 'resolve' | 'reject', wrap: (settle: (v: unknown) => void) => (v: unknown) => void): void {
  const current = query[key];
  if (typeof current !== 'function') return;
  let fn = wrap(current);
  Object.defineProperty(query, key, {
    configurable: true,
    enumerable: true,
    get: () => fn,
    set: (next: (v: unknown) => void) => {
      fn = wrap(next);
    },
  });
}
