// The Leasehold component's public shapes: what `new Leasehold(name, args)` takes and gives
// back (docs/deploy.md has the options' reference and defaults).
import type { FunctionLike, Input, Output, ResourceOptions, Transform } from './platform.js';
import type { Settings, SettingsOptions } from './settings.js';

/** A function `lambda-invoke` batches may call: an `sst.aws.Function`, or a function name or ARN. */
export type InvokableFunction = FunctionLike | string;

/** An IAM statement for a function's role. */
export interface Permission {
  actions: string[];
  resources: Input<string>[];
}

/**
 * Transforms of what the component creates, SST-style: an object merged over the args, or a
 * function editing args and options in place. `function` applies to every function, before the
 * function's own.
 */
export interface LeaseholdTransforms {
  vpc?: Transform;
  database?: Transform;
  /** With `database.proxy`: the `aws.rds.Proxy`. */
  databaseProxy?: Transform;
  /** With `database.proxy`: its `aws.rds.ProxyDefaultTargetGroup` (the pool's settings). */
  databaseProxyTargetGroup?: Transform;
  /** With `database.proxy`: the `aws.iam.Role` the proxy connects to the instance with. */
  databaseProxyRole?: Transform;
  function?: Transform;
  worker?: Transform;
  scheduler?: Transform;
  api?: Transform;
  trigger?: Transform;
  /** The progress stream's function (its function URL: `transform.events` sees `url`). */
  events?: Transform;
  migrate?: Transform;
  /** The `aws.lambda.Invocation` that runs the migrations on every deploy. */
  migrations?: Transform;
  httpApi?: Transform;
  bus?: Transform;
  /** The scheduler's every-minute `sst.aws.CronV2`. */
  schedulerCron?: Transform;
  /** Each declared schedule's `sst.aws.CronV2`. */
  schedule?: Transform;
  /** The worker's `aws.lambda.FunctionRecursionConfig`. */
  workerRecursion?: Transform;
  /** The `sst.aws.Queue` that keeps trigger events whose start failed. */
  triggerFailures?: Transform;
}

/** What `new Leasehold(name, args)` takes. Durations are in seconds or ms as their names say. */
export interface LeaseholdArgs extends SettingsOptions {
  /**
   * The app's handler file, relative to sst.config.ts, with or without its extension
   * (`src/leasehold`): it exports `worker`, `scheduler`, `api`, `trigger`, `migrate` and `events`
   * (`createHandlers` from `leasehold/lambda`). Every function points at one export of it.
   */
  handlers: string;
  /**
   * Functions `lambda-invoke` batches may call, by the name batches use (`functionName`): an
   * `sst.aws.Function`, a function name or an ARN each (`{ score: scoreFn, legacy: 'legacy-report' }`);
   * or a list of names and ARNs, each known by its function name. The worker's role may invoke
   * these and nothing else but the worker; a start naming another function is refused (400).
   * Default none.
   */
  invokable?: Readonly<Record<string, InvokableFunction>> | readonly string[];
  /** More environment variables for every function (the runtime's `LEASEHOLD_*` settings, your jobs' own). */
  environment?: Record<string, Input<string>>;
  /** SST links for the worker, scheduler, API and trigger: the resources your jobs use. */
  link?: unknown[];
  /**
   * S3 buckets batches read items from and result prefixes they write to (docs/design.md,
   * "Sources and results"); least privilege: `sources` (bucket names) give the worker
   * `s3:ListBucket` on each bucket and `s3:GetObject` on its objects, and the API and trigger the
   * same to check a start's source; `results` (`{ bucket, prefix }`) give the worker and the
   * scheduler `s3:PutObject` on `prefix*` of that bucket only, and the API and trigger
   * `s3:ListBucket` on the bucket (HeadBucket at start). Wildcards are refused. Default none.
   */
  s3?: { sources?: readonly string[]; results?: readonly { bucket: string; prefix: string }[] };
  /** More IAM statements for the worker, scheduler, API and trigger: what your jobs do. */
  permissions?: Permission[];
  /**
   * The key Batch Finished webhooks (`notify`) are signed with (`LEASEHOLD_WEBHOOK_SECRET`, at
   * least 16 characters, or `whsec_` + base64), e.g. `new sst.Secret('WebhookSecret').value`.
   * Without it a start with `notify` is refused. Default none.
   */
  webhookSecret?: Input<string>;
  transform?: LeaseholdTransforms;
}

/** The Leasehold component, as `new Leasehold(…)` returns it. */
export interface Leasehold {
  /** The HTTP API's URL (callers sign with SigV4 and need `execute-api:Invoke`). */
  readonly url: Output<string>;
  /**
   * The progress stream's function URL: `GET {eventsUrl}batches/{id}/events` answers Server-Sent
   * Events (response streaming). Callers sign with SigV4 for the service `lambda` and need
   * `lambda:InvokeFunctionUrl` on the events function (docs/api.md, "Progress stream").
   */
  readonly eventsUrl: Output<string>;
  /** The EventBridge bus whose `leasehold.start-batch` events start batches. */
  readonly busName: Output<string>;
  readonly busArn: Output<string>;
  /** The worker function's name (fixed, so its own environment can name it). */
  readonly workerName: string;
  /** The database's host (the instance's, also with `database.proxy`). */
  readonly databaseHost: Input<string>;
  /** The settings deployed, defaults applied. */
  readonly settings: Settings;
  /** What the component created, for wiring beyond its options. */
  readonly nodes: {
    vpc?: unknown;
    database?: unknown;
    /** With `database.proxy`: the RDS Proxy the worker, the API and the trigger connect to. */
    databaseProxy?: unknown;
    worker: FunctionLike;
    scheduler: FunctionLike;
    api: FunctionLike;
    trigger: FunctionLike;
    /** Serves `GET /batches/{id}/events` through its function URL (response streaming, IAM auth). */
    events: FunctionLike;
    migrate: FunctionLike;
    migrations: unknown;
    httpApi: unknown;
    bus: unknown;
    /** The worker's recursion setting. */
    workerRecursion: unknown;
    /** The trigger's dead-letter queue: events whose start failed after Lambda's two retries. */
    triggerFailures: { arn: Output<string>; url: Output<string> };
  };
}

/** Constructs the component: `new Leasehold('Runner', { handlers: 'src/leasehold' })`. */
export interface LeaseholdConstructor {
  new (name: string, args: LeaseholdArgs, opts?: ResourceOptions): Leasehold;
}
