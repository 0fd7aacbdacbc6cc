// The app's own jobs: what leasehold runs for it.
import { defineJob, defineUnitJob } from 'leasehold';
import * as z from 'zod';

/**
 * A batch job: params `{ n }`, one item per `i` in `0..n−1`, output `i²`. A real one would
 * resize images, re-index documents, call a partner API per record…
 */
export const squares = defineJob({
  name: 'squares',
  description: 'the square of every i in 0..n-1',
  params: z.object({ n: z.number().int().min(1).max(10_000) }).strict(),
  async expand(params) {
    return { items: Array.from({ length: params.n }, (_, i) => ({ key: String(i).padStart(5, '0'), input: { i } })) };
  },
  async run(item) {
    const { i } = item.input as { i: number };
    return i * i;
  },
  parallel: 8,
});

/**
 * A unit job: each owned `(tenant, shard)` checks that the tenant's URLs answer, every 2 s, and
 * logs what it found. Units move between worker processes; a run stops when its unit is lost.
 */
export const uptimeCheck = defineUnitJob({
  name: 'uptime-check',
  description: "GET each of a tenant's URLs every 2 s",
  config: z.object({ urls: z.array(z.string().url()).min(1).max(10) }),
  intervalMs: 2_000,
  weight: (config) => config.urls.length,
  async run(ctx) {
    for (const url of ctx.config.urls) {
      // Check the lease before every side effect: a process frozen past its TTL must not act.
      if (ctx.signal.aborted || !ctx.leaseValid()) return;
      const started = Date.now();
      try {
        const res = await fetch(url, {
          headers: { 'x-tenant': ctx.tenant, 'x-shard': String(ctx.shard) },
          signal: AbortSignal.any([ctx.signal, AbortSignal.timeout(5_000)]),
        });
        await res.body?.cancel();
        ctx.log('info', 'uptime', { url, status: res.status, ms: Date.now() - started });
      } catch (e) {
        ctx.log('warn', 'uptime', { url, error: (e as Error).message });
      }
    }
  },
});
