// The command's edges that need no API: a usage error is one line and a hint (not the whole help),
// every argument error exits 1, and what it sends it says it sends.
import { execFile } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const BIN = resolve(import.meta.dirname, '../../bin/leasehold.js');
const run = promisify(execFile);
/** No API answers here: a command that got past its arguments fails to connect. */
const NOWHERE = 'http://127.0.0.1:9';

async function leasehold(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return run(process.execPath, [BIN, ...args], { env: { ...process.env, LEASEHOLD_API_URL: NOWHERE } }).then(
    (r) => ({ code: 0, ...r }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  );
}

describe('the leasehold command, before it calls the API', () => {
  it('answers a usage error with its line and a hint, exit 1, and refuses an empty tenant before any request', async () => {
    const r = await leasehold(['batch', 'show', 'some-id', '--tenant', '']);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toEqual([
      "error: option '--tenant <tenant>' argument '' is invalid. a tenant name is not empty",
      '(run with --help for usage)',
    ]);
    const unknown = await leasehold(['batch', 'sho']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).not.toMatch(/Commands:|Options:/);
  });

  it('refuses a --rate that is not above 0, and a batch update that changes nothing, exit 1', async () => {
    for (const rate of ['0', '-1', '1e-300', '0.0009', 'fast', '2000000']) {
      const r = await leasehold(['batch', 'start', 'squares', '--rate', rate]);
      expect(r, rate).toMatchObject({
        code: 1,
        stderr: expect.stringContaining('--rate must be a number of items per second from 0.001'),
      });
    }
    const none = await leasehold(['batch', 'update', 'some-id']);
    expect(none).toMatchObject({
      code: 1,
      stderr: 'leasehold: batch update needs --concurrency, --rate, --deadline, --deadline-ms or --no-deadline\n',
    });
    // A good one gets past its arguments: it fails to reach the API.
    const ok = await leasehold(['batch', 'update', 'some-id', '--rate', '0.5']);
    expect(ok).toMatchObject({ code: 1, stderr: expect.stringContaining('cannot reach the leasehold API') });
  });

  it('exits 1 for bad --config or --payload JSON, like every other argument error', async () => {
    const config = await leasehold(['units', 'put', 'acme', '--job', 'sync', '--shards', '1', '--config', '{']);
    expect(config).toMatchObject({ code: 1, stderr: expect.stringContaining('--config must be a JSON object') });
    const payload = await leasehold(['outbox', 'send', 'acme', '--key', 'k', '--payload', '{']);
    expect(payload).toMatchObject({ code: 1, stderr: expect.stringContaining('--payload must be JSON') });
  });

  it('says when a --param that looks like JSON is sent as a string, and shows no "(default: {})"', async () => {
    const r = await leasehold(['batch', 'start', 'squares', '--param', 'items=[{"key":"r1"']);
    expect(r.stderr).toContain('leasehold: --param items: not valid JSON');
    expect(r.stderr).toContain('sent as a string');
    const help = await leasehold(['batch', 'start', '--help']);
    expect(help.stdout).toMatch(/--param <key=value> +a job param/);
    expect(help.stdout).not.toContain('(default: {})');
  });

  it('sends --source and --results as the API takes them, and refuses a source it cannot read as one', async () => {
    const bodies: unknown[] = [];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        bodies.push(JSON.parse(body));
        // A source batch answers 202 at once, with nothing read yet.
        res.writeHead(202, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'b-1', total: 0, reading: true, created: true }));
      });
    });
    await new Promise<void>((up) => server.listen(0, '127.0.0.1', up));
    const api = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const lines = await leasehold([
        'batch',
        'start',
        'squares',
        '--source',
        's3://in/list.ndjson',
        '--results',
        's3://out/res',
        '--api',
        api,
      ]);
      expect(lines.code, lines.stderr).toBe(0);
      expect(lines.stdout).toMatch(/^started batch b-1 \(its workers read the source/);
      const prefix = await leasehold(['batch', 'start', 'squares', '--source', 's3://in', '--api', api]);
      expect(prefix.code, prefix.stderr).toBe(0);
      const json = await leasehold([
        'batch',
        'start',
        'squares',
        '--source',
        '{"s3":{"bucket":"in","key":"t.csv","format":"csv","keyColumn":"id"}}',
        '--api',
        api,
      ]);
      expect(json.code, json.stderr).toBe(0);
      for (const url of ['s3://in/a.jsonl.gz', 's3://in/t.tsv.gz']) {
        const r = await leasehold(['batch', 'start', 'squares', '--source', url, '--api', api]);
        expect(r.code, r.stderr).toBe(0);
      }
      expect(bodies).toMatchObject([
        {
          job: 'squares',
          source: { s3: { bucket: 'in', key: 'list.ndjson', format: 'jsonl' } },
          // A prefix gets its `/`: the results go under res/ID/, not resID/.
          results: { s3: { bucket: 'out', prefix: 'res/' } },
        },
        { source: { s3: { bucket: 'in', prefix: '' } } },
        { source: { s3: { bucket: 'in', key: 't.csv', format: 'csv', keyColumn: 'id' } } },
        { source: { s3: { bucket: 'in', key: 'a.jsonl.gz', format: 'jsonl' } } },
        { source: { s3: { bucket: 'in', key: 't.tsv.gz', format: 'csv', delimiter: 'tab' } } },
      ]);
    } finally {
      server.close();
    }
    const unknown = await leasehold(['batch', 'start', 'squares', '--source', 's3://in/list.txt']);
    expect(unknown).toMatchObject({
      code: 1,
      stderr: expect.stringContaining('--source s3://in/list.txt: a key ending in .jsonl'),
    });
    const tar = await leasehold(['batch', 'start', 'squares', '--source', 's3://in/list.tar.gz']);
    expect(tar).toMatchObject({
      code: 1,
      stderr: expect.stringContaining('--source s3://in/list.tar.gz: a key ending in .jsonl'),
    });
    const results = await leasehold(['batch', 'start', 'squares', '--results', 'out/res/']);
    expect(results).toMatchObject({ code: 1, stderr: expect.stringContaining('--results takes s3://BUCKET/PREFIX') });
  });

  it('batch --help names every batch command, and show takes --follow', async () => {
    const help = await leasehold(['batch', '--help']);
    expect(help.stdout.replace(/\s+/g, ' ')).toMatch(
      /start, change \(update\), show, list, pause, resume, cancel and redrive batches, and read their results/,
    );
    for (const command of ['start', 'update', 'show', 'results', 'list', 'cancel', 'pause', 'resume', 'redrive'])
      expect(help.stdout).toMatch(new RegExp(`\n  ${command} `));
    expect((await leasehold(['batch', 'show', '--help'])).stdout).toMatch(/--follow/);
  });
});
