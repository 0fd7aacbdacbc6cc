// The page's calls to leasehold's HTTP API, all in one place: the same origin serves the page and
// the API (`leasehold dev`), or forwards the API signed to a deployed stage (`leasehold
// dashboard --api URL`). Types are what the page reads; fields it does not know are kept and
// ignored, so newer APIs (a fleet summary, failure tolerance) keep working.

/** Item states, in the order the page shows them. */
export const ITEM_STATES = ['done', 'failed', 'running', 'pending'] as const;
export type ItemState = (typeof ITEM_STATES)[number];
export type Counts = Record<ItemState, number>;

export interface Batch {
  id: string;
  tenant: string;
  datasource: string;
  job: string;
  params: unknown;
  requestKey: string;
  /** 0–9, within its tenant; absent from an older API. */
  priority?: number;
  status: 'open' | 'succeeded' | 'failed' | 'cancelled';
  total: number;
  counts: Counts;
  ownerProcess: string | null;
  runs: number;
  redrives?: number;
  createdAt: string;
  beatAt: string | null;
  finishedAt: string | null;
  ageMs?: number;
  itemsPerSecond?: number;
  /** Shown when the API has it: how many failed items the batch tolerates (null: none given). */
  toleratedFailures?: { count?: number; percent?: number } | null;
  /** Failed items allowed before the batch ends failed: the count, or floor(percent × total / 100). */
  allowedFailures?: number | null;
  /** Why the batch ended when its items do not tell (given up, more items failed than tolerated). */
  reason?: string | null;
}

export interface Item {
  key: string;
  state: ItemState;
  attempts: number;
  output: unknown;
  error: string | null;
}

export interface Series {
  from: string;
  bucketMs: number;
  buckets: { at: string; done: number; failed: number }[];
}

export interface Process {
  id: string;
  hostname: string;
  version: string;
  startedAt: string;
  expiresAt: string;
  live: boolean;
  units: number;
  weight: number;
  role?: string;
  retiring?: boolean;
}

/** The fleet summary newer APIs give with `GET /processes`. */
export interface Fleet {
  desired?: number;
  live?: number;
  coming?: number;
  retiring?: number;
  batch?: number;
  totalWeight?: number;
  fairShare?: number;
}

export interface Unit {
  tenant: string;
  shard: number;
  job: string;
  weight: number;
  owner: string | null;
  claimedAt: string | null;
}

export interface OutboxEndpoint {
  url: string;
  backlog: number;
  oldest: { id: number; enqueuedAt: string; ageMs: number } | null;
  failures: number;
  lastError: { message: string; at: string } | null;
  lastDeliveredAt: string | null;
}

export interface Outbox {
  tenant: string;
  shards: number;
  endpoints: OutboxEndpoint[];
}

export interface Redrive {
  number: number;
  items: number;
  idempotencyKey: string | null;
  at: string;
}

/** An error answer of the API (or no answer: status 0). */
export class ApiError extends Error {
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
    throw new ApiError(0, 'unreachable', `the API does not answer (${(e as Error).message})`);
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
    throw new ApiError(res.status, err?.code ?? `http_${res.status}`, err?.message ?? `HTTP ${res.status}`);
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
  listBatches: (filter: { tenant?: string; status?: string; limit?: number }) =>
    call<{ batches: Batch[] }>('GET', withQuery(paths.batches(), filter)).then((r) => r.batches),
  getBatch: (id: string) => call<Batch>('GET', paths.batch(id)),
  cancelBatch: (id: string) => call<Batch>('POST', `${paths.batch(id)}/cancel`),
  /** `key` is the Idempotency-Key: a repeated click with the same key redrives once. */
  redriveBatch: (id: string, key: string) =>
    call<Batch & { redrive: Redrive; redriven: boolean }>('POST', `${paths.batch(id)}/redrive`, undefined, { 'idempotency-key': key }),
  items: (id: string, page: { state?: ItemState; after?: string; limit: number }) =>
    call<{ items: Item[]; next: string | null }>('GET', withQuery(`${paths.batch(id)}/items`, page)),
  finished: (id: string, buckets: number) => call<Series>('GET', withQuery(`${paths.batch(id)}/finished`, { buckets })),
  processes: () => call<{ processes: Process[]; fleet?: Fleet }>('GET', paths.processes()),
  concurrency: () => call<{ desired: number }>('GET', paths.concurrency()),
  setDesired: (desired: number) => call<{ desired: number }>('PUT', paths.concurrency(), { desired }),
  units: () => call<{ units: Unit[] }>('GET', withQuery(paths.units(), { limit: 10_000 })).then((r) => r.units),
  outbox: (tenant: string) => call<Outbox>('GET', paths.outbox(tenant)),
};
