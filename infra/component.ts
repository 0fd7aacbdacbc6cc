// The Leasehold SST component: everything a runner needs on AWS, pointed at the app's handler
// file (docs/design.md, "Serverless runtime").
//
// - network: a VPC with NAT (or the subnets of an existing one);
// - database: RDS PostgreSQL with IAM auth and TLS required (or an existing database), optionally
//   behind an RDS Proxy with end-to-end IAM auth for the worker, the API and the trigger;
// - migrations on every deploy, before any other function gets its new code;
// - the worker, the scheduler (every minute), the API (IAM auth on every route but the three
//   callback routes, which their signed token authorises) and the trigger
//   (an EventBridge bus and the declared schedules), all running the app's handler file;
// - least privilege: `rds-db:connect` as the runner's user only (the scheduler: as its own user
//   only); `lambda:InvokeFunction` on the worker for the functions that dispatch, and on the
//   `invokable` functions for the worker; never `*`;
// - the connection budget: the worker's reserved concurrency times the pool size fits the
//   runner's user's connection limit, which the migration sets (settings.ts, ConnectionBudget);
// - the worker's recursive loop detection, set deliberately (WorkerSettings.recursiveLoop);
// - a dead-letter queue for trigger events whose start failed after Lambda's retries.
import type { Leasehold as LeaseholdShape, LeaseholdArgs, LeaseholdConstructor, Permission } from './args.js';
import { httpApi } from './api-routes.js';
import { buildContext, appRoot } from './build.js';
import { database, databaseProxy, network } from './database.js';
import { checkHandlerFile } from './files.js';
import {
  eventsFunction,
  migrateFunction,
  runnerFunctions,
  userEnvironment,
  workerAndScheduler,
  type RunnerGrants,
} from './functions.js';
import { invokableFunctions, s3Grants } from './grants.js';
import { platform, type Input, type Output, type Platform, type ResourceOptions } from './platform.js';
import { resolveSettings, type Settings } from './settings.js';
import { triggerFunction } from './trigger.js';

/** The Leasehold component, as `new Leasehold(…)` returns it (args.ts). */
export type Leasehold = LeaseholdShape;

/** The component's Pulumi type. */
export const COMPONENT_TYPE = 'leasehold:aws:Leasehold';

const classes = new WeakMap<object, LeaseholdConstructor>();

/**
 * A leasehold runner on AWS, for `run()` of sst.config.ts:
 *
 * ```ts
 * const { Leasehold } = await import('leasehold/sst');
 * const runner = new Leasehold('Runner', { handlers: 'src/leasehold', invokable: { score } });
 * return { api: runner.url };
 * ```
 *
 * It creates the network, the database (or uses an existing one), the migrations, the five
 * functions running the app's handler file (the sixth, the progress stream, behind its function URL), their schedule, the HTTP API, the bus and the declared
 * schedules, with least-privilege IAM (see the module comment). A Pulumi component resource of
 * type {@link COMPONENT_TYPE}; every resource it creates is its child.
 * @throws {Error} an option that cannot work (the message names it), the handler file is missing,
 *   or SST's globals are (used outside `run()`).
 */
export const Leasehold = function Leasehold(name: string, args: LeaseholdArgs, opts?: ResourceOptions): Leasehold {
  // The class extends SST's `$util.ComponentResource`, which exists only inside `run()`: made
  // on first use there (and again if the globals change, as between test evaluations).
  const p = platform();
  let Component = classes.get(p.$util.ComponentResource);
  if (!Component) {
    Component = componentClass(p);
    classes.set(p.$util.ComponentResource, Component);
  }
  return new Component(name, args, opts);
} as unknown as LeaseholdConstructor;

function componentClass(p: Platform): LeaseholdConstructor {
  return class LeaseholdComponent extends p.$util.ComponentResource implements Leasehold {
    readonly url: Output<string>;
    readonly eventsUrl: Output<string>;
    readonly busName: Output<string>;
    readonly busArn: Output<string>;
    readonly workerName: string;
    readonly databaseHost: Input<string>;
    readonly settings: Settings;
    readonly nodes: Leasehold['nodes'];

    constructor(name: string, args: LeaseholdArgs, opts: ResourceOptions = {}) {
      super(COMPONENT_TYPE, name, {}, opts);
      const settings = resolveSettings(p.$app.stage, args);
      this.settings = settings;
      checkHandlerFile(appRoot(p), settings.handlers);
      const b = buildContext(p, this, name, args, settings);
      const { vpc, functionVpc } = network(b);
      const { postgres, connection } = database(b, vpc);
      const { databaseProxy: proxy, runnerRoute } = databaseProxy(b, vpc, postgres, connection);
      const environment = userEnvironment(b);
      const { migrateFn, migrations } = migrateFunction(b, { functionVpc, postgres, connection, environment });

      // The runner's functions.
      const workerName = b.physical('worker');
      const invokeWorker: Permission = { actions: ['lambda:InvokeFunction'], resources: [b.functionArn(workerName)] };
      const invokable = invokableFunctions(args.invokable, b.functionArn);
      // The bus: start-batch events in, Batch Finished events out (docs/design.md, "Events").
      const bus = b.create(p.sst.aws.Bus, `${name}Events`, {}, b.t.bus);
      // Only those that end batches put events, on this bus only.
      const grants: RunnerGrants = {
        invokeWorker,
        putEvents: { actions: ['events:PutEvents'], resources: [bus.arn] },
        s3: s3Grants(args.s3),
      };
      const wiring = { functionVpc, connection, runnerRoute, migrations, workerName, busName: bus.name, invokable, environment };
      const runnerFunction = runnerFunctions(b, wiring);
      const { worker, workerRecursion, scheduler } = workerAndScheduler(b, runnerFunction, grants, wiring);
      const api = runnerFunction('api', { timeout: `${settings.api.timeoutSeconds} seconds` }, [
        invokeWorker,
        grants.putEvents,
        ...grants.s3.check,
      ]);
      const http = httpApi(b, api);
      const events = eventsFunction(b, runnerFunction);
      const { trigger, triggerFailures } = triggerFunction(b, runnerFunction, grants, bus);

      this.url = http.url;
      this.eventsUrl = events.url;
      this.busName = bus.name;
      this.busArn = bus.arn;
      this.workerName = workerName;
      this.databaseHost = connection.host;
      this.nodes = {
        ...(vpc ? { vpc } : {}),
        ...(postgres ? { database: postgres } : {}),
        ...(proxy ? { databaseProxy: proxy } : {}),
        worker,
        scheduler,
        api,
        trigger,
        events,
        migrate: migrateFn,
        migrations,
        httpApi: http.httpApi,
        bus,
        workerRecursion,
        triggerFailures,
      };
      this.registerOutputs({
        url: this.url,
        eventsUrl: this.eventsUrl,
        busName: this.busName,
        workerName,
        databaseHost: this.databaseHost,
      });
    }
  };
}
