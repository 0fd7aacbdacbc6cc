// Statements of fleet-wide rate limits (leasehold_rate_buckets, migration 023; docs/design.md,
// "Rate limits"; lending: migration 026). One token bucket row per (job, key): a take refills it by
// the time since its last take at the limit's rate, capped at the burst less what it lent, and
// grants what it holds, in one upsert per key under the row's lock, so two runs never spend one
// token. Every time is the database's clock: clock_timestamp(), read once the row is locked, not
// now() (the transaction's start): a take that began first but got the lock second would otherwise
// set updated_at back, and the next take would count the time between the two twice.
import type { Sql } from '../../store/index.js';

/**
 * One key's ask in a {@link takeTokens}: `want` tokens (at least 1), at the key's rate
 * (`perSecond`, unless the batch has its own) with at most `burst` tokens in its bucket; or,
 * when `lend` is above 0 and the bucket can lend it, a block of `lend` tokens held for longer.
 */
export interface TokenAsk {
  key: string;
  want: number;
  /** A block to hold for the lending time instead (0: none), at most a quarter of the burst to be granted. */
  lend: number;
  perSecond: number;
  burst: number;
}

/** One key's answer: `granted` tokens (0 to `want`, or `lend`), for how long, and when the next one is there. */
export interface TokenGrant {
  key: string;
  granted: number;
  /** How long the run may hold the granted tokens from its ask, ms: the short or the lending time. */
  holdMs: number;
  /** ms until the bucket holds a whole token again (0 when it holds one now), or until its pause ends. */
  nextInMs: number;
  /** The rate the bucket was refilled at: the batch's own, else the key's (items per second). */
  rate: number;
}

/**
 * Take tokens from the buckets of `job`, one per key asked: each bucket first gains
 * `rate × (clock_timestamp() − updated_at)` tokens, at most its `burst` less the tokens it lent
 * in this lending epoch and the one before (a new bucket starts full), then grants, none while
 * the key is paused ({@link pauseKey}): a block of `lend` tokens held for `lendMs` when the
 * bucket holds that many and its lent tokens stay at most half its burst; else the whole tokens
 * it holds, up to `want`, held for `holdMs`. An epoch is `lendMs` of the database clock, so a
 * lent block lapses before the epoch after next begins and is counted as long as it may be
 * held: held and lent tokens together never pass the burst (docs/design.md, "Rate limits").
 * A block is lent only when it is at most a quarter of what the rate (as the statement reads
 * it) gives in `lendMs`, so a lowered rate stops lending at once; a bucket that lent more than a
 * smaller burst now allows holds 0, not less, until its lent epochs pass.
 * The rate is the batch's own `rate_per_second` (a start's or a PATCH's) when set, read in the
 * statement, so a change reaches every run at its next take; else the ask's `perSecond`. Keys
 * are locked in key order, so concurrent takes never deadlock. Tokens granted are spent: a run
 * that dies holding some loses them, and none is ever granted twice.
 */
export async function takeTokens(
  sql: Sql,
  a: { batchId: string; job: string; asks: TokenAsk[]; holdMs: number; lendMs: number },
): Promise<TokenGrant[]> {
  if (a.asks.length === 0) return [];
  const asks = [...a.asks].sort((x, y) => (x.key < y.key ? -1 : x.key > y.key ? 1 : 0));
  const rows = await sql<{ key: string; granted: number; hold_ms: number; tokens: number; rate: number; paused_ms: number }[]>`
    with br as (
      select rate_per_second as rate from leasehold_batches where id = ${a.batchId}
    ), w as (
      select v.key, v.want, v.lend, v.burst, greatest(coalesce((select rate from br), v.rate), 1e-9) as rate
      from jsonb_to_recordset(${JSON.stringify(
        asks.map((k) => ({ key: k.key, want: k.want, lend: k.lend, rate: k.perSecond, burst: k.burst })),
      )}::text::jsonb)
        as v(key text, want int, lend int, rate float8, burst float8)
    ), fresh as (
      select w.*, w.lend > 0 and w.lend <= least(w.burst / 2, floor(w.burst), w.rate * ${a.lendMs}::float8 / 4000) as lends,
        floor(extract(epoch from clock_timestamp()) * 1000 / ${a.lendMs})::bigint as epoch
      from w
    )
    insert into leasehold_rate_buckets as b (job, key, tokens, granted, updated_at, lent_epoch, lent_now, hold_ms)
    select ${a.job}, f.key, f.burst - g.granted, g.granted, clock_timestamp(), f.epoch,
      case when f.lends then g.granted else 0 end, case when f.lends then ${a.lendMs}::int else ${a.holdMs}::int end
    from fresh f cross join lateral (
      select case when f.lends then f.lend else least(f.want, floor(f.burst)) end::int as granted
    ) g
    order by f.key
    on conflict (job, key) do update set (tokens, granted, updated_at, lent_epoch, lent_now, lent_before, hold_ms) = (
      select v.level - d.granted, d.granted, greatest(b.updated_at, t.at), t.epoch,
        l.now + case when d.lends then d.granted else 0 end, l.before,
        case when d.lends then ${a.lendMs}::int else ${a.holdMs}::int end
      from w
        cross join lateral (
          select x.at, floor(extract(epoch from x.at) * 1000 / ${a.lendMs})::bigint as epoch,
            coalesce(b.paused_until > x.at, false) as paused
          from (select clock_timestamp() as at) x
        ) t
        cross join lateral (
          select case when b.lent_epoch = t.epoch then b.lent_now else 0 end as now,
            case when b.lent_epoch = t.epoch then b.lent_before when b.lent_epoch = t.epoch - 1 then b.lent_now else 0 end as before
        ) l
        cross join lateral (
          select greatest(least(w.burst - l.now - l.before, b.tokens + greatest(extract(epoch from t.at - b.updated_at), 0) * w.rate), 0) as level
        ) v
        cross join lateral (
          select w.lend > 0 and w.lend <= w.rate * ${a.lendMs}::float8 / 4000 and not t.paused and floor(v.level) >= w.lend
            and l.now + l.before + w.lend <= w.burst / 2 as lends
        ) c
        cross join lateral (
          select c.lends, case when t.paused then 0 when c.lends then w.lend else least(w.want, greatest(floor(v.level), 0)) end::int as granted
        ) d
      where w.key = b.key
    )
    returning b.key, b.granted, b.hold_ms, b.tokens, (select rate from w where w.key = b.key) as rate,
      greatest(coalesce(extract(epoch from b.paused_until - clock_timestamp()) * 1000, 0), 0)::float8 as paused_ms`;
  return rows.map((r) => ({
    key: r.key,
    granted: r.granted,
    holdMs: r.hold_ms,
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
