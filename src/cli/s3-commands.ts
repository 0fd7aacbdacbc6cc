// `leasehold s3 …`: load test data into S3 and look at it, locally in `leasehold dev`'s
// S3-compatible server (docs/cli.md). The SDK loads only when an s3 command runs.
import type { Command } from 'commander';

/** `--endpoint` of every s3 command. */
const ENDPOINT_HELP = "S3 endpoint; default AWS_ENDPOINT_URL_S3, else leasehold dev's (.leasehold/s3.json)";

/** Run an s3 command's work; its S3CommandError is one line on stderr and exit 1. */
async function s3Action(work: (s3: typeof import('./s3.js')) => Promise<void>): Promise<void> {
  const s3 = await import('./s3.js');
  try {
    await work(s3);
  } catch (e) {
    if (!(e instanceof s3.S3CommandError)) throw e;
    console.error(`leasehold: ${e.message}`);
    process.exitCode = 1;
  }
}

/** A bucket given as `NAME` or `s3://NAME`. */
const bucketArg = (v: string) => v.replace(/^s3:\/\//, '').replace(/\/$/, '');

/** Add `s3` and its subcommands to `program`. */
export function addS3Commands(program: Command): void {
  const s3 = program
    .command('s3')
    .description("make buckets, load test data and read objects in S3 (locally: leasehold dev's S3-compatible server)");
  s3.command('put')
    .description(
      'upload a file as one object (or each file of a directory under the key as a prefix); creates the bucket when missing',
    )
    .argument('<file>', 'file or directory to upload')
    .argument('<bucket>', 'bucket name')
    .argument('[key]', "object key, or the prefix of a directory's files; default the file name")
    .option('--endpoint <url>', ENDPOINT_HELP)
    .action((file: string, bucket: string, key: string | undefined, opts: { endpoint?: string }) =>
      s3Action(async ({ putFiles }) => {
        const { count: n, at } = await putFiles({ file, bucket: bucketArg(bucket), key, endpoint: opts.endpoint });
        console.log(`uploaded ${n} object${n === 1 ? '' : 's'} to s3://${bucketArg(bucket)}/${at}`);
      }),
    );
  s3.command('mb')
    .description('make a bucket (nothing to do when it exists)')
    .argument('<bucket>', 'bucket name, or s3://BUCKET')
    .option('--endpoint <url>', ENDPOINT_HELP)
    .action((bucket: string, opts: { endpoint?: string }) =>
      s3Action(async ({ makeBucket }) => {
        const made = await makeBucket(bucketArg(bucket), opts);
        console.log(`${made ? 'made' : 'already there:'} bucket s3://${bucketArg(bucket)}`);
      }),
    );
  s3.command('ls')
    .description('list the buckets, or the objects of a bucket under a prefix: last modified, size in bytes, key')
    .argument('[url]', 's3://BUCKET or s3://BUCKET/PREFIX (or BUCKET); none: the buckets')
    .option('--limit <n>', 'most objects listed (default all)', (v) => Math.max(1, Number.parseInt(v, 10) || 1))
    .option('--endpoint <url>', ENDPOINT_HELP)
    .action((url: string | undefined, opts: { endpoint?: string; limit?: number }) =>
      s3Action(async ({ listObjects, parseS3Url }) => {
        const where =
          url === undefined ? undefined : url.startsWith('s3://') ? parseS3Url(url, 's3 ls') : { bucket: url, rest: '' };
        const bucket = where?.bucket;
        const prefix = where?.rest ?? '';
        const n = await listObjects({ bucket, prefix, limit: opts.limit }, opts, (e) =>
          console.log(typeof e === 'string' ? e : `${e.lastModified}  ${String(e.size).padStart(10)}  ${e.key}`),
        );
        // Nothing listed is said (on stderr: stdout stays the listing), not left as silence.
        if (n === 0) {
          console.error(
            bucket === undefined
              ? 'no buckets (leasehold s3 mb BUCKET makes one; s3 put makes its bucket too)'
              : `no objects in s3://${bucket}/${prefix}`,
          );
        }
      }),
    );
  s3.command('get')
    .description("write an object's bytes to FILE, or to stdout")
    .argument('<url>', 's3://BUCKET/KEY')
    .argument('[file]', 'where to write it; default (or -) stdout')
    .option('--endpoint <url>', ENDPOINT_HELP)
    .action((url: string, file: string | undefined, opts: { endpoint?: string }) =>
      s3Action(async ({ getObject, parseS3Url, S3CommandError }) => {
        const { bucket, rest: key } = parseS3Url(url, 's3 get');
        if (key === '' || key.endsWith('/')) throw new S3CommandError(`s3 get takes an object's key, got "${url}"`);
        const size = await getObject(bucket, key, file, opts);
        if (file !== undefined && file !== '-') console.error(`wrote ${size} bytes of s3://${bucket}/${key} to ${file}`);
      }),
    );
}
