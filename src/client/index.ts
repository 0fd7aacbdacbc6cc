// The client of leasehold's HTTP API (docs/api.md), one for every reader: the `leasehold`
// command (src/cli/), `leasehold dev` (src/local/) and the dashboard page (src/dashboard/, bundled
// for the browser). So it is browser-safe: `fetch` and URL only, no Node.js module; it imports
// only the API's wire types (src/api/wire.ts) and the error base (src/errors.ts), both free of
// imports themselves.
import type {
  ApiAction,
  ApiBatch,
  ApiConcurrency,
  ApiFleet,
  ApiItem,
  ApiOutboxMessage,
  ApiOutboxStatus,
  ApiPool,
  ApiProcess,
  ApiRedrive,
  ApiSeries,
  ApiTenant,
  ApiUnit,
  ApiUnitsPut,
} from '../api/wire.js';
import { LeaseholdError } from '../errors.js';

export type * from '../api/wire.js';

/**
 * A call of the HTTP API that failed: the API's error answer (`status` and its `code`, see
 * docs/api.md), or `unreachable` (status 0) when no answer came.
 */
export class ApiCallError extends LeaseholdError {
  constructor(
    readonly status: number,
    code: string,
    message: string,
  ) {
    super(code, message);
  }
}

/** What {@link ApiClient} takes besides its base URL. */
export interface ApiClientOptions {
  /**
   * Use the tenant-scoped batch routes (`/tenants/{tenant}/batches…`, which a per-tenant IAM
   * policy allows) for every batch call: another tenant's batch then answers 404. Default: the
   * unscoped routes.
   */
  tenant?: string;
  /**
   * Said in parentheses when the API cannot be reached (the CLI: "is `leasehold dev`
   * running?"). Default none.
   */
  unreachableHint?: string;
}

/** A path with the query's set values (undefined and empty ones left out). */
function withQuery(path: string, query: Record<string, string | number | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/** A job of `GET /jobs`: its name and description. */
export interface ApiJobName {
  name: string;
  description?: string;
}

/** A page of a batch's items, in key order; `next` is the `after` of the next page (null: none). */
export interface ApiItemPage {
  items: ApiItem[];
  next: string | null;
}

/** A client of leasehold's HTTP API; every method is one request (`items` one per page). */
export class ApiClient {
  /**
   * @param baseUrl the API's base URL (in the browser page: the page's own origin).
   * @param options see {@link ApiClientOptions}.
   */
  constructor(
    readonly baseUrl: string,
    readonly options: ApiClientOptions = {},
  ) {}

  /** `/batches` + `rest`, under `/tenants/{tenant}` when the client is scoped to a tenant. */
  private batches(rest = ''): string {
    const t = this.options.tenant;
    return `${t === undefined ? '' : `/tenants/${encodeURIComponent(t)}`}/batches${rest}`;
  }

  /** `/batches/{id}` + `rest`, scoped as {@link batches}. */
  private batch(id: string, rest = ''): string {
    return this.batches(`/${encodeURIComponent(id)}${rest}`);
  }

  /** The same client scoped to `tenant`. */
  forTenant(tenant: string): ApiClient {
    return new ApiClient(this.baseUrl, { ...this.options, tenant });
  }

  /**
   * One request; the answer's status and JSON body.
   * @throws {ApiCallError} an error answer (its status and code), or none (status 0, `unreachable`).
   */
  private async call<T>(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; data: T }> {
    let res: Response;
    try {
      res = await fetch(new URL(path, this.baseUrl), {
        method,
        headers: {
          accept: 'application/json',
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...headers,
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      const hint = this.options.unreachableHint;
      throw new ApiCallError(
        0,
        'unreachable',
        `cannot reach the leasehold API at ${this.baseUrl}${hint ? ` (${hint})` : ''}: ${(e as Error).cause ?? (e as Error).message}`,
      );
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
      throw new ApiCallError(
        res.status,
        err?.code ?? 'http_' + res.status,
        err?.message ?? `HTTP ${res.status}: ${text.slice(0, 200)}`,
      );
    }
    return { status: res.status, data: data as T };
  }

  /**
   * `POST /tenants/{tenant}/batches`: the start's own tenant's route, so that a caller whose IAM
   * policy allows that tenant's paths only can start batches too.
   */
  async startBatch(input: {
    tenant: string;
    datasource: string;
    job: string;
    /** The job's params; absent with a `source` whose job takes none. */
    params?: unknown;
    requestKey?: string;
    priority?: number;
    toleratedFailures?: { count: number } | { percent: number };
    maxConcurrency?: number;
    /** The items' timeout, ms. */
    timeoutMs?: number;
    /** The batch's own fleet-wide rate limit, items per second per key. */
    rateLimit?: { perSecond: number };
    /** The concurrency pool its items count against (a pool that exists: {@link ApiClient.setPool}). */
    pool?: string;
    /** Early completion: `{ minSucceeded }` or `'firstSucceeded'`. */
    completion?: { minSucceeded: number } | 'firstSucceeded';
    /** Items read from S3 by the workers (docs/api.md, "Sources"), in place of the job's expansion. */
    source?: unknown;
    /** Where the results go when the batch ends (docs/api.md, "Results"). */
    results?: unknown;
    /** Where its `Batch Finished` event is POSTed as a signed webhook when it ends (docs/api.md, `notify`). */
    notify?: { url: string };
    /** A deadline for the whole batch: an ISO 8601 instant. */
    deadline?: string;
    /** A deadline in ms from the start. */
    deadlineMs?: number;
  }): Promise<{ batch: ApiBatch; created: boolean }> {
    const { tenant, ...body } = input;
    const { status, data } = await this.call<{ batch: ApiBatch } | ApiBatch>('POST', this.forTenant(tenant).batches(), body);
    const batch = 'batch' in data ? data.batch : data;
    // 201 a new batch, 202 a new one read from a source, 200 the one this request key started.
    return { batch, created: status !== 200 };
  }

  /** `GET /batches/{id}`. */
  async getBatch(id: string): Promise<ApiBatch> {
    const { data } = await this.call<{ batch: ApiBatch } | ApiBatch>('GET', this.batch(id));
    return 'batch' in data ? data.batch : data;
  }

  /**
   * `GET /batches/{id}/events` (docs/api.md, "Progress stream"): the batch at each `progress`
   * event (with `ratePerSecond`, items finished per second), the last one once it finished.
   * Resolves to undefined when the API does not serve the stream (a deployed stage, an older
   * server, an error answer), so the caller polls instead; the iteration ends when the stream
   * does (a lost connection included: the caller then polls to the end).
   */
  async batchEvents(id: string, signal?: AbortSignal): Promise<AsyncIterable<ApiBatch & { ratePerSecond: number }> | undefined> {
    let res: Response;
    try {
      res = await fetch(new URL(this.batch(id, '/events'), this.baseUrl), { headers: { accept: 'text/event-stream' }, signal });
    } catch {
      return undefined;
    }
    if (!res.ok || !res.body || !(res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
      await res.body?.cancel().catch(() => undefined);
      return undefined;
    }
    const body = res.body;
    return {
      async *[Symbol.asyncIterator]() {
        const decoder = new TextDecoder();
        let text = '';
        try {
          for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
            text += decoder.decode(chunk, { stream: true });
            let cut: number;
            while ((cut = text.indexOf('\n\n')) >= 0) {
              const block = text.slice(0, cut);
              text = text.slice(cut + 2);
              const event = /^event: (.*)$/m.exec(block)?.[1];
              const data = /^data: (.*)$/m.exec(block)?.[1];
              if (event === 'progress' && data) yield JSON.parse(data) as ApiBatch & { ratePerSecond: number };
              if (event === 'end') return;
            }
          }
        } catch {
          // A lost stream ends the iteration; the caller polls.
        }
      },
    };
  }

  /**
   * `PATCH /batches/{id}` `{ maxConcurrency?, rateLimit?, deadline?, deadlineMs? }`: change how
   * many runs the open batch may have at once, its rate limit (items per second per key), or its
   * deadline (an ISO 8601 instant, null to clear, or ms from its start), while it runs.
   */
  async updateBatch(
    id: string,
    change: { maxConcurrency?: number; rateLimit?: { perSecond: number }; deadline?: string | null; deadlineMs?: number },
  ): Promise<ApiBatch> {
    const { data } = await this.call<ApiBatch>('PATCH', this.batch(id), change);
    return data;
  }

  /** `GET /batches`: newest first, and how many days finished ones are kept (absent from an older API). */
  async listBatchesPage(filter: {
    tenant?: string;
    status?: string;
    limit?: number;
  }): Promise<{ batches: ApiBatch[]; retentionDays?: number }> {
    const { data } = await this.call<{ batches: ApiBatch[]; retentionDays?: number }>('GET', withQuery(this.batches(), filter));
    return data;
  }

  /** `GET /batches`: the batches only. */
  async listBatches(filter: { tenant?: string; status?: string; limit?: number }): Promise<ApiBatch[]> {
    return (await this.listBatchesPage(filter)).batches;
  }

  /** `POST /batches/{id}/pause`: its runs hand off within a beat; nothing runs until it resumes. */
  async pauseBatch(id: string): Promise<ApiBatch> {
    const { data } = await this.call<ApiBatch>('POST', this.batch(id, '/pause'));
    return data;
  }

  /** `POST /batches/{id}/resume`: workers are sent to it again. */
  async resumeBatch(id: string): Promise<ApiBatch> {
    const { data } = await this.call<ApiBatch>('POST', this.batch(id, '/resume'));
    return data;
  }

  /**
   * `POST /actions`: make a bulk action (or answer the one `requestKey` made); the API works it
   * for a while before it answers, so `finishedAt` may still be null (follow {@link getAction}).
   */
  async startAction(body: {
    action: ApiAction['action'];
    filter: Record<string, unknown>;
    requestKey: string;
  }): Promise<ApiAction & { created: boolean }> {
    const { data } = await this.call<ApiAction & { created: boolean }>('POST', '/actions', body);
    return data;
  }

  /** `GET /actions/{id}`. */
  async getAction(id: string): Promise<ApiAction> {
    const { data } = await this.call<ApiAction>('GET', `/actions/${encodeURIComponent(id)}`);
    return data;
  }

  /** `POST /batches/{id}/cancel`. */
  /**
   * `POST /callbacks/{token}/succeed` (`result`: any JSON), `/fail` (`error`: a text) or
   * `/heartbeat`: complete or heartbeat a waiting item's callback (docs/api.md, "Callbacks").
   */
  async completeCallback(
    token: string,
    c: { action: 'succeed'; result: unknown } | { action: 'fail'; error: string } | { action: 'heartbeat' },
  ): Promise<{ batchId: string; key: string; outcome: 'completed' | 'repeated' | 'heartbeat'; woken: boolean }> {
    const path = `/callbacks/${encodeURIComponent(token)}/${c.action}`;
    const body = c.action === 'succeed' ? { result: c.result } : c.action === 'fail' ? { error: c.error } : undefined;
    const { data } = await this.call<{
      batchId: string;
      key: string;
      outcome: 'completed' | 'repeated' | 'heartbeat';
      woken: boolean;
    }>('POST', path, body);
    return data;
  }

  async cancelBatch(id: string): Promise<ApiBatch> {
    const { data } = await this.call<{ batch: ApiBatch } | ApiBatch>('POST', this.batch(id, '/cancel'));
    return 'batch' in data ? data.batch : data;
  }

  /**
   * `POST /batches/{id}/redrive`: the batch's failed items back to pending, the batch open again.
   * With `idempotencyKey` (sent as `Idempotency-Key`), a repeat answers the first redrive.
   */
  async redriveBatch(id: string, idempotencyKey?: string): Promise<{ batch: ApiBatch; redrive: ApiRedrive; redriven: boolean }> {
    const headers: Record<string, string> = idempotencyKey === undefined ? {} : { 'idempotency-key': idempotencyKey };
    const { data } = await this.call<ApiBatch & { redrive: ApiRedrive; redriven: boolean }>(
      'POST',
      this.batch(id, '/redrive'),
      undefined,
      headers,
    );
    const { redrive, redriven, ...batch } = data;
    return { batch, redrive, redriven };
  }

  /** `GET /batches/{id}/items`: one page of at most `limit` items after `after`, in `state` when given. */
  async itemsPage(id: string, page: { limit: number; state?: ApiItem['state']; after?: string }): Promise<ApiItemPage> {
    const { data } = await this.call<ApiItemPage>('GET', withQuery(this.batch(id, '/items'), page));
    return data;
  }

  /** `GET /batches/{id}/items`, page by page, in key order; only items in `state` when given. */
  async *items(id: string, pageSize = 1000, state?: ApiItem['state']): AsyncGenerator<ApiItem> {
    let after: string | undefined;
    while (true) {
      const data = await this.itemsPage(id, { limit: pageSize, state, after });
      yield* data.items;
      if (!data.next) return;
      after = data.next;
    }
  }

  /** `GET /batches/{id}/finished`: items finished over time, in `buckets` buckets. */
  async finishedSeries(id: string, buckets: number): Promise<ApiSeries> {
    const { data } = await this.call<ApiSeries>('GET', withQuery(this.batch(id, '/finished'), { buckets }));
    return data;
  }

  /** `GET /jobs`: the batch jobs the deployment knows, by name, with their descriptions. */
  async listJobs(): Promise<{ name: string; description?: string }[]> {
    return (await this.allJobs()).jobs;
  }

  /**
   * `GET /jobs`: the batch jobs (`jobs`) and the unit jobs (`unitJobs`, which `units put --job`
   * names; empty from an API that does not list them) the deployment knows.
   */
  async allJobs(): Promise<{ jobs: ApiJobName[]; unitJobs: ApiJobName[] }> {
    const { data } = await this.call<{ jobs: ApiJobName[]; unitJobs?: ApiJobName[] }>('GET', '/jobs');
    return { jobs: data.jobs, unitJobs: data.unitJobs ?? [] };
  }

  /** `PUT /tenants/{tenant}/units`: register the tenant's units (see docs/api.md for the body). */
  async putUnits(
    tenant: string,
    input: { job: string; shards: number; weight?: number; endpoints?: string[]; config?: Record<string, unknown> },
  ): Promise<ApiUnitsPut> {
    const { data } = await this.call<ApiUnitsPut>('PUT', `/tenants/${encodeURIComponent(tenant)}/units`, input);
    return data;
  }

  /** `DELETE /tenants/{tenant}/units`; returns how many units were removed. */
  async deleteUnits(tenant: string): Promise<number> {
    const { data } = await this.call<{ removed: number }>('DELETE', `/tenants/${encodeURIComponent(tenant)}/units`);
    return data.removed;
  }

  /** `POST /tenants/{tenant}/units/{shard}/release`: lift the unit's quarantine and forget its crashes. */
  async releaseUnit(tenant: string, shard: number): Promise<ApiUnit> {
    const { data } = await this.call<{ unit: ApiUnit }>(
      'POST',
      `/tenants/${encodeURIComponent(tenant)}/units/${encodeURIComponent(String(shard))}/release`,
    );
    return data.unit;
  }

  /** `GET /units`, of one tenant or all (at most `limit`, default the API's 1,000). */
  async listUnits(filter: { tenant?: string; limit?: number } = {}): Promise<ApiUnit[]> {
    const { data } = await this.call<{ units: ApiUnit[] }>('GET', withQuery('/units', filter));
    return data.units;
  }

  /** `GET /processes`: the fleet and its balance, and every process. */
  async listProcesses(): Promise<{ fleet: ApiFleet; processes: ApiProcess[] }> {
    const { data } = await this.call<{ fleet: ApiFleet; processes: ApiProcess[] }>('GET', '/processes');
    return data;
  }

  /** `GET /concurrency`: the desired count of live processes, against the live count. */
  async getConcurrency(): Promise<ApiConcurrency> {
    const { data } = await this.call<ApiConcurrency>('GET', '/concurrency');
    return data;
  }

  /** `PUT /concurrency`: set the desired count of live processes (0..1000). */
  async setConcurrency(desired: number): Promise<ApiConcurrency> {
    const { data } = await this.call<ApiConcurrency>('PUT', '/concurrency', { desired });
    return data;
  }

  /** `GET /tenants/{tenant}/outbox`: backlog, oldest undelivered message and last error per endpoint. */
  async outboxStatus(tenant: string): Promise<ApiOutboxStatus> {
    const { data } = await this.call<ApiOutboxStatus>('GET', `/tenants/${encodeURIComponent(tenant)}/outbox`);
    return data;
  }

  /** `POST /tenants/{tenant}/outbox`: enqueue a message; returns its id (64-bit, as decimal text) and shard. */
  async sendOutbox(tenant: string, message: { key: string; payload: unknown }): Promise<ApiOutboxMessage> {
    const { data } = await this.call<ApiOutboxMessage>('POST', `/tenants/${encodeURIComponent(tenant)}/outbox`, message);
    return data;
  }

  /**
   * `GET /tenants/{tenant}`: running and waiting batches, limit and oldest wait, and `usage` over
   * `[from, to)` (ISO 8601 instants; default the last 30 days).
   */
  async getTenant(tenant: string, range: { from?: string; to?: string } = {}): Promise<ApiTenant> {
    const { data } = await this.call<ApiTenant>('GET', withQuery(`/tenants/${encodeURIComponent(tenant)}`, range));
    return data;
  }

  /** `GET /pools`: every concurrency pool with its items in flight now. */
  async listPools(): Promise<ApiPool[]> {
    const { data } = await this.call<{ pools: ApiPool[] }>('GET', '/pools');
    return data.pools;
  }

  /** `GET /pools/{name}`: one pool with its items in flight now. */
  async getPool(name: string): Promise<ApiPool> {
    const { data } = await this.call<ApiPool>('GET', `/pools/${encodeURIComponent(name)}`);
    return data;
  }

  /** `PUT /pools/{name}`: create a pool or change its limits (`{ limit }` or `{ perKey, total? }`), also while batches run. */
  async setPool(name: string, limits: { limit: number } | { perKey: number; total?: number }): Promise<ApiPool> {
    const { data } = await this.call<ApiPool>('PUT', `/pools/${encodeURIComponent(name)}`, limits);
    return data;
  }

  /** `PUT /tenants/{tenant}/limits`: the tenant's limit of running batches (null: the default). */
  async setTenantLimit(tenant: string, maxRunning: number | null): Promise<ApiTenant> {
    const { data } = await this.call<ApiTenant>('PUT', `/tenants/${encodeURIComponent(tenant)}/limits`, { maxRunning });
    return data;
  }
}
