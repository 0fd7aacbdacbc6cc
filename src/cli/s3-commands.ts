// `leasehold s3 …`: load test data into S3 and look at it, locally in `leasehold dev`'s
// S3-compatible server (docs/cli.md).
import type { Command } from 'commander';

/** Add `s3` and its subcommands to `program`. */
export function addS3Commands(program: Command): void {
  const s3 = program.command('s3').description("load test data into S3 (locally: leasehold dev's S3-compatible server)");
  s3.command('put')
    .description(
      'upload a file as one object (or each file of a directory under the key as a prefix); creates the bucket when missing',
    )
    .argument('<file>', 'file or directory to upload')
    .argument('<bucket>', 'bucket name')
    .argument('[key]', "object key, or the prefix of a directory's files; default the file name")
    .option('--endpoint <url>', "S3 endpoint; default AWS_ENDPOINT_URL_S3, else leasehold dev's (.leasehold/s3.json)")
    .action(async (file: string, bucket: string, key: string | undefined, opts: { endpoint?: string }) => {
      const { putFiles, S3PutError } = await import('./s3.js');
      try {
        const n = await putFiles({ file, bucket, key, endpoint: opts.endpoint });
        console.log(`uploaded ${n} object${n === 1 ? '' : 's'} to s3://${bucket}/${key ?? ''}`);
      } catch (e) {
        if (!(e instanceof S3PutError)) throw e;
        console.error(`leasehold: ${e.message}`);
        process.exitCode = 1;
      }
    });
}
