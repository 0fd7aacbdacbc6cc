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

/** Seconds a retired pool's statements in flight get before its connections are ended. */
const RETIRE_TIMEOUT_S = 5;

type AnyFn = (...args: unknown[]) => unknown;

/**
 * A pool that opens `open()` and replaces it with a new `open()` when a statement of it fails
 * with `25006` ({@link isReadOnlyError}). The returned object is used exactly like a postgres.js
 * pool (tagged templates, `unsafe`, `begin`, `savepoint`, helpers); `end()` ends the current pool
 * and any retired one still ending. `onReplace` is called once per replacement with the error that
 * caused it. The failing statement itself still fails: the caller retries it as it retries any
 * store error.
 */
export function replaceOnReadOnly(open: () => Sql, onReplace?: (error: unknown) => void): Sql {
  let current = open();
  let generation = 0;
  const retired = new Set<Promise<void>>();

  // Only an error of the current pool replaces it: the other statements in flight on a retired
  // pool fail the same way and must not retire its successor.
  const seen = (gen: number) => (error: unknown) => {
    if (gen !== generation || !isReadOnlyError(error)) return;
    const old = current;
    current = open();
    generation++;
    onReplace?.(error);
    const ending = old.end({ timeout: RETIRE_TIMEOUT_S }).catch(() => {});
    retired.add(ending);
    void ending.finally(() => retired.delete(ending)); // settles once old's connections are closed
  };

  const pool = (() => current) as unknown as AnyFn;
  return wrap(
    pool,
    () => current as unknown as AnyFn,
    () => seen(generation),
    async (options) => {
      await Promise.all([current.end(options), ...retired]);
    },
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
): AnyFn {
  const watched = (q: unknown, w: (error: unknown) => void): unknown => {
    // A postgres.js query is a lazy promise whose `reject` settles it (query.js); every failure of
    // a statement that runs goes through it. Fragments and helpers (`sql(name)`) have none.
    const query = q as { reject?: (e: unknown) => void; then?: unknown } | null;
    if (query && typeof query.then === 'function' && typeof query.reject === 'function') {
      const reject = query.reject;
      query.reject = (e: unknown) => {
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
        args[i] = (tx: AnyFn) =>
          fn(
            wrap(
              tx,
              () => tx,
              () => w,
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
