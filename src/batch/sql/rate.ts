// Statements of fleet-wide rate limits (leasehold_rate_buckets, migration 023; docs/design.md,
// "Rate limits"). One token bucket row per (job, key): a take refills it by the time since its last
// take at the limit's rate, capped at the burst, and grants what it holds, in one upsert per key
// under the row's lock, so two runs never spend one token. Every time is the database's clock:
// clock_timestamp(), read once the row is locked, not now() (the transaction's start): a take that
// began first but got the lock second would otherwise set updated_at back, and the next take would
// count the time between the two twice.
import type { Sql } from '../../store/index.js';

/** One key's ask in a {@link takeTokens}: `want` tokens (at least 1). */
export interface TokenAsk {
  key: string;
  want: number;
}

/** One key's answer: `granted` tokens (0 to `want`), and when the next one is there. */
export interface TokenGrant {
  key: string;
  granted: number;
  /** ms until the bucket holds a whole token again (0 when it holds one now). */
  nextInMs: number;
  /** The rate the bucket was refilled at: the batch's own, else the job's (items per second). */
  rate: number;
}

/**
 * Take tokens from the buckets of `job`, one per key asked: each bucket first gains
 * `perSecond × (now() − updated_at)` tokens (at most `burst`; a new bucket starts full), then
 * grants the whole tokens it holds, up to `want`. The batch's own `rate_per_second` (a start's or a
 * PATCH's) wins over `perSecond` when set, read in the statement, so a change reaches every run at
 * its next take. Keys are locked in key order, so concurrent takes never deadlock. Tokens granted
 * are spent: a run that dies holding some loses them, and none is ever granted twice.
 */
export async function takeTokens(
  sql: Sql,
  a: { batchId: string; job: string; perSecond: number; burst: number; asks: TokenAsk[] },
): Promise<TokenGrant[]> {
  if (a.asks.length === 0) return [];
  const asks = [...a.asks].sort((x, y) => (x.key < y.key ? -1 : x.key > y.key ? 1 : 0));
  const rows = await sql<{ key: string; granted: number; tokens: number; rate: number }[]>`
    with r as (
      select greatest(coalesce((select rate_per_second from leasehold_batches where id = ${a.batchId}), ${a.perSecond}::float8), 1e-9) as rate
    ), w as (
      select v.key, v.want from jsonb_to_recordset(${JSON.stringify(asks)}::text::jsonb) as v(key text, want int)
    )
    insert into leasehold_rate_buckets as b (job, key, tokens, granted, updated_at)
    select ${a.job}, w.key, ${a.burst}::float8 - least(w.want, floor(${a.burst}::float8)), least(w.want, floor(${a.burst}::float8)), now()
    from w order by w.key
    on conflict (job, key) do update set
      granted = least(
        (select want from w where w.key = b.key),
        floor(least(${a.burst}::float8, b.tokens + greatest(extract(epoch from clock_timestamp() - b.updated_at), 0) * (select rate from r)))
      ),
      tokens = least(${a.burst}::float8, b.tokens + greatest(extract(epoch from clock_timestamp() - b.updated_at), 0) * (select rate from r))
        - least(
          (select want from w where w.key = b.key),
          floor(least(${a.burst}::float8, b.tokens + greatest(extract(epoch from clock_timestamp() - b.updated_at), 0) * (select rate from r)))
        ),
      updated_at = greatest(b.updated_at, clock_timestamp())
    returning b.key, b.granted, b.tokens, (select rate from r) as rate`;
  return rows.map((r) => ({
    key: r.key,
    granted: r.granted,
    nextInMs: r.tokens >= 1 ? 0 : Math.ceil(((1 - r.tokens) / r.rate) * 1000),
    rate: r.rate,
  }));
}
