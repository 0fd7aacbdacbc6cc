// The worker process of the S3 JSON Lines bench (bench/s3.ts): one Runner (4 runs, a no-op job)
// with its own pool and S3 client, so the RSS it reports is the worker's own — not the bench's,
// which wrote the object first. Started with S3W_URL, S3W_SCHEMA and S3W_ENDPOINT. It loads the
// S3 client (one HeadBucket call), prints `{"rss"}` (bytes) and watches for batches, sampling its
// RSS every 20 ms; on `peak` it prints `{"peak"}`, the largest RSS sampled so far, and on `stop`
// it closes its runner and exits.
import { createInterface } from 'node:readline';
import { HeadBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { Runner } from '../src/batch/index.js';
import { connect } from '../src/store/index.js';

const env = (name: string) => {
  const v = process.env[name];
  if (!v) throw new Error(`bench/s3-worker.ts: ${name} is not set`);
  return v;
};
const client = new S3Client({
  region: 'us-east-1',
  endpoint: env('S3W_ENDPOINT'),
  forcePathStyle: true,
  credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
});
const sql = connect(env('S3W_URL'), { max: 8, schema: env('S3W_SCHEMA'), applicationName: 'leasehold-s3bench' });
await sql`select 1`;
await client.send(new HeadBucketCommand({ Bucket: 'bench-in' }));
const runner = new Runner(sql, { parallel: 64, maxRuns: 4, beatMs: 1_000, staleMs: 10_000, s3: () => client });
let peak = process.memoryUsage().rss;
console.log(JSON.stringify({ rss: peak }));
const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
runner.watch(() => ({ work: async () => null }), 50);
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === 'peak') console.log(JSON.stringify({ peak }));
  if (line.trim() === 'stop') break;
}
clearInterval(sampler);
await runner.close();
await sql.end();
client.destroy();
process.exit(0);
