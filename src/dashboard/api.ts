// The page's calls to leasehold's HTTP API, all in one place: the same origin serves the page and
// the API (`leasehold dev`), or forwards the API signed to a deployed stage (`leasehold
// dashboard --api URL`). Types are what the page reads; fields it does not know are kept and
// ignored, so newer APIs (a fleet summary, failure tolerance) keep working.

import type {
  ApiBatch,
  ApiFleet,
  ApiItem,
  ApiOutboxEndpoint,
  ApiOutboxStatus,
  ApiProcess,
  ApiRedrive,
  ApiSeries,
  ApiUnit,
} from '../api/wire.js';

/** Item states, in the order the page shows them. */
export const ITEM_STATES = ['done', 'failed', 'running', 'pending'] as const;
export type ItemState = (typeof ITEM_STATES)[number];
export type Counts = Record<ItemState, number>;

/** Fields an older API may lack: the page shows what it gets. */
type Tolerant<T, K extends keyof T> = Omit<T, K> & Partial<Pick<T, K>>;

// The shapes are the API's own (src/api/wire.ts), loosened where an older API answers less.
export type Batch = Tolerant<
  ApiBatch,
  'priority' | 'redrives' | 'toleratedFailures' | 'allowedFailures' | 'reason' | 'maxConcurrency' | 'target' | 'liveRuns'
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

/**
 * An error answer of the API (or no answer: status 0), in the browser page. Not a LeaseholdError:
 * the page is bundled on its own and imports nothing but the API's wire types; `code` is the
 * API's own error code, passed through.
 */
export class ApiCallError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The API's paths. Batch routes are global today; tenant-scoped routes
 * (`/tenants/{tenant}/batches…`) are a change here only.
 */
const paths = {
  batches: () => '/batches',
  batch: (id: string) => `/batches/${encodeURIComponent(id)}`,
  processes: () => '/processes',
  concurrency: () => '/concurrency',
  units: () => '/units',
  outbox: (tenant: string) => `/tenants/${encodeURIComponent(tenant)}/outbox`,
};

async function call<T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> {
  let res: Response;
  try {
    res = await fetch(path, {
      method,
      headers: { accept: 'application/json', ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiCallError(0, 'unreachable', `the API does not answer (${(e as Error).message})`);
  }
  const text = await res.text();
  let data: unknown;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    data = undefined;
  }
  if (!res.ok) {
    const err = (data as { error?: { code?: string; message?: string } } | undefined)?.error;
    throw new ApiCallError(res.status, err?.code ?? `http_${res.status}`, err?.message ?? `HTTP ${res.status}`);
  }
  return data as T;
}

function withQuery(path: string, query: Record<string, string | number | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

export const api = {
  /** The batches, and how many days finished ones are kept (undefined from an API that does not say). */
  listBatches: (filter: { tenant?: string; status?: string; limit?: number }) =>
    call<{ batches: Batch[]; retentionDays?: number }>('GET', withQuery(paths.batches(), filter)),
  getBatch: (id: string) => call<Batch>('GET', paths.batch(id)),
  cancelBatch: (id: string) => call<Batch>('POST', `${paths.batch(id)}/cancel`),
  /** `key` is the Idempotency-Key: a repeated click with the same key redrives once. */
  redriveBatch: (id: string, key: string) =>
    call<Batch & { redrive: Redrive; redriven: boolean }>('POST', `${paths.batch(id)}/redrive`, undefined, {
      'idempotency-key': key,
    }),
  items: (id: string, page: { state?: ItemState; after?: string; limit: number }) =>
    call<{ items: Item[]; next: string | null }>('GET', withQuery(`${paths.batch(id)}/items`, page)),
  finished: (id: string, buckets: number) => call<Series>('GET', withQuery(`${paths.batch(id)}/finished`, { buckets })),
  processes: () => call<{ processes: Process[]; fleet?: Fleet }>('GET', paths.processes()),
  concurrency: () => call<{ desired: number }>('GET', paths.concurrency()),
  setDesired: (desired: number) => call<{ desired: number }>('PUT', paths.concurrency(), { desired }),
  units: () => call<{ units: Unit[] }>('GET', withQuery(paths.units(), { limit: 10_000 })).then((r) => r.units),
  outbox: (tenant: string) => call<Outbox>('GET', paths.outbox(tenant)),
};
