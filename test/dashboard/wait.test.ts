// A waiting item's wait in the batch page's item list (src/dashboard/format.ts, waitDeadlines;
// components.ts, WaitNote): what it waits for (a callback or a sleep) and its deadlines, each
// relative to the page's clock ("in 4 min 5 s") with its absolute time, as the page writes every
// time, in its title (docs/cli.md, "Dashboard"). The note is rendered to its element tree without a
// browser: a component here is a function of its props.
import { isValidElement, type VNode } from 'preact';
import { describe, expect, it } from 'vitest';
import { WaitNote } from '../../src/dashboard/components.js';
import { relative, waitDeadlines, when, type ItemWait } from '../../src/dashboard/format.js';

const now = Date.parse('2026-12-06T12:00:00.000Z');
const at = (ms: number) => new Date(now + ms).toISOString();

/** An element's text and the titles of its elements, its function components called with their props. */
function rendered(node: unknown): { text: string; titles: string[] } {
  if (node === null || node === undefined || typeof node === 'boolean') return { text: '', titles: [] };
  if (typeof node === 'string' || typeof node === 'number') return { text: String(node), titles: [] };
  if (Array.isArray(node)) {
    const parts = node.map(rendered);
    return { text: parts.map((p) => p.text).join(''), titles: parts.flatMap((p) => p.titles) };
  }
  if (!isValidElement(node)) throw new Error(`not an element: ${JSON.stringify(node)}`);
  const { type, props } = node as VNode<{ children?: unknown; title?: string }>;
  if (typeof type === 'function') return rendered((type as (p: unknown) => unknown)(props));
  const inner = rendered(props.children);
  return { text: inner.text, titles: props.title ? [props.title, ...inner.titles] : inner.titles };
}

describe('relative', () => {
  it('writes a time ahead or behind in the units of duration', () => {
    expect(relative(245_000)).toBe('in 4 min 5 s');
    expect(relative(30_000)).toBe('in 30 s');
    expect(relative(-3_000)).toBe('3 s ago');
    expect(relative(2 * 86_400_000 + 3_600_000)).toBe('in 2 d 1 h');
    expect(relative(NaN)).toBe('–');
  });
});

describe('waitDeadlines', () => {
  it('gives a sleep its wake', () => {
    const wait: ItemWait = { kind: 'sleep', wakeAt: at(245_000), timeoutAt: null, heartbeatBy: null };
    expect(waitDeadlines(wait, now)).toEqual([
      { label: 'wakes', at: wait.wakeAt, relative: 'in 4 min 5 s', absolute: when(wait.wakeAt) },
    ]);
    expect(when(wait.wakeAt)).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);
  });

  it('gives a callback its timeout and its heartbeat deadline, not its wake (the sooner of them)', () => {
    const wait: ItemWait = { kind: 'callback', wakeAt: at(30_000), timeoutAt: at(598_000), heartbeatBy: at(30_000) };
    expect(waitDeadlines(wait, now)).toEqual([
      { label: 'times out', at: wait.timeoutAt, relative: 'in 9 min 58 s', absolute: when(wait.timeoutAt) },
      { label: 'heartbeat due', at: wait.heartbeatBy, relative: 'in 30 s', absolute: when(wait.heartbeatBy) },
    ]);
  });

  it('gives a callback without a heartbeat deadline its timeout alone', () => {
    const wait: ItemWait = { kind: 'callback', wakeAt: at(3_600_000), timeoutAt: at(3_600_000), heartbeatBy: null };
    expect(waitDeadlines(wait, now).map((d) => [d.label, d.relative])).toEqual([['times out', 'in 1 h 0 min']]);
  });

  it('says how long ago a deadline passed that the expiry pass has not acted on yet', () => {
    const wait: ItemWait = { kind: 'sleep', wakeAt: at(-3_000), timeoutAt: null, heartbeatBy: null };
    expect(waitDeadlines(wait, now).map((d) => d.relative)).toEqual(['3 s ago']);
  });
});

describe('WaitNote', () => {
  it('shows a callback, its deadlines relative, and their times in titles', () => {
    const wait: ItemWait = { kind: 'callback', wakeAt: at(30_000), timeoutAt: at(598_000), heartbeatBy: at(30_000) };
    const note = rendered(WaitNote({ wait, now }));
    expect(note.text).toBe('callback · times out in 9 min 58 s · heartbeat due in 30 s');
    expect(note.titles).toEqual([when(wait.timeoutAt), when(wait.heartbeatBy)]);
  });

  it('shows a sleep and when it wakes', () => {
    const wait: ItemWait = { kind: 'sleep', wakeAt: at(245_000), timeoutAt: null, heartbeatBy: null };
    const note = rendered(WaitNote({ wait, now }));
    expect(note.text).toBe('sleep · wakes in 4 min 5 s');
    expect(note.titles).toEqual([when(wait.wakeAt)]);
  });
});
