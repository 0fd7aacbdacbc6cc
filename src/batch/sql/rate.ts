// Statements of fleet-wide rate limits (leasehold_rate_buckets, migration 023; docs/design.md,
// "Rate limits"). One token bucket row per (job, key): a take refills it by the time since its last
// take at the limit's rate, capped at the burst, and grants what it holds, in one upsert per key
// under the row's lock, so two runs never spend one token. Every time is the database's clock:
// clock_timestamp(), read once the row is locked, not now() (the transaction's start): a take that
// began first but got the lock second would otherwise set updated_at back, and the next take would
// count the time between the two twice.
import type { Sql } from '../../store/index.js';

/**
 * One key's ask in a {@link takeTokens}: `want` tokens (at least 1), at the key's rate
 * (`perSecond`, unless the batch has its own) with at most `burst` tokens in its bucket.
 */
export interface TokenAsk {
  key: string;
  want: number;
  perSecond: number;
  burst: number;
}

/** One key's answer: `granted` tokens (0 to `want`), and when the next one is there. */
export interface TokenGrant {
  key: string;
  granted: number;
  /** ms until the bucket holds a whole token again (0 when it holds one now), or until its pause ends. */
  nextInMs: number;
  /** The rate the bucket was refilled at: the batch's own, else the key's (items per second). */
  rate: number;
}

/**
 * Take tokens from the buckets of `job`, one per key asked: each bucket first gains
 * `rate × (clock_timestamp() − updated_at)` tokens (at most its `burst`; a new bucket starts
 * full), then grants the whole tokens it holds, up to `want`, none while the key is paused
 * ({@link pauseKey}). The rate is the batch's own `rate_per_second` (a start's or a PATCH's) when
 * set, read in the statement, so a change reaches every run at its next take; else the ask's
 * `perSecond`. Keys are locked in key order, so concurrent takes never deadlock. Tokens granted
 * are spent: a run that dies holding some loses them, and none is ever granted twice.
 */
export async function takeTokens(sql: Sql, a: { batchId: string; job: string; asks: TokenAsk[] }): Promise<TokenGrant[]> {
  if (a.asks.length === 0) return [];
  const asks = [...a.asks].sort((x, y) => (x.key < y.key ? -1 : x.key > y.key ? 1 : 0));
  const rows = await sql<{ key: string; granted: number; tokens: number; rate: number; paused_ms: number }[]>`
    with br as (
      select rate_per_second as rate from leasehold_batches where id = ${a.batchId}
    ), w as (
      select v.key, v.want, v.burst, greatest(coalesce((select rate from br), v.rate), 1e-9) as rate
      from jsonb_to_recordset(${JSON.stringify(asks.map((k) => ({ key: k.key, want: k.want, rate: k.perSecond, burst: k.burst })))}::text::jsonb)
        as v(key text, want int, rate float8, burst float8)
    )
    insert into leasehold_rate_buckets as b (job, key, tokens, granted, updated_at)
    select ${a.job}, w.key, w.burst - least(w.want, floor(w.burst)), least(w.want, floor(w.burst)), now()
    from w order by w.key
    on conflict (job, key) do update set
      granted = case when b.paused_until > clock_timestamp() then 0 else least(
        (select want from w where w.key = b.key),
        floor(least((select burst from w where w.key = b.key),
          b.tokens + greatest(extract(epoch from clock_timestamp() - b.updated_at), 0) * (select rate from w where w.key = b.key)))
      ) end,
      tokens = least((select burst from w where w.key = b.key),
          b.tokens + greatest(extract(epoch from clock_timestamp() - b.updated_at), 0) * (select rate from w where w.key = b.key))
        - case when b.paused_until > clock_timestamp() then 0 else least(
          (select want from w where w.key = b.key),
          floor(least((select burst from w where w.key = b.key),
            b.tokens + greatest(extract(epoch from clock_timestamp() - b.updated_at), 0) * (select rate from w where w.key = b.key)))
        ) end,
      updated_at = greatest(b.updated_at, clock_timestamp())
    returning b.key, b.granted, b.tokens, (select rate from w where w.key = b.key) as rate,
      greatest(coalesce(extract(epoch from b.paused_until - clock_timestamp()) * 1000, 0), 0)::float8 as paused_ms`;
  return rows.map((r) => ({
    key: r.key,
    granted: r.granted,
    nextInMs: Math.max(r.tokens >= 1 ? 0 : Math.ceil(((1 - r.tokens) / r.rate) * 1000), Math.ceil(r.paused_ms)),
    rate: r.rate,
  }));
}

/**
 * Pause one key of `job` for `ms` across the fleet (an item of it was told to wait: Retry-After):
 * its bucket grants no token before `clock_timestamp() + ms`, which a later, shorter pause never
 * brings forward. A key with no bucket yet gets a full one, paused.
 */
export async function pauseKey(sql: Sql, a: { job: string; key: string; burst: number; ms: number }): Promise<void> {
  await sql`insert into leasehold_rate_buckets as b (job, key, tokens, updated_at, paused_until)
    values (${a.job}, ${a.key}, ${a.burst}::float8, clock_timestamp(), clock_timestamp() + make_interval(secs => ${a.ms}::float8 / 1000))
    on conflict (job, key) do update set
      paused_until = greatest(coalesce(b.paused_until, excluded.paused_until), excluded.paused_until)`;
}
