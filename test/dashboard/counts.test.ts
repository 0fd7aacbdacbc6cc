// The batch page's counts (src/dashboard/components.ts, shownCounts): waiting items (parked on a
// callback or a sleep; docs/design.md, "Waiting items: callbacks and sleeps") show as their own
// part of the bar, the legend and the items filter, and as `not run` once the batch has ended.
import { describe, expect, it } from 'vitest';
import { ITEM_STATES, type Batch } from '../../src/dashboard/api.js';
import { shownCounts } from '../../src/dashboard/components.js';

const counts = { done: 4, failed: 1, running: 2, waiting: 3, pending: 5 };

describe('shownCounts', () => {
  it('shows waiting items as a part of their own, between running and pending', () => {
    expect(shownCounts({ status: 'open', counts })).toEqual([
      ['done', 4],
      ['failed', 1],
      ['running', 2],
      ['waiting', 3],
      ['pending', 5],
    ]);
    // The items filter offers them: GET /batches/{id}/items?state=waiting.
    expect(ITEM_STATES).toContain('waiting');
  });

  it('counts a cancelled batch’s waiting items as not run', () => {
    expect(shownCounts({ status: 'cancelled', counts })).toEqual([
      ['done', 4],
      ['failed', 1],
      ['not run', 10],
    ]);
  });

  it('counts the unfinished items of a batch that failed or succeeded early as not run too', () => {
    for (const status of ['failed', 'succeeded'] as const) {
      expect(shownCounts({ status, counts })).toEqual([
        ['done', 4],
        ['failed', 1],
        ['not run', 10],
      ]);
    }
  });

  it('counts 0 waiting from an API older than waiting items', () => {
    const older = { done: 1, failed: 0, running: 0, pending: 2 } as unknown as Batch['counts'];
    expect(shownCounts({ status: 'open', counts: older })).toContainEqual(['waiting', 0]);
    expect(shownCounts({ status: 'cancelled', counts: older })).toContainEqual(['not run', 2]);
  });
});
