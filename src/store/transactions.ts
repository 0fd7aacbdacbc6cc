// A transaction whose connection died stops there (issue 38, item 8). postgres.js 3.4.9 rejects
// `sql.begin()` when the reserved connection closes, but the transaction's callback goes on
// running: a statement it sends after the pool reopened that connection runs on the new session,
// outside any transaction (it commits on its own), or inside another transaction that now holds
// the connection; and once the callback returns, the driver sends the dead transaction's `commit`
// or `rollback` there too, which ends the other transaction early: its first half commits, or is
// thrown away, without it knowing (porsager/postgres#1204, #1215, #1216). Seen in
// test/store/transactions-under-load.test.ts, until the driver is fixed (the proposed change is
// docs/upstream/postgres-transaction-after-close.md).
import type postgres from 'postgres';

/** A pool as `connect` makes it (the type of connect.ts, written here so neither imports the other). */
type Sql = postgres.Sql<Record<string, never>>;

type AnyFn = (...args: unknown[]) => unknown;

/** Settles never: the work of a transaction whose connection is gone. */
const never = new Promise<never>(() => {});

/**
 * `pool` whose transactions (`begin`, with or without options) end with their connection: once
 * the `begin` promise has rejected because the connection closed, each statement the callback
 * starts (`tx\`…\``, `tx.unsafe`, `tx.savepoint`) throws that error at once, and the driver is
 * never given the callback's outcome, so it sends no `commit` or `rollback` for it. The `begin`
 * promise itself settles as before (rejected with `CONNECTION_CLOSED`); the callback's own
 * promise is left to rejection by its statements.
 */
export function endingWithConnection(pool: Sql): Sql {
  const begin = (...args: unknown[]) => {
    const i = args.findIndex((a) => typeof a === 'function');
    if (i < 0) return (pool.begin as unknown as AnyFn)(...args);
    const fn = args[i] as (tx: Sql) => unknown;
    let lost: { error: unknown } | undefined;
    let done = false;
    args[i] = async (tx: Sql) => {
      let result: unknown;
      try {
        const x = await Promise.resolve().then(() => fn(guarded(tx, () => lost)));
        result = Array.isArray(x) ? await Promise.all(x) : x;
      } catch (e) {
        // Its connection gone, the transaction's end is not the driver's to send.
        if (lost) return never;
        throw e;
      } finally {
        done = true;
      }
      return lost ? never : result;
    };
    const run = (pool.begin as unknown as AnyFn)(...args) as Promise<unknown>;
    // A rejection while the callback still runs: the connection closed under it (a rejection
    // after it returned is its own, or its commit's, and changes nothing).
    run.catch((error: unknown) => void (done || (lost = { error })));
    return run;
  };
  return new Proxy(pool, {
    get: (target, prop) => (prop === 'begin' ? begin : Reflect.get(target, prop)),
  });
}

/** `tx` whose statements throw `lost()`'s error once there is one (helpers such as `tx(name)` still work). */
function guarded(tx: Sql, lost: () => { error: unknown } | undefined): Sql {
  const check = () => {
    const l = lost();
    if (l) throw l.error;
  };
  const isStatement = (a: unknown) => Array.isArray(a) && 'raw' in a;
  return new Proxy(tx, {
    apply: (target, self, args: unknown[]) => {
      if (isStatement(args[0])) check();
      return Reflect.apply(target as unknown as AnyFn, self, args);
    },
    get: (target, prop) => {
      const value = Reflect.get(target, prop) as unknown;
      if ((prop === 'unsafe' || prop === 'savepoint' || prop === 'file') && typeof value === 'function')
        return (...a: unknown[]) => {
          check();
          return (value as AnyFn).apply(target, a);
        };
      return value;
    },
  });
}
