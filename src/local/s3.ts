// The local S3-compatible server of `leasehold dev` and the tests (docs/design.md, "Local
// mode"): s3rver on 127.0.0.1 with a data folder, reached by the real @aws-sdk/client-s3
// through `AWS_ENDPOINT_URL_S3`. It runs in a child process of its own, started with
// `--openssl-legacy-provider`: s3rver ciphers its ListObjectsV2 continuation tokens with DES,
// which Node 17+ (OpenSSL 3) refuses otherwise, so any listing longer than one page would fail
// with an internal error.
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { S3_EXTRAS } from './s3-extras.js';

/** A running local S3 server. */
export interface LocalS3Server {
  /** `http://127.0.0.1:PORT`: the value of `AWS_ENDPOINT_URL_S3`. */
  endpoint: string;
  port: number;
  /**
   * The server's child process id: what its CPU time is read by (the S3 bench shows the share
   * of the machine the local server took beside the runs it served).
   */
  pid: number;
  /** Stop the server (SIGTERM; its data folder stays). */
  close(): Promise<void>;
}

/** What {@link startLocalS3} takes. */
export interface LocalS3Options {
  /** Data folder (created when missing): buckets are folders, objects files. */
  directory: string;
  /** TCP port on 127.0.0.1; default 0 (a free one). */
  port?: number;
  /** Buckets created at start when missing. */
  buckets?: string[];
}

// The child: runs s3rver with what s3-extras.ts adds (before its router), creates the buckets,
// prints {"port"} once it listens, stops on SIGTERM.
const CHILD = `
const S3rver = require(process.argv[1]);
const lib = require('path').dirname(process.argv[1]);
const [directory, port, buckets] = process.argv.slice(2);
// The local stack's credentials (AWS_ACCESS_KEY_ID=local) are known to it, beside s3rver's own.
require(require('path').join(lib, 'models/account.js')).DUMMY_ACCOUNT.createKeyPair('local', 'local');
const server = new S3rver({ address: '127.0.0.1', port: Number(port), directory, silent: true,
  configureBuckets: JSON.parse(buckets).map((name) => ({ name, configs: [] })) });
server.middleware.splice(server.middleware.length - 1, 0, (${S3_EXTRAS})(server, directory, lib));
server.run().then(({ port }) => process.stdout.write(JSON.stringify({ port }) + '\\n'), (e) => { console.error(e); process.exit(1); });
process.on('SIGTERM', () => server.close().then(() => process.exit(0)));
process.on('disconnect', () => process.exit(0));
`;

/**
 * Start s3rver in a child process on `options.directory` and answer once it listens.
 * @throws Error when the server could not start (the child's error output in the message).
 */
export async function startLocalS3(options: LocalS3Options): Promise<LocalS3Server> {
  mkdirSync(options.directory, { recursive: true });
  const main = createRequire(import.meta.url).resolve('s3rver');
  const child = spawn(
    process.execPath,
    [
      '--openssl-legacy-provider',
      '-e',
      CHILD,
      main,
      options.directory,
      String(options.port ?? 0),
      JSON.stringify(options.buckets ?? []),
    ],
    { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] },
  );
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const nl = out.indexOf('\n');
      if (nl !== -1) resolve((JSON.parse(out.slice(0, nl)) as { port: number }).port);
    });
    child.once('exit', (code) => reject(new Error(`the local S3 server exited (${code}): ${stderr.trim()}`)));
  });
  child.unref();
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    endpoint: `http://127.0.0.1:${port}`,
    port,
    pid: child.pid!,
    async close() {
      // Unref'd so a `leasehold dev` need not wait for it; while close() waits for its exit the
      // child must hold the event loop, or a caller with nothing else pending ends (exit 13,
      // its top-level await unsettled) before the server is gone.
      if (child.exitCode === null) {
        child.ref();
        child.kill('SIGTERM');
      }
      await exited;
    },
  };
}
