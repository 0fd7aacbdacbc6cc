// The Leasehold component's grants beyond the database: the S3 buckets batches read and write
// (`s3`), the functions `lambda-invoke` batches may call (`invokable`), and the order that lets
// new code take traffic only after the migrations ran. Least privilege: names, never `*`.
import type { InvokableFunction, LeaseholdArgs, Permission } from './args.js';
import type { Args, Input, Output, Platform, ResourceOptions, Transform } from './platform.js';

const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/**
 * The S3 statements of the `s3` option: `read` (worker: list and get the source buckets, and
 * get an object's version),
 * `write` (worker, scheduler: put under each result prefix, and list and abort the incomplete
 * multipart uploads a writer that died left there), `check` (API, trigger: what a
 * start's checks call — HeadBucket needs `s3:ListBucket`, HeadObject `s3:GetObject`).
 * @throws Error a bucket that is not a bucket name, a prefix holding `*`.
 */
export function s3Grants(option: LeaseholdArgs['s3']): { read: Permission[]; write: Permission[]; check: Permission[] } {
  const sources = [...new Set(option?.sources ?? [])];
  const results = option?.results ?? [];
  for (const b of [...sources, ...results.map((r) => r.bucket)]) {
    if (!BUCKET.test(b)) throw new Error(`s3: "${b}" is not an S3 bucket name (wildcards are refused)`);
  }
  for (const r of results) if (r.prefix.includes('*')) throw new Error(`s3.results: the prefix "${r.prefix}" holds a wildcard`);
  const bucketArn = (b: string) => `arn:aws:s3:::${b}`;
  const read: Permission[] = sources.length
    ? [
        { actions: ['s3:ListBucket'], resources: sources.map(bucketArn) },
        // GetObjectVersion: a source on a versioned bucket reads the version found at start.
        { actions: ['s3:GetObject', 's3:GetObjectVersion'], resources: sources.map((b) => `${bucketArn(b)}/*`) },
      ]
    : [];
  const write: Permission[] = results.length
    ? [
        {
          actions: ['s3:PutObject', 's3:AbortMultipartUpload'],
          resources: results.map((r) => `${bucketArn(r.bucket)}/${r.prefix}*`),
        },
        { actions: ['s3:ListBucketMultipartUploads'], resources: [...new Set(results.map((r) => bucketArn(r.bucket)))] },
      ]
    : [];
  const listed = [...new Set([...sources, ...results.map((r) => r.bucket)])];
  const check: Permission[] = [
    ...(listed.length ? [{ actions: ['s3:ListBucket'], resources: listed.map(bucketArn) }] : []),
    ...(sources.length ? [{ actions: ['s3:GetObject'], resources: sources.map((b) => `${bucketArn(b)}/*`) }] : []),
  ];
  return { read, write, check };
}

/** One invokable function: the name batches use, and what `lambda:InvokeFunction` is granted on. */
export interface Invokable {
  name: string;
  /** What LEASEHOLD_INVOKABLE names: the function name or ARN given, or the component's ARN. */
  target: Input<string>;
  arn: Input<string>;
}

/**
 * The `invokable` option, normalised.
 * @throws {Error} a name that batches could not use, a wildcard, or a list entry that is not a string.
 */
export function invokableFunctions(
  option: LeaseholdArgs['invokable'],
  functionArn: (name: Input<string>) => Output<string>,
): Invokable[] {
  if (option === undefined) return [];
  const entries: [string, InvokableFunction][] = Array.isArray(option)
    ? option.map((ref, i) => {
        if (typeof ref !== 'string')
          throw new Error(`invokable[${i}]: a list takes names and ARNs; give functions by name: { score: scoreFn }`);
        return [functionNameOf(ref), ref] as [string, InvokableFunction];
      })
    : Object.entries(option as Record<string, InvokableFunction>);
  const seen = new Set<string>();
  return entries.map(([name, ref]) => {
    if (
      typeof ref === 'string' &&
      (ref.includes('*') ||
        !/^(arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:\d{12}:function:)?[A-Za-z0-9_-]{1,140}(:[A-Za-z0-9$_-]{1,128})?$/.test(ref))
    ) {
      throw new Error(`invokable.${name}: "${ref}" is not a Lambda function name or ARN (wildcards are refused)`);
    }
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,139}$/.test(name))
      throw new Error(`invokable: "${name}" is not a name batches can use (letters, digits, ".", "_", "-")`);
    if (seen.has(name)) throw new Error(`invokable: "${name}" is given twice`);
    seen.add(name);
    if (typeof ref === 'string') return { name, target: ref, arn: ref.startsWith('arn:') ? ref : functionArn(ref) };
    if (!ref || typeof ref !== 'object' || !('arn' in ref))
      throw new Error(`invokable.${name}: not an sst.aws.Function, a function name or an ARN`);
    return { name, target: ref.arn, arn: ref.arn };
  });
}

/** `arn:…:function:NAME[:qualifier]` or `NAME[:qualifier]` → `NAME`. */
function functionNameOf(ref: string): string {
  const parts = ref.split(':');
  const at = parts.indexOf('function');
  return (at >= 0 ? parts[at + 1] : parts[0]) ?? ref;
}

/** `LEASEHOLD_INVOKABLE`: `name=target,…`, built from outputs with `$interpolate`. */
export function invokableVariable(list: Invokable[], interpolate: Platform['$interpolate']): Output<string> {
  let value: Input<string> = '';
  for (const [i, f] of list.entries()) value = interpolate`${value}${i ? ',' : ''}${f.name}=${f.target}`;
  return value as Output<string>;
}

/**
 * A transform for the runner's functions: the Lambda resource waits for `migration`, so new code
 * takes traffic only after the schema is migrated. Kept when other transforms replaced the
 * function's own `transform.function`.
 */
export function afterMigrations(migration: unknown): Transform {
  return (args: Args) => {
    const own = (args.transform ?? {}) as { function?: Transform };
    const before = own.function;
    args.transform = {
      ...own,
      function: (fnArgs: Args, fnOpts: ResourceOptions, fnName: string) => {
        // An object transform is merged into the args in place (SST keeps these args).
        if (typeof before === 'function') before(fnArgs, fnOpts, fnName);
        else if (before) Object.assign(fnArgs, before);
        const deps = fnOpts.dependsOn === undefined ? [] : [fnOpts.dependsOn].flat();
        fnOpts.dependsOn = [...deps, migration];
      },
    };
  };
}
