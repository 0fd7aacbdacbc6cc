// The parts of SST's platform the Leasehold component uses, as minimal declared shapes.
//
// SST hands a config its components and helpers as globals (`sst`, `aws`, `$app`,
// `$interpolate`, `$util`) inside `run()` of sst.config.ts; its types are generated into the
// app's .sst/ folder and are not a package this one can depend on. So the component reads the
// globals through `platform()` and types them loosely: argument bags are plain records, outputs
// opaque. Written against SST v4 (4.17.1).

/** A deploy-time value (Pulumi `Output<T>`): opaque here, passed on to other resources. */
export interface Output<T> {
  apply<U>(fn: (value: T) => U): Output<U>;
}

/** A value or a deploy-time output (Pulumi `Input<T>`). */
export type Input<T> = T | Output<T> | Promise<T>;

/** A resource's options (Pulumi `CustomResourceOptions`), loosely. */
export interface ResourceOptions {
  parent?: unknown;
  dependsOn?: unknown;
  [option: string]: unknown;
}

/** A component's argument bag, loosely. */
export type Args = Record<string, unknown>;

/**
 * An SST transform: an object merged over a component's args, or a function that edits the args
 * and options in place (SST's `Transform<T>`).
 */
export type Transform<T extends Args = Args> = Partial<T> | ((args: T, opts: ResourceOptions, name: string) => void);

/** What `sst.aws.Function` gives back that the component uses. */
export interface FunctionLike {
  name: Output<string>;
  arn: Output<string>;
}

interface Constructor<T> {
  new (name: string, args: Args, opts?: ResourceOptions): T;
}

/** The SST globals the component reads. */
export interface Platform {
  sst: {
    aws: {
      Function: Constructor<FunctionLike>;
      Vpc: Constructor<{ id: Output<string>; privateSubnets: Output<string[]>; securityGroups: Output<string[]> }>;
      Postgres: Constructor<{
        host: Output<string>;
        port: Output<number>;
        database: Output<string>;
        username: Output<string>;
        password: Output<string>;
        nodes: { instance: { resourceId: Output<string>; identifier: Output<string> } };
      }>;
      ApiGatewayV2: Constructor<{ url: Output<string>; route(route: string, handler: Input<string>, args?: Args): unknown }>;
      Bus: Constructor<{
        name: Output<string>;
        arn: Output<string>;
        subscribe(name: string, subscriber: unknown, args?: Args): unknown;
      }>;
      CronV2: Constructor<unknown>;
      Queue: Constructor<{ arn: Output<string>; url: Output<string> }>;
    };
  };
  aws: {
    getRegionOutput(args?: Args, opts?: ResourceOptions): { region: Output<string> };
    getCallerIdentityOutput(args?: Args, opts?: ResourceOptions): { accountId: Output<string> };
    getPartitionOutput(args?: Args, opts?: ResourceOptions): { partition: Output<string> };
    lambda: { Invocation: Constructor<unknown>; FunctionRecursionConfig: Constructor<unknown> };
    ec2: { VpcEndpoint: Constructor<unknown> };
    iam: { Role: Constructor<{ arn: Output<string> }> };
    rds: {
      Proxy: Constructor<{ name: Output<string>; arn: Output<string>; endpoint: Output<string> }>;
      ProxyDefaultTargetGroup: Constructor<{ name: Output<string> }>;
      ProxyTarget: Constructor<unknown>;
    };
  };
  $app: { name: string; stage: string };
  $interpolate(strings: TemplateStringsArray, ...values: unknown[]): Output<string>;
  $util: {
    ComponentResource: new (
      type: string,
      name: string,
      args?: Args,
      opts?: ResourceOptions,
    ) => {
      registerOutputs(outputs?: Record<string, unknown>): void;
    };
  };
  /** SST's CLI context (internal to SST): the app's root folder. */
  $cli?: { paths?: { root?: string } };
}

/**
 * SST's globals.
 * @throws {Error} they are not there: the component is used outside `run()` of an sst.config.ts.
 */
export function platform(): Platform {
  const g = globalThis as unknown as Partial<Platform>;
  if (!g.sst?.aws || !g.aws || !g.$app || !g.$interpolate || !g.$util?.ComponentResource) {
    throw new Error(
      "leasehold/sst: SST's globals are missing: create the Leasehold component inside run() of sst.config.ts " +
        "(and import it there: const { Leasehold } = await import('leasehold/sst'))",
    );
  }
  return g as Platform;
}

/**
 * Apply an SST {@link Transform} to `args` and `opts` the way SST's components do: a function
 * edits them in place, an object is merged over the args.
 */
export function transform<T extends Args>(
  t: Transform<T> | undefined,
  name: string,
  args: T,
  opts: ResourceOptions,
): [T, ResourceOptions] {
  if (typeof t === 'function') {
    t(args, opts, name);
    return [args, opts];
  }
  return [{ ...args, ...t }, opts];
}

/**
 * The last `:`-separated part of an ARN (`arn:aws:rds:…:db-proxy:prx-…` → `prx-…`), of a plain
 * string or a deploy-time output.
 */
export function arnResource(arn: Input<string>): Input<string> {
  if (typeof arn === 'string') return arn.split(':').pop()!;
  if (arn && typeof (arn as Output<string>).apply === 'function')
    return (arn as Output<string>).apply((a) => a.split(':').pop()!);
  return (arn as Promise<string>).then((a) => a.split(':').pop()!);
}
