// What every collaborator of a run shares (docs/design.md, "The run, inside"): the run's lease
// (batch and run id, so every statement is fenced on it), its retried store call and statement
// count, why it stops, and the wake-up of its loop. The run (run.ts) makes one per run.
import { LeaseholdError } from '../../errors.js';
import type { Sql } from '../../store/connect.js';
import { withTimeout } from '../../store/timeout.js';
import type { BatchInfo } from '../types.js';
import type { S3Counts } from '../usage.js';
import type { S3Client } from '@aws-sdk/client-s3';
import type { RunTrace } from './tracing.js';
import type { RunSettings } from './types.js';

/**
 * The store failed past its retries while the run moved items or beat: the run ends with outcome
 * `store-error` and this as its `error` (logged by the runner). Code `store_failure`.
 */
export class StoreFailure extends LeaseholdError {
  constructor(message: string) {
    super('store_failure', message);
  }
}

/**
 * A move statement that PostgreSQL refused for the data it carried (an item's value). Private to
 * the run: the completer catches it and stores the moves one by one, so it never reaches a caller
 * or a log (no `code`).
 */
export class UnstorableMoves extends Error {}

/** SQLSTATE classes of errors caused by the data a statement carries, not by the store. */
function isDataError(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^(22|54)/.test(code);
}

/**
 * Why a run stops: asked to (handoff), lost its lease, its slice ended with others waiting, or it
 * is a surplus run above a lowered `maxConcurrency`.
 */
export type StopReason = 'stop' | 'lost' | 'slice' | 'surplus';

/** One run's lease, store call and stop state, shared by its collaborators (one per run). */
export class RunContext {
  /** Why the run stops; undefined while it goes on. */
  reason: StopReason | undefined;
  /**
   * Set when the run stops because its source reader kept failing (the last error's text): its
   * handoff then counts as a stalled run, and the batch's `reason` keeps the error while it is
   * open (docs/design.md, "Stalled-run give-up").
   */
  stalledBy: string | undefined;
  /** The run is over: settling items are no longer written, the reader stops. */
  ended = false;
  /** Statements this run sent (its result's `statements`). */
  statements = 0;
  /** The run's spans, when an app registered a tracer provider (docs/design.md, "Traces"). */
  trace: RunTrace | undefined;
  /**
   * What the run used, counted in memory and stored once at its end (docs/design.md, "Usage and
   * cost"): item attempts started, and S3 requests sent through {@link s3}.
   */
  readonly usage = { items: 0, s3: { get: 0, put: 0, list: 0 } as S3Counts };
  private wakeUp: (() => void) | undefined;

  constructor(
    readonly sql: Sql,
    readonly s: RunSettings,
    readonly batch: BatchInfo,
    readonly id: string,
  ) {}

  /** The run lost its lease (or its batch ended): nothing more starts or is written. */
  markLost(): void {
    this.reason = 'lost';
    this.wake();
  }

  /** Wake the run's loop if it waits (an item settled, a timer fired, a beat landed). */
  wake(): void {
    const w = this.wakeUp;
    this.wakeUp = undefined;
    w?.();
  }

  /** Resolves at the next {@link wake}. */
  sleep(): Promise<void> {
    return new Promise<void>((resolve) => (this.wakeUp = resolve));
  }

  /** The S3 client of the run's source reads and results writes, its requests counted in {@link usage}. */
  async s3(): Promise<S3Client> {
    // The S3 helpers load with the first batch that names S3, as the client does.
    const { s3Client, countingS3 } = await import('../s3.js');
    return countingS3(await s3Client(this.s.s3), this.usage.s3);
  }

  /** Report a store error (never needed for correctness). */
  storeError(error: unknown, tries: number): void {
    this.s.onEvent({ type: 'store-error', batchId: this.batch.id, runId: this.id, error, tries });
  }

  /**
   * Runs a store statement, retrying store errors `moveTries` times in all, backoff doubling.
   * With `dataSensitive`, an error caused by the data the statement carries is not retried: it
   * is thrown at once as {@link UnstorableMoves} (its `cause` the database's error).
   * @throws {StoreFailure} once the tries are used up.
   */
  async store<T>(f: () => Promise<T>, onFail?: () => void, dataSensitive = false): Promise<T> {
    let wait = this.s.moveBackoffMs;
    for (let tries = 1; ; tries++) {
      try {
        this.statements++;
        return await withTimeout(f, this.s.storeTimeoutMs);
      } catch (error) {
        onFail?.();
        this.storeError(error, tries);
        if (dataSensitive && isDataError(error)) throw new UnstorableMoves('a value cannot be stored', { cause: error });
        if (tries >= this.s.moveTries) {
          throw new StoreFailure(`store failed ${tries} times on batch ${this.batch.id}: ${(error as Error)?.message ?? error}`);
        }
        await this.s.clock.sleep(wait);
        // Doubling, but never past a minute (a timer beyond 2^31 ms would fire at once).
        wait = Math.min(wait * 2, 60_000);
      }
    }
  }
}
