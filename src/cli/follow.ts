// The end of `--follow` (batch start, show and redrive): progress to the end, then how it ended.
import type { ApiClient } from '../client/index.js';
import { followBatch } from '../terminal/index.js';

/** Most failed items the end of a follow lists (all are in `leasehold batch results`). */
const LISTED_FAILURES = 10;

/**
 * Show batch `id`'s progress until it finishes, say how it ended (the reason, and its failed
 * items with their errors), and exit 1 unless it succeeded.
 */
export async function followToEnd(api: ApiClient, id: string): Promise<void> {
  const end = await followBatch(api, id);
  const tolerated = end.status === 'succeeded' && end.counts.failed > 0 ? ' (tolerated)' : '';
  console.log(
    `batch ${end.id} ${end.status}: ${end.counts.done} done, ${end.counts.failed} failed${tolerated}` +
      (end.status === 'cancelled' ? `, ${end.counts.running + end.counts.pending} not run` : '') +
      (end.reason ? `; ${end.reason}` : ''),
  );
  if (end.counts.failed > 0) {
    let n = 0;
    for await (const item of api.items(end.id, LISTED_FAILURES, 'failed')) {
      if (n++ === LISTED_FAILURES) break;
      console.log(`  failed ${item.key}: ${item.error ?? ''}`);
    }
    if (end.counts.failed > LISTED_FAILURES)
      console.log(`  … ${end.counts.failed - LISTED_FAILURES} more: leasehold batch results ${end.id} --state failed`);
  }
  if (end.status !== 'succeeded') process.exitCode = 1;
}
