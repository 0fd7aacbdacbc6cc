// `GET /batches/{id}/events` (docs/api.md, "Progress stream"; issue 41): a batch's progress as
// Server-Sent Events. The frames are made here from the readings of a shared poller
// (src/batch/watch.ts), so every server of the stream (`leasehold dev`, a streaming function)
// sends the same text. Events:
//   progress  every reading: the batch as `GET /batches/{id}` shows it, with `ratePerSecond` (and `itemsPerSecond`, the same)
//             (items finished per second since the previous reading);
//   state     the status or the pause changed (and at the first reading): `{ status, paused }`;
//   end       the batch finished: the last `progress` came just before; the stream closes.
import type { BatchReading } from '../batch/index.js';
import { batchView } from './views.js';

/** The route of a batch's progress stream; `$1` is the batch id. */
export const BATCH_EVENTS_ROUTE = /^\/batches\/([0-9a-f-]{36})\/events$/i;

/** How long a client waits before it reconnects, ms (the stream's `retry:`). */
export const STREAM_RETRY_MS = 2_000;

/** One SSE frame: `event` and its JSON `data`. */
function frame(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

/**
 * The frames of one stream (one per listener: it keeps what the listener was last told). Feed it
 * every reading; it answers the text to send and whether the stream ends after it.
 */
export function batchEventFrames(): (r: BatchReading) => { text: string; end: boolean } {
  let prev: { finished: number; atMs: number; status: string; paused: boolean } | undefined;
  return (r) => {
    const b = r.batch;
    if (!b) return { text: frame('end', { error: 'batch_not_found' }), end: true };
    const finished = b.counts.done + b.counts.failed;
    const paused = b.pausedAt !== null;
    const dt = prev ? (r.atMs - prev.atMs) / 1000 : 0;
    const ratePerSecond = prev && dt > 0 ? Math.round(((finished - prev.finished) / dt) * 10) / 10 : 0;
    let text = prev ? '' : `retry: ${STREAM_RETRY_MS}\n\n`;
    if (!prev || prev.status !== b.status || prev.paused !== paused) text += frame('state', { status: b.status, paused });
    text += frame('progress', { ...batchView(b), ratePerSecond, itemsPerSecond: ratePerSecond });
    const end = b.status !== 'open';
    if (end) text += frame('end', { status: b.status });
    prev = { finished, atMs: r.atMs, status: b.status, paused };
    return { text, end };
  };
}
