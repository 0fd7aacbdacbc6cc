// Cluster-wide catalog races during deploys (docs/design.md, "Serverless runtime": the migrate
// function). Roles live in the cluster, not in a database or a schema, and two migrations —
// of two schemas, two databases or two stages sharing one server — may create or grant the same
// role at the same moment. PostgreSQL then refuses the slower one with an error that says nothing
// about the outcome the caller wanted (the role exists, the grant is there): these are retried.
import type postgres from 'postgres';

/** A transaction of leasehold's postgres.js client. */
type Tx = postgres.TransactionSql<Record<string, never>>;

/**
 * Whether `error` is a concurrent change of a shared catalog row by another transaction, which
 * succeeds when tried again once that transaction has ended:
 * - `23505` on a system catalog's unique index (`pg_authid_rolname_index` for `create role`,
 *   `pg_namespace_nspname_index` for `create schema`, `pg_extension_name_index`,
 *   `pg_auth_members_role_member_index` for `grant role`): both checked "absent", both inserted;
 * - `42710` duplicate_object, `42P06` duplicate_schema: the same, seen after the other committed;
 * - `XX000` "tuple concurrently updated" / "tuple concurrently deleted": two `grant`s (or `alter
 *   role`s) rewrote the same catalog row (an ACL, a role's settings);
 * - `40P01` deadlock_detected and `40001` serialization_failure between such statements.
 */
export function isCatalogRace(error: unknown): boolean {
  const e = error as { code?: unknown; constraint_name?: unknown; message?: unknown } | null;
  const code = e?.code;
  if (code === '42710' || code === '42P06' || code === '40P01' || code === '40001') return true;
  if (code === '23505') return typeof e?.constraint_name === 'string' && e.constraint_name.startsWith('pg_');
  if (code === 'XX000') return typeof e?.message === 'string' && /tuple concurrently (updated|deleted)/.test(e.message);
  return false;
}

/** Most tries of one catalog statement (or one migration transaction) lost to a race. */
export const CATALOG_RACE_TRIES = 10;

/** A wait before try `n + 1` (n ≥ 1): 10 ms doubling, at most 320 ms, with full jitter. */
export function catalogRaceDelayMs(n: number, random: () => number = Math.random): number {
  return Math.round(random() * Math.min(320, 10 * 2 ** (n - 1)));
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Run `fn` in a savepoint of `tx`; when it fails with a catalog race ({@link isCatalogRace}),
 * roll back to the savepoint, wait a jittered moment and run it again (each statement reads the
 * catalog afresh, so the retry sees what the other transaction committed), up to
 * {@link CATALOG_RACE_TRIES} tries.
 * @throws the last error when every try lost a race, or at once any other error.
 */
export async function retryCatalogRace<T>(tx: Tx, fn: (s: Tx) => Promise<T>): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return (await tx.savepoint((s) => fn(s as unknown as Tx))) as T;
    } catch (e) {
      if (!isCatalogRace(e) || n >= CATALOG_RACE_TRIES) throw e;
      await sleep(catalogRaceDelayMs(n));
    }
  }
}
