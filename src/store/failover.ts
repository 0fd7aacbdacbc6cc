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
import type postgres from 'postgres';

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

/** Pools from {@link replaceOnReadOnly} not yet ended: each answers whether it has a statement unanswered for `ms`. */
const pools = new Set<(ms: number) => void>();

/**
 * Retire every pool (see {@link dropPoolOf}) that has a statement sent at least `ms` ago and not
 * answered yet: for a timeout whose promise is not itself a query (an async function that ran
 * statements), so the pool it waited on is not known.
 */
export function dropPoolsWithUnanswered(ms: number): void {
  for (const check of pools) check(ms);
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
export function dropPoolOf(query: unknown): boolean {
  const w = query && typeof query === 'object' ? watchers.get(query) : undefined;
  w?.(UNANSWERED);
  return w !== undefined;
}

/** Seconds a retired pool's statements in flight get before its connections are ended. */
const RETIRE_TIMEOUT_S = 5;

type AnyFn = (...args: unknown[]) => unknown;

/**
 * A pool that opens `open()` and replaces it with a new `open()` when a statement of it fails
 * with `25006` ({@link isReadOnlyError}). The returned object is used exactly like a postgres.js
 * pool (tagged templates, `unsafe`, `begin`, `savepoint`, helpers); `end()` ends the current pool
 * and any retired one still ending. `onReplace` is called once per replacement with the error that
 * caused it ({@link dropPoolOf} replaces it too). The failing statement itself still fails: the caller retries it as it retries any
 * store error.
 */
export function replaceOnReadOnly(open: () => Sql, onReplace?: (error: unknown) => void): Sql {
  let current = open();
  let generation = 0;
  const retired = new Set<Promise<void>>();
  // Statements of the current pool sent and not yet answered, with when they were sent.
  let inFlight = new Map<object, number>();

  // Only an error of the current pool replaces it: the other statements in flight on a retired
  // pool fail the same way and must not retire its successor.
  const seen = (gen: number) => (error: unknown) => {
    if (gen !== generation || !(isReadOnlyError(error) || error === UNANSWERED)) return;
    const old = current;
    current = open();
    generation++;
    inFlight = new Map();
    onReplace?.(error);
    const ending = old.end({ timeout: RETIRE_TIMEOUT_S }).catch(() => {});
    retired.add(ending);
    void ending.finally(() => retired.delete(ending)); // settles once old's connections are closed
  };

  const check = (ms: number) => {
    const before = Date.now() - ms;
    for (const sent of inFlight.values()) {
      if (sent <= before) return seen(generation)(UNANSWERED);
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
  watcher: () => (error: unknown) => void,
  end?: (options?: { timeout?: number }) => Promise<void>,
  tracked: () => Map<object, number> = () => new Map(),
): AnyFn {
  const watched = (q: unknown, w: (error: unknown) => void): unknown => {
    // A postgres.js query is a lazy promise whose `reject` settles it (query.js); every failure of
    // a statement that runs goes through it. Fragments and helpers (`sql(name)`) have none.
    const query = q as { reject?: (e: unknown) => void; then?: unknown } | null;
    if (query && typeof query.then === 'function' && typeof query.reject === 'function') {
      watchers.set(query, w);
      // In flight from when postgres.js sends it (`handle`, on its first `then`; fragments
      // nested in another statement never are) until it settles.
      const live = tracked();
      const q2 = query as unknown as { handle?: () => unknown; executed?: boolean; resolve?: (v: unknown) => void };
      const handle = q2.handle;
      if (typeof handle === 'function') {
        q2.handle = function (this: unknown) {
          if (!q2.executed) live.set(query, Date.now());
          return handle.call(this);
        };
      }
      const resolveQ = q2.resolve;
      if (typeof resolveQ === 'function') {
        q2.resolve = (v: unknown) => {
          live.delete(query);
          resolveQ(v);
        };
      }
      const reject = query.reject;
      query.reject = (e: unknown) => {
        live.delete(query);
        w(e);
        reject(e);
      };
    }
    return q;
  };
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
            ),
          );
      }
      return ((s[kind] as AnyFn)(...args) as Promise<unknown>).then(undefined, (e: unknown) => {
        w(e);
        throw e;
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
