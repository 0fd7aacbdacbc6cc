// Item heartbeats and checkpoints of one run (docs/design.md, "Item heartbeats and
// checkpoints"): what `ctx.heartbeat` and `ctx.checkpoint` write for each attempt the run
// executes, and which attempts may have gone stale. The executor (executor.ts) owns the
// attempts; this keeps their writes ordered, coalesced and bounded.
import type { Sql } from '../../store/connect.js';
import { withTimeout } from '../../store/timeout.js';
import type { Clock } from '../../clock.js';
import { CheckpointTooLargeError, ItemLostError, UnstorableStateError } from '../errors.js';
import { beatItem } from '../sql/heartbeats.js';
import { MAX_CHECKPOINT_BYTES, MAX_PROGRESS_BYTES } from '../types.js';
import { encodeOutput } from '../values.js';

/** The reason an attempt's timer is aborted with: the attempt is over (nobody reads it). */
const ATTEMPT_OVER = 'attempt over';

/** Most time between two heartbeat writes of one attempt, ms, when `itemStaleMs` allows it. */
export const HEARTBEAT_SPACING_MS = 1_000;

/** What {@link ItemBeats} needs of its run. */
export interface ItemBeatsDeps {
  sql: Sql;
  batchId: string;
  runId: string;
  clock: Clock;
  /** The job's `itemStaleMs`, ms; undefined: attempts are never stale. */
  staleMs: number | undefined;
  storeTimeoutMs: number;
  /** The run's retried store call (checkpoints are retried like moves). */
  store: <T>(f: () => Promise<T>) => Promise<T>;
  /** A heartbeat write was sent (the run counts its statements). */
  sent: () => void;
  /** A heartbeat write failed (reported, never thrown). */
  onError: (error: unknown) => void;
}

/** The functions one attempt's work receives, and the run's end of it. */
export interface AttemptBeats {
  heartbeat(progress?: unknown): void;
  checkpoint(state: unknown): Promise<void>;
  /**
   * The attempt is over: no further write starts; resolves once the writes in flight landed, to
   * whether a checkpoint with a state (not null) was stored during the attempt.
   */
  settle(): Promise<boolean>;
}

interface Attempt {
  key: string;
  claimed: number;
  /** Local clock time it started. */
  startedAt: number;
  /** Local clock time the last write that landed was sent; 0 when none. */
  beatAt: number;
  /** Writes of this attempt, one after the other. */
  chain: Promise<unknown>;
  /** Progress waiting for the next heartbeat write (JSON text, or null to clear). */
  progress: string | null | undefined;
  /** A heartbeat write is due (its timer runs or it waits in the chain). */
  beatQueued: boolean;
  lastSentAt: number;
  /** Ends the wait before a spaced heartbeat write; made with the first such wait. */
  timer: AbortController | undefined;
  checkpointed: boolean;
  over: boolean;
  abort: (reason: unknown) => void;
}

/**
 * JSON text of a checkpoint state or a progress value, within `limit` bytes.
 * @throws {CheckpointTooLargeError} | {UnstorableStateError}
 */
export function encodeState(what: 'checkpoint' | 'progress', value: unknown, limit: number): string | null {
  const e = encodeOutput(value, Number.POSITIVE_INFINITY);
  if (e.error !== undefined) throw new UnstorableStateError(what, e.error.replace(/^its output /, ''));
  if (e.json !== null && e.json.length > limit / 3) {
    const bytes = Buffer.byteLength(e.json);
    if (bytes > limit) throw new CheckpointTooLargeError(what, bytes, limit);
  }
  return e.json;
}

/**
 * The heartbeats and checkpoints of one run's attempts. Each attempt's writes go one after the
 * other (a checkpoint never overtakes an earlier heartbeat); heartbeats are coalesced, the newest
 * progress winning, at most one every {@link HEARTBEAT_SPACING_MS} (a quarter of `itemStaleMs`
 * when shorter). A write that finds the attempt no longer holding its item aborts the attempt.
 */
export class ItemBeats {
  private readonly attempts = new Map<string, Attempt>();
  private readonly spacingMs: number;
  private lastSweep = 0;

  constructor(private readonly d: ItemBeatsDeps) {
    this.spacingMs = d.staleMs === undefined ? HEARTBEAT_SPACING_MS : Math.min(HEARTBEAT_SPACING_MS, d.staleMs / 4);
  }

  /** Start tracking an attempt that starts now; `abort` aborts its work (its own signal). */
  track(key: string, claimed: number, abort: (reason: unknown) => void): AttemptBeats {
    const now = this.d.clock.now();
    const a: Attempt = {
      key,
      claimed,
      startedAt: now,
      beatAt: 0,
      chain: Promise.resolve(),
      progress: undefined,
      beatQueued: false,
      lastSentAt: 0,
      timer: undefined,
      checkpointed: false,
      over: false,
      abort,
    };
    this.attempts.set(key, a);
    return {
      heartbeat: (progress?: unknown) => this.heartbeat(a, progress),
      checkpoint: (state: unknown) => this.checkpoint(a, state),
      settle: async () => {
        this.end(a);
        await a.chain.catch(() => undefined);
        return a.checkpointed;
      },
    };
  }

  /**
   * The attempts that may be stale: started at least `itemStaleMs` ago with no write landed
   * within it, by the run's clock (the statement decides by the database's). At most one sweep
   * per half `itemStaleMs`; empty without `itemStaleMs`.
   */
  candidates(): { key: string; claimed: number }[] {
    const staleMs = this.d.staleMs;
    if (staleMs === undefined || this.attempts.size === 0) return [];
    const now = this.d.clock.now();
    if (now - this.lastSweep < staleMs / 2) return [];
    const out = [];
    for (const a of this.attempts.values()) {
      if (now - Math.max(a.startedAt, a.beatAt) >= staleMs) out.push({ key: a.key, claimed: a.claimed });
    }
    if (out.length > 0) this.lastSweep = now;
    return out;
  }

  /** The attempt of `key` was recovered: it is over, and its work is aborted with `reason`. */
  abandon(key: string, reason: unknown): void {
    const a = this.attempts.get(key);
    if (!a) return;
    this.end(a);
    a.abort(reason);
  }

  private end(a: Attempt): void {
    a.over = true;
    // With a reason: aborting without one builds a DOMException (and its stack) per attempt.
    a.timer?.abort(ATTEMPT_OVER);
    if (this.attempts.get(a.key) === a) this.attempts.delete(a.key);
  }

  private heartbeat(a: Attempt, progress: unknown): void {
    if (progress !== undefined) {
      const json = encodeState('progress', progress, MAX_PROGRESS_BYTES);
      if (a.over) return;
      a.progress = json;
    }
    if (a.over || a.beatQueued) return;
    a.beatQueued = true;
    const wait = a.lastSentAt + this.spacingMs - this.d.clock.now();
    const send = () => {
      a.beatQueued = false;
      if (a.over) return;
      void this.write(a, undefined).catch(this.d.onError);
    };
    if (wait <= 0) return send();
    a.timer ??= new AbortController();
    void this.d.clock.sleep(wait, a.timer.signal).then(send);
  }

  private async checkpoint(a: Attempt, state: unknown): Promise<void> {
    const json = encodeState('checkpoint', state, MAX_CHECKPOINT_BYTES);
    if (a.over) throw new ItemLostError(a.key, a.claimed);
    const stored = await this.write(a, json, true);
    if (!stored) throw new ItemLostError(a.key, a.claimed);
    if (json !== null) a.checkpointed = true;
  }

  /**
   * Queue one write of the attempt (its pending progress, and `checkpoint` when given) after its
   * earlier ones; resolves to whether it landed. A checkpoint is retried as the run's moves are.
   */
  private write(a: Attempt, checkpoint: string | null | undefined, retried = false): Promise<boolean> {
    const run = async (): Promise<boolean> => {
      if (a.over && checkpoint === undefined) return false;
      const progress = a.progress;
      a.progress = undefined;
      const sentAt = this.d.clock.now();
      a.lastSentAt = sentAt;
      const beat = {
        batchId: this.d.batchId,
        run: this.d.runId,
        key: a.key,
        claimed: a.claimed,
        progress,
        checkpoint,
      };
      let stored: boolean;
      if (retried) {
        stored = await this.d.store(() => beatItem(this.d.sql, beat));
      } else {
        this.d.sent();
        stored = await withTimeout(() => beatItem(this.d.sql, beat), this.d.storeTimeoutMs);
      }
      if (stored) a.beatAt = Math.max(a.beatAt, sentAt);
      else if (!a.over) {
        // Recovered meanwhile, or the run lost its batch: the attempt is over here too.
        this.end(a);
        a.abort(new ItemLostError(a.key, a.claimed));
      }
      return stored;
    };
    const p = a.chain.then(run);
    a.chain = p.catch(() => undefined);
    return p;
  }
}
