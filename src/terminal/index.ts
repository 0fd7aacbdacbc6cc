// Terminal output shared by the `leasehold` command (src/cli/) and `leasehold dev` (src/local/):
// one writer per stream that keeps lines above a progress bar, and following a batch's progress
// to its end. Node.js only (a TTY, cli-progress); the API client it polls is src/client/.
import cliProgress from 'cli-progress';
import type { ApiBatch, ApiClient } from '../client/index.js';

/**
 * One writer for a terminal stream: {@link say} writes a line, and while a progress bar is shown
 * ({@link bar}) the line goes above the bar (cli-progress's `MultiBar.log`), so status lines, the
 * last line of a follow and the stop messages never land inside the bar.
 */
export class Terminal {
  private multibar: cliProgress.MultiBar | undefined;

  constructor(readonly out: NodeJS.WriteStream = process.stderr) {}

  /** Whether the stream is a terminal (a bar is drawn only there). */
  get tty(): boolean {
    return Boolean(this.out.isTTY);
  }

  /** Write `line` (no newline needed), above the bar while one is shown. */
  say(line: string): void {
    if (this.multibar) this.multibar.log(line + '\n');
    else this.out.write(line + '\n');
  }

  /**
   * Show a progress bar of `total` with `format` (cli-progress's format string or function);
   * the caller updates it (its value, and its total when that grew) and calls `done()` once, which draws it a last time, writes the lines
   * said meanwhile and leaves the cursor below it. Only one bar at a time.
   * @throws {Error} a bar is shown already.
   */
  bar(
    total: number,
    start: number,
    payload: object,
    format: string | cliProgress.GenericFormatter,
  ): { update(value: number, payload: object, total?: number): void; done(): void } {
    if (this.multibar) throw new Error('a progress bar is shown already');
    const multibar = new cliProgress.MultiBar(
      { stream: this.out, format, hideCursor: true, etaBuffer: 50, emptyOnZero: true },
      cliProgress.Presets.shades_classic,
    );
    const bar = multibar.create(total, start, payload);
    this.multibar = multibar;
    return {
      update: (value, p, total) => {
        // A batch read from a source grows while its runs read it.
        if (total !== undefined && total !== bar.getTotal()) bar.setTotal(total);
        bar.update(value, p);
      },
      done: () => {
        if (this.multibar !== multibar) return;
        // stop() draws the bars but not the lines logged since the last frame: draw them first.
        (multibar as unknown as { update(): void }).update();
        multibar.stop();
        this.multibar = undefined;
      },
    };
  }
}

/** The follow's bar: job, bar, percent, counts, runs, and the time left once there is an estimate. */
function followFormat(job: string): cliProgress.GenericFormatter {
  return (options, params, payload: { failed: number; runs: number }) => {
    const bar = cliProgress.Format.BarFormat(params.progress, options);
    const pct = Math.floor(params.progress * 100);
    // Until enough items finished, cli-progress's estimate is NULL or INF ("NFs left"): say nothing.
    const left =
      Number.isFinite(params.eta) && params.eta > 0 && params.value > 0
        ? ` | ${cliProgress.Format.TimeFormat(params.eta, options, 5)} left`
        : '';
    return `${job} ${bar} ${pct}% | ${params.value}/${params.total} items | failed ${payload.failed} | runs ${payload.runs}${left}`;
  };
}

/**
 * Poll a batch every `intervalMs` (default 500 ms) until it is no longer open, showing a
 * progress bar on a terminal (`terminal`, default one on stderr). Elsewhere (CI logs, a pipe) it
 * writes a line when what it says changed, at most every 2 s, and the last one. Resolves to the
 * final batch.
 */
export async function followBatch(
  api: ApiClient,
  id: string,
  options: { intervalMs?: number; terminal?: Terminal; signal?: AbortSignal } = {},
): Promise<ApiBatch> {
  const terminal = options.terminal ?? new Terminal();
  const interval = options.intervalMs ?? 500;
  let batch = await api.getBatch(id);
  const finished = (b: ApiBatch) => b.counts.done + b.counts.failed;
  const bar = terminal.tty
    ? terminal.bar(batch.total, finished(batch), { failed: batch.counts.failed, runs: batch.runs }, followFormat(batch.job))
    : undefined;
  let lastAt = 0;
  let lastLine = '';
  // The progress stream where the API serves it (docs/api.md, "Progress stream"); polling
  // otherwise, and after a stream that ended before the batch did.
  const stream = batch.status === 'open' ? await api.batchEvents(id, options.signal) : undefined;
  let streamed = stream?.[Symbol.asyncIterator]();
  try {
    while (true) {
      const extra = { failed: batch.counts.failed, runs: batch.runs };
      if (bar) bar.update(finished(batch), extra, batch.total);
      else {
        const waiting = batch.counts.waiting ? `, waiting ${batch.counts.waiting}` : '';
        const line = `${batch.job} ${batch.id}: ${finished(batch)}/${batch.total} items (failed ${batch.counts.failed}${waiting}, runs ${batch.runs}) ${batch.status}`;
        if (line !== lastLine && (Date.now() - lastAt >= 2000 || batch.status !== 'open')) {
          lastAt = Date.now();
          lastLine = line;
          terminal.say(line);
        }
      }
      if (batch.status !== 'open' || options.signal?.aborted) break;
      const next = streamed ? await streamed.next() : undefined;
      if (next && !next.done) {
        batch = next.value;
        continue;
      }
      streamed = undefined;
      await new Promise((r) => setTimeout(r, interval));
      batch = await getWithRetry(api, id, options.signal);
    }
  } finally {
    bar?.done();
  }
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
