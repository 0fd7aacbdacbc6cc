// The worker's cold-start share: functions/leasehold.ts (the handler file every function of the
// runner points at) bundled as SST bundles it for deploy, its size, and what importing it costs a
// fresh `node` process over a bare start (what a Lambda cold start pays before the handler runs).
// Goals (issue 36): at most 300,000 bytes loaded at a cold start and 60 ms (218 KB and 37 ms on
// 2026-12-01). No database needed.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { buildLikeSst, bundleInputs, importCost } from '../test/support/sst-bundle.js';

const RUNS = Number(process.env.BENCH_IMPORT_RUNS ?? 15);

/** Print `worker bundle: B bytes, import M ms` and where the bytes come from. */
export async function bundleBench(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-bench-bundle-'));
  try {
    const bundle = await buildLikeSst(
      resolve(import.meta.dirname, '..', 'functions', 'leasehold.ts'),
      join(dir, 'leasehold.mjs'),
    );
    const cost = importCost(bundle.file, RUNS);
    console.log(
      `worker bundle: ${bundle.bytes} bytes, import ${Math.round(cost.wallMs)} ms ` +
        `(CPU ${Math.round(cost.cpuMs)} ms; medians of ${cost.runs} starts over a bare node start; goals 300,000 bytes, 60 ms; ` +
        `bytes a cold start loads: the handler file and its static chunks, of ${bundle.totalBytes} in ${bundle.files.length} files)`,
    );
    // Loaded on the first connection that is TLS `rds` to a host (src/runtime/db.ts, prepareDatabase).
    const rdsCa = Object.values(bundle.metafile.outputs)
      .filter((o) => o.inputs['src/runtime/rds-ca.ts'])
      .reduce((n, o) => n + o.bytes, 0);
    console.log(
      `  with TLS to RDS: ${bundle.bytes + rdsCa} bytes (the RDS CAs, ${rdsCa} bytes, load on the first such connection)`,
    );
    const largest = bundleInputs(bundle, { coldOnly: true }).slice(0, 8);
    console.log(`  largest inputs: ${largest.map((i) => `${i.name} ${Math.round(i.bytes / 1024)} KiB`).join(', ')}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
