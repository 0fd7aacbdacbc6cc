import cliProgress from 'cli-progress';
import type { ApiBatch, ApiClient } from './client.js';

/**
 * Poll a batch every `intervalMs` (default 500 ms) until it is no longer open, showing a
 * progress bar on a terminal (a line every 2 s otherwise, e.g. in CI logs). Resolves to the
 * final batch.
 */
export async function followBatch(
  api: ApiClient,
  id: string,
  options: { intervalMs?: number; out?: NodeJS.WriteStream; signal?: AbortSignal } = {},
): Promise<ApiBatch> {
  const out = options.out ?? process.stderr;
  const interval = options.intervalMs ?? 500;
  let batch = await api.getBatch(id);
  const tty = Boolean(out.isTTY);
  const bar = tty
    ? new cliProgress.SingleBar(
        {
          stream: out,
          format: `${batch.job} {bar} {percentage}% | {value}/{total} items | failed {failed} | runs {runs} | {eta_formatted} left`,
          hideCursor: true,
          etaBuffer: 50,
        },
        cliProgress.Presets.shades_classic,
      )
    : undefined;
  const finished = (b: ApiBatch) => b.counts.done + b.counts.failed;
  bar?.start(batch.total, finished(batch), { failed: batch.counts.failed, runs: batch.runs });
  let lastLine = 0;
  while (true) {
    const extra = { failed: batch.counts.failed, runs: batch.runs };
    if (bar) bar.update(finished(batch), extra);
    else if (Date.now() - lastLine >= 2000 || batch.status !== 'open') {
      lastLine = Date.now();
      out.write(
        `${batch.job} ${batch.id}: ${finished(batch)}/${batch.total} items (failed ${batch.counts.failed}, runs ${batch.runs}) ${batch.status}\n`,
      );
    }
    if (batch.status !== 'open' || options.signal?.aborted) break;
    await new Promise((r) => setTimeout(r, interval));
    batch = await getWithRetry(api, id, options.signal);
  }
  bar?.stop();
  return batch;
}

/**
 * `getBatch`, retrying a failed read (API unreachable, 5xx) with backoff for up to ~30 s: one
 * transient error must not end the follow (or `leasehold dev --demo`). 4xx answers are final.
 */
async function getWithRetry(api: ApiClient, id: string, signal?: AbortSignal): Promise<ApiBatch> {
  let wait = 250;
  for (let waited = 0; ;) {
    try {
      return await api.getBatch(id);
    } catch (e) {
      const status = (e as { status?: number }).status ?? 0;
      if ((status >= 400 && status < 500) || waited >= 30_000 || signal?.aborted) throw e;
      await new Promise((r) => setTimeout(r, wait));
      waited += wait;
      wait = Math.min(wait * 2, 5_000);
    }
  }
}
