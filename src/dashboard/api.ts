// The page's calls to leasehold's HTTP API, all in one place, through the one API client
// (src/client/, browser-safe): the same origin serves the page and the API (`leasehold dev`), or
// forwards the API signed to a deployed stage (`leasehold dashboard --api URL`). Types are what
// the page reads; fields it does not know are kept and ignored, so newer APIs (a fleet summary,
// failure tolerance) keep working.

import type {
  ApiAction,
  ApiBatch,
  ApiFleet,
  ApiItem,
  ApiOutboxEndpoint,
  ApiOutboxStatus,
  ApiPool,
  ApiProcess,
  ApiRedrive,
  ApiSeries,
  ApiTenant,
  ApiUnit,
} from '../api/wire.js';
import { ApiClient } from '../client/index.js';

export { ApiCallError } from '../client/index.js';

/** Item states, in the order the page shows them (`waiting`: parked on a callback or a sleep). */
export const ITEM_STATES = ['done', 'failed', 'running', 'waiting', 'pending'] as const;
export type ItemState = (typeof ITEM_STATES)[number];
export type Counts = Record<ItemState, number>;

/** Fields an older API may lack: the page shows what it gets. */
type Tolerant<T, K extends keyof T> = Omit<T, K> & Partial<Pick<T, K>>;

// The shapes are the API's own (src/api/wire.ts), loosened where an older API answers less.
export type Batch = Tolerant<
  ApiBatch,
  | 'priority'
  | 'redrives'
  | 'toleratedFailures'
  | 'allowedFailures'
  | 'reason'
  | 'maxConcurrency'
  | 'target'
  | 'liveRuns'
  | 'pool'
  | 'completion'
>;
export type Item = ApiItem;
export type Series = ApiSeries;
export type Process = Tolerant<ApiProcess, 'role' | 'retiring' | 'replaces' | 'chainId' | 'chainStartedAt' | 'replacements'>;
/** The fleet summary newer APIs give with `GET /processes`. */
export type Fleet = Partial<ApiFleet>;
export type Unit = ApiUnit;
export type OutboxEndpoint = ApiOutboxEndpoint;
export type Outbox = ApiOutboxStatus;
export type Redrive = ApiRedrive;
export type Action = ApiAction;
export type TenantUsage = NonNullable<ApiTenant['usage']>;
/** A concurrency pool with its items in flight now (`GET /pools`, docs/api.md, "Pools"). */
export type Pool = ApiPool;

/** The client of the page's own origin (a relative path has no base outside a browser). */
const client = () => new ApiClient(location.origin);

export const api = {
  /** The batches, and how many days finished ones are kept (undefined from an API that does not say). */
  listBatches: (filter: { tenant?: string; status?: string; limit?: number }) =>
    client().listBatchesPage(filter) as Promise<{ batches: Batch[]; retentionDays?: number }>,
  getBatch: (id: string): Promise<Batch> => client().getBatch(id),
  /** The batch's progress stream, or undefined where the API serves none (then poll). */
  batchEvents: (id: string, signal?: AbortSignal): Promise<AsyncIterable<Batch> | undefined> =>
    client().batchEvents(id, signal) as Promise<AsyncIterable<Batch> | undefined>,
  cancelBatch: (id: string): Promise<Batch> => client().cancelBatch(id),
  pauseBatch: (id: string): Promise<Batch> => client().pauseBatch(id),
  resumeBatch: (id: string): Promise<Batch> => client().resumeBatch(id),
  /** `key` is the Idempotency-Key: a repeated click with the same key redrives once. */
  redriveBatch: (id: string, key: string): Promise<Batch & { redrive: Redrive; redriven: boolean }> =>
    client()
      .redriveBatch(id, key)
      .then(({ batch, redrive, redriven }) => ({ ...batch, redrive, redriven })),
  items: (id: string, page: { state?: ItemState; after?: string; limit: number }) => client().itemsPage(id, page),
  finished: (id: string, buckets: number): Promise<Series> => client().finishedSeries(id, buckets),
  processes: () => client().listProcesses() as Promise<{ processes: Process[]; fleet?: Fleet }>,
  concurrency: (): Promise<{ desired: number }> => client().getConcurrency(),
  setDesired: (desired: number): Promise<{ desired: number }> => client().setConcurrency(desired),
  units: (): Promise<Unit[]> => client().listUnits({ limit: 10_000 }),
  outbox: (tenant: string): Promise<Outbox> => client().outboxStatus(tenant),
  getAction: (id: string): Promise<Action> => client().getAction(id),
  /** Every pool by name (at most 1,000), with its items in flight now. */
  pools: (): Promise<Pool[]> => client().listPools(),
  /** One pool with its items in flight now and its busiest keys; an ApiCallError of 404 when there is none. */
  getPool: (name: string): Promise<Pool> => client().getPool(name),
  /** A tenant's usage over the last 30 days (undefined from an API that does not answer it). */
  tenantUsage: (tenant: string): Promise<TenantUsage | undefined> =>
    client()
      .getTenant(tenant)
      .then((t) => t.usage),
};
