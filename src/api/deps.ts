// What the API's routes need, built once per container by the runtime.
import type { Prices, StartSettings, WorkerSender } from '../batch/index.js';
import type { JobRegistry } from '../jobs/index.js';
import type { Log } from '../log.js';
import type { Sql } from '../store/index.js';
import type { UnitJobRegistry } from '../units/index.js';

/** What {@link handleApi} needs, built once per container. */
export interface ApiDeps {
  sql: Sql;
  jobs: JobRegistry;
  /**
   * `maxOpen` (open batches per datasource), `maxBodyBytes` (413 above) and the start limits
   * (`maxItems`, `maxInputBytes`, `maxTotalBytes`; 413 above, each defaults to the library's) are
   * read, and `lease.shedHysteresis` (which processes count as starving; default 0.2) when given.
   */
  config: StartSettings & {
    maxOpen: number;
    maxBodyBytes: number;
    lease?: { shedHysteresis: number };
    /** The default per-tenant limit `GET /tenants/{tenant}` shows (`LEASEHOLD_MAX_RUNNING`); default none. */
    runner?: { maxRunning: number };
    /**
     * How many days finished batches are kept (`LEASEHOLD_RETENTION_DAYS`; 0: for ever), which
     * `GET /batches` answers as `retentionDays` (docs/design.md, "Retention"). Default 30.
     */
    retention?: { retentionDays: number };
    /**
     * The key webhooks are signed with (`LEASEHOLD_WEBHOOK_SECRET`): a start with `notify` is
     * refused (400) without one (docs/design.md, "Events").
     */
    events?: { webhookSecret: string | undefined };
    /**
     * The prices usage is estimated at (`LEASEHOLD_PRICE_REGION`, `LEASEHOLD_PRICES`;
     * docs/design.md, "Usage and cost"). Default `us-east-1`'s published prices.
     */
    prices?: Prices;
  };
  /**
   * Sends workers to batches under the worker limit (the runtime's `WorkerDispatcher`, which
   * binds `LEASEHOLD_MAX_WORKERS` and the confirmation window of an invocation): a start, a
   * redrive, a raised `maxConcurrency` and a cancel's waiting batches ask it for N workers
   * (docs/design.md, "Fan-out").
   */
  workers: WorkerSender;
  /** Structured log of the invocation (`silentLog` to drop lines). */
  log: Log;
  /**
   * Sends a batch's Batch Finished events at once, after a cancel (best effort: the scheduler
   * sends what is left). Default none.
   */
  sendEvents?: (batchId: string) => Promise<unknown>;
  /** Unit jobs units may be registered for. Default {@link defaultUnitJobs} (`outbox-delivery`). */
  unitJobs?: UnitJobRegistry;
}
