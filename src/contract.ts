// The strings the deploy component (infra/) and the library (src/) must agree on, in one place
// (docs/design.md, "Layout"): the API's paths, the names of the events on the bus, and the
// environment variables the component sets on the functions. Imports nothing, so the component
// can take it without loading any of the library (.dependency-cruiser.cjs lets infra/ import it).

/**
 * The API's paths (docs/api.md), API Gateway style: `{name}` is one path segment. The component
 * routes each one (every method) to the API function; the router (src/api/router.ts) answers
 * each one's methods and 405 for the rest. The tenant-scoped twins of the batch paths let an IAM
 * policy allow one tenant's paths only.
 */
export const API_PATHS = [
  '/batches',
  '/batches/{id}',
  '/batches/{id}/items',
  '/batches/{id}/cancel',
  '/batches/{id}/pause',
  '/batches/{id}/resume',
  '/batches/{id}/redrive',
  '/batches/{id}/finished',
  '/tenants/{tenant}/batches',
  '/tenants/{tenant}/batches/{id}',
  '/tenants/{tenant}/batches/{id}/items',
  '/tenants/{tenant}/batches/{id}/cancel',
  '/tenants/{tenant}/batches/{id}/pause',
  '/tenants/{tenant}/batches/{id}/resume',
  '/tenants/{tenant}/batches/{id}/redrive',
  '/tenants/{tenant}/batches/{id}/finished',
  '/jobs',
  '/tenants/{tenant}',
  '/tenants/{tenant}/limits',
  '/tenants/{tenant}/units',
  '/tenants/{tenant}/units/{shard}/release',
  '/tenants/{tenant}/outbox',
  '/units',
  '/processes',
  '/concurrency',
  '/actions',
  '/actions/{id}',
  '/pools',
  '/pools/{name}',
  '/callbacks/{token}/succeed',
  '/callbacks/{token}/fail',
  '/callbacks/{token}/heartbeat',
] as const;

/** One of {@link API_PATHS}. */
export type ApiPath = (typeof API_PATHS)[number];

/** `source` of every event leasehold puts on its bus (docs/design.md, "Events"). */
export const EVENT_SOURCE = 'leasehold';

/** `detail-type` of the event an end of a batch sends (finished, failed, given up, cancelled). */
export const BATCH_FINISHED_DETAIL_TYPE = 'Batch Finished';

/** `detail-type` of the EventBridge events that start a batch (the bus rule matches only these). */
export const START_BATCH_DETAIL_TYPE = 'leasehold.start-batch';

/** `source` of the events the declared schedules send (bus events may come from any source). */
export const SCHEDULE_SOURCE = 'leasehold.schedule';

/**
 * The environment variables the component sets on the functions, by what they carry
 * (docs/configuration.md has each one's meaning and default). The runtime reads them
 * (src/runtime/config.ts); an app's own `environment` may not set them (nor any
 * {@link DB_VARIABLE_PREFIX} variable).
 */
export const COMPONENT_VARIABLES = {
  dbHost: 'LEASEHOLD_DB_HOST',
  dbPort: 'LEASEHOLD_DB_PORT',
  dbName: 'LEASEHOLD_DB_NAME',
  dbUser: 'LEASEHOLD_DB_USER',
  dbPassword: 'LEASEHOLD_DB_PASSWORD',
  dbIamAuth: 'LEASEHOLD_DB_IAM_AUTH',
  dbIamUser: 'LEASEHOLD_DB_IAM_USER',
  dbSchedulerUser: 'LEASEHOLD_DB_SCHEDULER_USER',
  dbReservedConnections: 'LEASEHOLD_DB_RESERVED_CONNECTIONS',
  dbPooler: 'LEASEHOLD_DB_POOLER',
  dbPoolMax: 'LEASEHOLD_DB_POOL_MAX',
  migrationsDir: 'LEASEHOLD_MIGRATIONS_DIR',
  eventBus: 'LEASEHOLD_EVENT_BUS',
  rules: 'LEASEHOLD_RULES',
  webhookSecret: 'LEASEHOLD_WEBHOOK_SECRET',
  workerFunction: 'LEASEHOLD_WORKER_FUNCTION',
  maxWorkers: 'LEASEHOLD_MAX_WORKERS',
  deadlineMarginMs: 'LEASEHOLD_DEADLINE_MARGIN_MS',
  workerTimeoutMs: 'LEASEHOLD_WORKER_TIMEOUT_MS',
  drainMs: 'LEASEHOLD_DRAIN_MS',
  invokable: 'LEASEHOLD_INVOKABLE',
} as const;

/** One of {@link COMPONENT_VARIABLES}' names. */
export type ComponentVariable = (typeof COMPONENT_VARIABLES)[keyof typeof COMPONENT_VARIABLES];

/** Every database variable is the component's to set: the database is its to wire. */
export const DB_VARIABLE_PREFIX = 'LEASEHOLD_DB_';

/** EventBridge's limit on one PutEvents call, the sum of its entries' sizes, bytes (256 KiB): an event can be no larger. */
export const PUT_EVENTS_MAX_BYTES = 262_144;

/**
 * One PutEvents entry's size as EventBridge counts it (its guide, "Calculating PutEvents event
 * entry size"): 14 bytes for a `Time`, then the UTF-8 bytes of `Source`, `DetailType`, `Detail`
 * and each of `Resources`.
 */
export function putEventsEntrySize(e: {
  Time?: unknown;
  Source?: unknown;
  DetailType?: unknown;
  Detail?: unknown;
  Resources?: unknown;
}): number {
  const bytes = (v: unknown) => (typeof v === 'string' ? Buffer.byteLength(v) : 0);
  const resources = Array.isArray(e.Resources) ? e.Resources.reduce((n: number, r: unknown) => n + bytes(r), 0) : 0;
  return (e.Time === undefined || e.Time === null ? 0 : 14) + bytes(e.Source) + bytes(e.DetailType) + bytes(e.Detail) + resources;
}
