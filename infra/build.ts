// What every part of the Leasehold component builds with: the SST platform, the component as
// parent, its name, options and resolved settings, and the helpers that name and create resources.
import type { LeaseholdArgs, LeaseholdTransforms } from './args.js';
import {
  transform,
  type Args,
  type Input,
  type Output,
  type Platform,
  type ResourceOptions,
  type Transform,
} from './platform.js';
import { functionName, kebab, type Settings } from './settings.js';

/** The build context of one component instance (see {@link buildContext}). */
export interface Build {
  readonly p: Platform;
  /** The component: every resource it creates is its child. */
  readonly parent: unknown;
  /** The component's logical name (`Runner`): every resource's logical name starts with it. */
  readonly name: string;
  readonly args: LeaseholdArgs;
  readonly t: LeaseholdTransforms;
  readonly settings: Settings;
  /** The app's root folder (where sst.config.ts is). */
  readonly root: string;
  readonly ids: { region: Output<string>; accountId: Output<string>; partition: Output<string> };
  /**
   * A function's physical name: `app-stage-component-role`.
   * @throws {Error} longer than Lambda's 64 characters.
   */
  physical(role: string): string;
  /** The ARN of the function named `fn` in this account and region. */
  functionArn(fn: Input<string>): Output<string>;
  /** Create a resource as the component's child, with `transforms` applied in order. */
  create<T>(
    Ctor: new (n: string, a: Args, o?: ResourceOptions) => T,
    logical: string,
    base: Args,
    ...transforms: (Transform | undefined)[]
  ): T;
}

/** The {@link Build} of the component `parent` named `name`, its settings resolved from `args`. */
export function buildContext(p: Platform, parent: unknown, name: string, args: LeaseholdArgs, settings: Settings): Build {
  const { aws, $app, $interpolate } = p;
  const ids = {
    region: aws.getRegionOutput({}, { parent }).region,
    accountId: aws.getCallerIdentityOutput({}, { parent }).accountId,
    partition: aws.getPartitionOutput({}, { parent }).partition,
  };
  return {
    p,
    parent,
    name,
    args,
    t: args.transform ?? {},
    settings,
    root: appRoot(p),
    ids,
    physical(role) {
      const n = functionName($app.name, $app.stage, `${kebab(name)}-${role}`);
      if (n.length > 64)
        throw new Error(`function name ${n} is longer than Lambda's 64 characters: use a shorter app, stage or component name`);
      return n;
    },
    functionArn: (fn) => $interpolate`arn:${ids.partition}:lambda:${ids.region}:${ids.accountId}:function:${fn}`,
    create(Ctor, logical, base, ...transforms) {
      let a = base;
      let o: ResourceOptions = { parent };
      for (const each of transforms) [a, o] = transform(each, logical, a, o);
      return new Ctor(logical, a, o);
    },
  };
}

/** The app's root folder: SST's, else the working directory. */
export function appRoot(p: Platform): string {
  return p.$cli?.paths?.root ?? process.cwd();
}
