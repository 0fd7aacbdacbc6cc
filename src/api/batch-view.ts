// A batch as the API shows it.
import { batchActivity, type BatchInfo } from '../batch/index.js';
import type { Sql } from '../store/index.js';
import { iso } from './respond.js';

/** A batch as the API shows it (timestamps as ISO 8601 strings). */
export interface BatchView {
  id: string;
  tenant: string;
  datasource: string;
  job: string;
  params: unknown;
  requestKey: string;
  /** 0 to 9; orders batches within their tenant only. */
  priority: number;
  status: BatchInfo['status'];
  total: number;
  counts: BatchInfo['counts'];
  ownerProcess: string | null;
  runs: number;
  /**
   * Why the batch ended when its items do not tell (it was given up, or more items failed than
   * tolerated); otherwise null.
   */
  reason: string | null;
  /** Failed items it tolerates as started (`{ count }` or `{ percent }`); null: none given. */
  toleratedFailures: BatchInfo['toleratedFailures'];
  /** Failed items allowed before it ends `failed` (the count, or floor(percent × total / 100)); null: none given. */
  allowedFailures: number | null;
  /** How many times it was redriven. */
  redrives: number;
  createdAt: string;
  beatAt: string | null;
  finishedAt: string | null;
  /** `GET /batches` and `GET /batches/{id}` only: time since it was created, ms (database clock). */
  ageMs?: number;
  /**
   * `GET /batches` and `GET /batches/{id}` only: items finished per second, over the last 10 s
   * while open, over its whole life once finished (database clock).
   */
  itemsPerSecond?: number;
}

/** The JSON shape of a batch in every response. */
export function batchView(b: BatchInfo): BatchView {
  return {
    id: b.id,
    tenant: b.tenant,
    datasource: b.datasource,
    job: b.job,
    params: b.params,
    requestKey: b.requestKey,
    priority: b.priority,
    status: b.status,
    total: b.total,
    counts: { ...b.counts },
    ownerProcess: b.ownerProcess,
    runs: b.runs,
    reason: b.reason,
    toleratedFailures: b.toleratedFailures,
    allowedFailures: b.allowedFailures,
    redrives: b.redrives,
    createdAt: iso(b.createdAt)!,
    beatAt: iso(b.beatAt),
    finishedAt: iso(b.finishedAt),
  };
}

/** Batch views with their `ageMs` and `itemsPerSecond`, read in one statement for all of them. */
export async function withActivity(sql: Sql, batches: BatchInfo[]): Promise<BatchView[]> {
  const activity = await batchActivity(sql, batches.map((b) => b.id));
  return batches.map((b) => ({ ...batchView(b), ...activity.get(b.id) }));
}
