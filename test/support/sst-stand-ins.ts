// Recording stand-ins for SST's globals (`$config`, `$app`, `$dev`, `$cli`, `$interpolate`,
// `$util` with its ComponentResource) and the components an sst.config.ts with the Leasehold
// component creates (`sst.aws.*`, `aws.*`). Each records its
// constructor arguments (name, args, opts) and the calls made on it, and exposes the properties
// the config reads (name, arn, url, host, nodes, …) as plain values, so ARNs and environment
// values come out as strings the tests can compare.
//
// Modelled on SST v4 (4.17.1): route() applies `transform.route.args` the way ApiGatewayV2 does.

export const REGION = 'us-east-1';
export const ACCOUNT = '123456789012';
export const DB_RESOURCE_ID = 'db-STANDINRESOURCEID';
export const DB_HOST = 'leasehold-database.standin.us-east-1.rds.amazonaws.com';
export const PROXY_RESOURCE_ID = 'prx-0123456789abcdef0';

/** One component or resource the config created. */
export interface Recorded {
  type: string;
  name: string;
  args: Record<string, any>;
  opts: Record<string, any> | undefined;
  instance: object;
}

/** A method called on a recorded component (route, subscribe). */
export interface Call {
  on: Recorded;
  method: string;
  /** The arguments as the component would use them (after its transforms). */
  args: any[];
}

/** Everything one evaluation of the config created. */
export interface World {
  records: Recorded[];
  calls: Call[];
  of(type: string): Recorded[];
  one(type: string, name: string): Recorded;
}

const GLOBALS = ['$config', '$app', '$dev', '$cli', '$interpolate', '$resolve', '$util', 'sst', 'aws'] as const;

/** `$interpolate`: stand-in values are plain, so a template is a string. */
function interpolate(strings: TemplateStringsArray, ...values: unknown[]): string {
  return strings.reduce((out, s, i) => out + s + (i < values.length ? String(values[i]) : ''), '');
}

/** Apply an SST `Transform<T>` (an object merged in, or a callback editing args and opts). */
export function applyTransform(t: unknown, args: Record<string, any>, opts: Record<string, any> = {}, name = 'x') {
  if (typeof t === 'function') {
    const copy = { ...args };
    t(copy, opts, name);
    return { args: copy, opts };
  }
  return { args: { ...args, ...(t as object | undefined) }, opts };
}

/** Options of {@link installStandIns}. */
export interface StandInOptions {
  /** The app's root folder (`$cli.paths.root`, where sst.config.ts is). */
  root: string;
  /** The app's name (`$app.name`). Default `leasehold`. */
  app?: string;
}

/** Install the stand-ins as globals for an app of `stage`; returns what they record. */
export function installStandIns(stage: string, options: StandInOptions): World {
  const app = options.app ?? 'leasehold';
  const records: Recorded[] = [];
  const calls: Call[] = [];
  const world: World = {
    records,
    calls,
    of: (type) => records.filter((r) => r.type === type),
    one(type, name) {
      const found = records.filter((r) => r.type === type && r.name === name);
      if (found.length !== 1) throw new Error(`expected one ${type} "${name}", found ${found.length}`);
      return found[0]!;
    },
  };

  class Recording {
    readonly record: Recorded;
    constructor(type: string, name: string, args: Record<string, any> = {}, opts?: Record<string, any>) {
      this.record = { type, name, args, opts, instance: this };
      records.push(this.record);
    }
    call(method: string, args: any[]) {
      calls.push({ on: this.record, method, args });
    }
  }

  class Function extends Recording {
    readonly name: string;
    readonly arn: string;
    constructor(name: string, args: Record<string, any>, opts?: Record<string, any>) {
      super('sst.aws.Function', name, args, opts);
      this.name = args.name ?? `${app}-${stage}-${name}Function-standin`;
      this.arn = `arn:aws:lambda:${REGION}:${ACCOUNT}:function:${this.name}`;
    }
    get nodes() {
      return { function: { name: this.name, arn: this.arn } };
    }
    /** As SST's: the function URL, which exists only with the `url` option. */
    get url() {
      if (!this.record.args.url) throw new Error(`Function ${this.record.name}: no url: set the url option`);
      return `https://${this.name}.lambda-url.${REGION}.on.aws/`;
    }
  }

  class Vpc extends Recording {
    readonly id = 'vpc-standin';
    readonly privateSubnets = ['subnet-private-a', 'subnet-private-b'];
    readonly publicSubnets = ['subnet-public-a', 'subnet-public-b'];
    readonly securityGroups = ['sg-standin'];
    constructor(name: string, args: Record<string, any> = {}, opts?: Record<string, any>) {
      super('sst.aws.Vpc', name, args, opts);
    }
    static get(name: string, id: string) {
      return new Vpc(name, { ref: true, vpcId: id });
    }
  }

  class Postgres extends Recording {
    readonly host = DB_HOST;
    readonly port = 5432;
    readonly username = 'postgres';
    readonly password = 'standin-master-password';
    readonly database: string;
    constructor(name: string, args: Record<string, any>, opts?: Record<string, any>) {
      super('sst.aws.Postgres', name, args, opts);
      this.database = args.database ?? 'leasehold';
    }
    get nodes() {
      return { instance: { resourceId: DB_RESOURCE_ID, identifier: 'leasehold-database-standin' } };
    }
  }

  class ApiGatewayV2 extends Recording {
    readonly url = 'https://standin.execute-api.us-east-1.amazonaws.com';
    constructor(name: string, args: Record<string, any> = {}, opts?: Record<string, any>) {
      super('sst.aws.ApiGatewayV2', name, args, opts);
    }
    route(rawRoute: string, handler: unknown, args: Record<string, any> = {}) {
      // As SST does: the component's `transform.route.args` applies to each route's args.
      const effective = applyTransform(this.record.args.transform?.route?.args, args).args;
      this.call('route', [rawRoute, handler, effective]);
      return {};
    }
  }

  class Bus extends Recording {
    readonly name: string;
    readonly arn: string;
    constructor(name: string, args: Record<string, any> = {}, opts?: Record<string, any>) {
      super('sst.aws.Bus', name, args, opts);
      this.name = `${app}-${stage}-${name}Bus-standin`;
      this.arn = `arn:aws:events:${REGION}:${ACCOUNT}:event-bus/${this.name}`;
    }
    subscribe(name: string, subscriber: unknown, args: Record<string, any> = {}) {
      this.call('subscribe', [name, subscriber, args]);
      return {};
    }
  }

  class CronV2 extends Recording {
    constructor(name: string, args: Record<string, any>, opts?: Record<string, any>) {
      super('sst.aws.CronV2', name, args, opts);
    }
  }

  class Queue extends Recording {
    readonly arn: string;
    readonly url: string;
    constructor(name: string, args: Record<string, any> = {}, opts?: Record<string, any>) {
      super('sst.aws.Queue', name, args, opts);
      this.arn = `arn:aws:sqs:${REGION}:${ACCOUNT}:${app}-${stage}-${name}Queue-standin`;
      this.url = `https://sqs.${REGION}.amazonaws.com/${ACCOUNT}/${app}-${stage}-${name}Queue-standin`;
    }
  }

  class FunctionRecursionConfig extends Recording {
    constructor(name: string, args: Record<string, any>, opts?: Record<string, any>) {
      super('aws.lambda.FunctionRecursionConfig', name, args, opts);
    }
  }

  class Invocation extends Recording {
    readonly result = '{}';
    constructor(name: string, args: Record<string, any>, opts?: Record<string, any>) {
      super('aws.lambda.Invocation', name, args, opts);
    }
  }

  class VpcEndpoint extends Recording {
    constructor(name: string, args: Record<string, any>, opts?: Record<string, any>) {
      super('aws.ec2.VpcEndpoint', name, args, opts);
    }
  }

  class Role extends Recording {
    readonly arn: string;
    constructor(name: string, args: Record<string, any>, opts?: Record<string, any>) {
      super('aws.iam.Role', name, args, opts);
      this.arn = `arn:aws:iam::${ACCOUNT}:role/${name}-standin`;
    }
  }

  class Proxy extends Recording {
    readonly name: string;
    readonly arn = `arn:aws:rds:${REGION}:${ACCOUNT}:db-proxy:${PROXY_RESOURCE_ID}`;
    readonly endpoint: string;
    constructor(name: string, args: Record<string, any>, opts?: Record<string, any>) {
      super('aws.rds.Proxy', name, args, opts);
      this.name = args.name ?? `${name.toLowerCase()}-standin`;
      this.endpoint = `${this.name}.proxy-standin.${REGION}.rds.amazonaws.com`;
    }
  }

  class ProxyDefaultTargetGroup extends Recording {
    readonly name = 'default';
    constructor(name: string, args: Record<string, any>, opts?: Record<string, any>) {
      super('aws.rds.ProxyDefaultTargetGroup', name, args, opts);
    }
  }

  class ProxyTarget extends Recording {
    constructor(name: string, args: Record<string, any>, opts?: Record<string, any>) {
      super('aws.rds.ProxyTarget', name, args, opts);
    }
  }

  /** Pulumi's ComponentResource: records itself; `registerOutputs` is recorded as a call. */
  class ComponentResource extends Recording {
    constructor(type: string, name: string, args: Record<string, any> = {}, opts?: Record<string, any>) {
      super(type, name, args, opts);
    }
    registerOutputs(outputs: Record<string, unknown> = {}) {
      this.call('registerOutputs', [outputs]);
    }
  }

  const g = globalThis as Record<string, unknown>;
  g.$config = (input: unknown) => input;
  g.$app = { name: app, stage };
  g.$dev = false;
  g.$cli = { paths: { root: options.root } };
  g.$interpolate = interpolate;
  g.$resolve = (values: unknown[]) => values;
  g.$util = { interpolate, output: (v: unknown) => v, ComponentResource };
  g.sst = { aws: { Function, Vpc, Postgres, ApiGatewayV2, Bus, CronV2, Queue } };
  g.aws = {
    getRegionOutput: () => ({ region: REGION }),
    getCallerIdentityOutput: () => ({ accountId: ACCOUNT }),
    getPartitionOutput: () => ({ partition: 'aws' }),
    lambda: { Invocation, FunctionRecursionConfig },
    ec2: { VpcEndpoint },
    iam: { Role },
    rds: { Proxy, ProxyDefaultTargetGroup, ProxyTarget },
  };
  return world;
}

/** Remove the stand-in globals. */
export function removeStandIns(): void {
  const g = globalThis as Record<string, unknown>;
  for (const name of GLOBALS) delete g[name];
}
