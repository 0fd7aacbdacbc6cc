// Item batching benchmark (part of `npm run bench`; `BENCH_ONLY=batching` runs only this;
// docs/design.md, "Item batching"): `lambda-invoke` of 20,000 items with `itemsPerCall` 100
// against the local Lambda invoke endpoint (the real `@aws-sdk/client-lambda` through
// AWS_ENDPOINT_URL_LAMBDA), counting the invocations the endpoint began, beside the same job with
// one item per invoke. Both runs use the job's own `parallel` (4 invokes at once per run) on one
// run. The one-per-call run takes fewer items (BENCH_BATCHING_SINGLE_ITEMS, default 2,000): one
// invoke per item costs the same per item however many there are, so its items/s is the rate of
// that many and the ratio compares rates, not totals. A fresh schema of its own.
import { Runner, createBatch } from '../src/batch/index.js';
import { JobRegistry, lambdaInvoke, type LambdaInvokeCallEvent, type LambdaInvokeEvent } from '../src/jobs/index.js';
import { createInvokeEndpoint, localLambdaEnv } from '../src/local/index.js';
import { batchOf } from './runs.js';
import { benchSchema } from './schema.js';

const ITEMS = Number(process.env.BENCH_BATCHING_ITEMS ?? 20_000);
const SINGLE_ITEMS = Number(process.env.BENCH_BATCHING_SINGLE_ITEMS ?? 2_000);
const PER_CALL = 100;

/** A function that scores each item it gets: a batched event answers one result per item. */
function score(event: unknown): unknown {
  const e = event as Partial<LambdaInvokeCallEvent> & Partial<LambdaInvokeEvent>;
  const one = (input: unknown) => ({ score: ((input as { i: number }).i * 7) % 100 });
  return e.items ? e.items.map((item) => ({ key: item.key, output: one(item.input) })) : one(e.input);
}

export async function batchingBench(url: string): Promise<void> {
  const { sql, drop } = await benchSchema(url, 'bench_batching', 4);
  let invocations = 0;
  const endpoint = createInvokeEndpoint({ functions: { score }, onInvoke: () => invocations++ });
  const saved = { ...process.env };
  try {
    const { url: endpointUrl } = await endpoint.start();
    Object.assign(process.env, localLambdaEnv(endpointUrl), { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' });
    const registry = new JobRegistry([lambdaInvoke], { allowedRoots: [], maxItems: 200_000, invokable: { score: 'score' } });
    const runner = new Runner(sql, { beatMs: 1_000, staleMs: 30_000 });

    /** Run a lambda-invoke batch of `n` items to its end: the invocations it made and its items/s. */
    const once = async (n: number, params: object) => {
      const base = batchOf(n);
      const { batch } = await createBatch(sql, {
        ...base,
        job: 'lambda-invoke',
        params: { functionName: 'score', ...params },
        items: (base.items as { key: string }[]).map((item, i) => ({ key: item.key, input: { i } })),
      });
      const before = invocations;
      const t0 = performance.now();
      await runner.takeOver(registry.resolve, batch.id);
      const result = await runner.running(batch.id)!;
      const seconds = (performance.now() - t0) / 1_000;
      if (result.outcome !== 'succeeded') throw new Error(`bench batching run ended ${result.outcome}`, { cause: result.error });
      return { invocations: invocations - before, perSecond: n / seconds };
    };

    const batched = await once(ITEMS, { itemsPerCall: PER_CALL });
    const single = await once(SINGLE_ITEMS, {});
    console.log(
      `itemsPerCall ${PER_CALL}: ${batched.invocations} invocations, ${Math.round(batched.perSecond)} items/s ` +
        `(${(batched.perSecond / single.perSecond).toFixed(1)}× one per call)`,
    );
    console.log(
      `  (${ITEMS.toLocaleString('en-US')} items; one per call: ${SINGLE_ITEMS.toLocaleString('en-US')} items, ` +
        `${single.invocations} invocations, ${Math.round(single.perSecond)} items/s; 4 invokes at once, one run, local invoke endpoint)`,
    );
    await runner.close();
  } finally {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    Object.assign(process.env, saved);
    await endpoint.stop({ wait: false });
    await drop();
  }
}
