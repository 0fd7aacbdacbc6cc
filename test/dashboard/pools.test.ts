// The Pools view's pieces (src/dashboard/format.ts, poolLimit and poolUse; components.ts, PoolBar;
// views/pools.ts, PoolsTable): each pool's limit written as `leasehold pool list` writes it, its
// items in flight against it as a meter with its percentage, and its name linked to its own view
// (docs/cli.md, "Dashboard"). Rendered to their element trees without a browser: a component here
// is a function of its props.
import { isValidElement, type VNode } from 'preact';
import { describe, expect, it } from 'vitest';
import type { Pool } from '../../src/dashboard/api.js';
import { PoolBar } from '../../src/dashboard/components.js';
import { poolLimit, poolUse } from '../../src/dashboard/format.js';
import { PoolsTable, poolHref } from '../../src/dashboard/views/pools.js';

type Props = Record<string, unknown> & { children?: unknown };

/** The elements of a tree in document order, its function components called with their props. */
function elements(node: unknown): { type: string; props: Props }[] {
  if (node === null || node === undefined || typeof node === 'boolean') return [];
  if (typeof node === 'string' || typeof node === 'number') return [];
  if (Array.isArray(node)) return node.flatMap(elements);
  if (!isValidElement(node)) throw new Error(`not an element: ${JSON.stringify(node)}`);
  const { type, props } = node as VNode<Props>;
  if (typeof type === 'function') return elements((type as (p: unknown) => unknown)(props));
  return [{ type: type as string, props }, ...elements(props.children)];
}

/** An element's text, its function components called with their props. */
function text(node: unknown): string {
  if (node === null || node === undefined || typeof node === 'boolean') return '';
  if (typeof node === 'string' || typeof node === 'number') return String(node);
  if (Array.isArray(node)) return node.map(text).join('');
  if (!isValidElement(node)) throw new Error(`not an element: ${JSON.stringify(node)}`);
  const { type, props } = node as VNode<Props>;
  if (typeof type === 'function') return text((type as (p: unknown) => unknown)(props));
  return text(props.children);
}

const pool = (p: Partial<Pool>): Pool => ({
  name: 'billing-api',
  limit: 20,
  perKey: null,
  total: 20,
  inFlight: 0,
  runs: 0,
  keys: [],
  updatedAt: '2026-12-06T12:00:00.000Z',
  ...p,
});

describe('poolLimit', () => {
  it('writes a pool’s limit, and a per-key pool’s total with its cap per key', () => {
    expect(poolLimit(pool({}))).toBe('20');
    expect(poolLimit(pool({ limit: null, perKey: 5, total: 40 }))).toBe('40, 5 per key');
  });
});

describe('poolUse', () => {
  it('gives the items in flight against the limit, floored, and the bar’s exact fill', () => {
    expect(poolUse({ inFlight: 3, total: 20 })).toEqual({ percent: 15, fill: 15, over: false, text: '3 of 20 in flight (15 %)' });
    expect(poolUse({ inFlight: 2, total: 3 })).toMatchObject({ percent: 66, fill: 200 / 3 });
    expect(poolUse({ inFlight: 0, total: 1 })).toMatchObject({ percent: 0, fill: 0, text: '0 of 1 in flight (0 %)' });
  });

  it('says a pool holds more than a lowered limit, its bar full', () => {
    const use = poolUse({ inFlight: 25, total: 20 });
    expect(use).toMatchObject({ percent: 125, fill: 100, over: true });
    expect(use.text).toBe('25 of 20 in flight (125 %): above a lowered limit, runs give permits back as their items end');
  });
});

describe('PoolBar', () => {
  it('is a meter of the items in flight on the scale of the limit, with its percentage', () => {
    const tree = PoolBar({ pool: { inFlight: 5, total: 20 } });
    const meter = elements(tree).find((e) => e.props.role === 'meter')!;
    expect(meter.props).toMatchObject({
      'aria-valuemin': '0',
      'aria-valuemax': 20,
      'aria-valuenow': 5,
      'aria-valuetext': '5 of 20 in flight (25 %)',
      'data-percent': 25,
    });
    expect(elements(meter.props.children)).toEqual([
      { type: 'span', props: expect.objectContaining({ class: 'seg running', style: { width: '25%' } }) },
    ]);
    expect(text(tree)).toContain('25 %');
  });

  it('fills in the colour of over when more are in flight than the limit', () => {
    const seg = elements(PoolBar({ pool: { inFlight: 30, total: 20 } })).find((e) => String(e.props.class).startsWith('seg'));
    expect(seg?.props).toMatchObject({ class: 'seg over', style: { width: '100%' } });
  });
});

describe('PoolsTable', () => {
  it('shows each pool’s name linked to its view, its limit, its items in flight and their share of the limit', () => {
    const pools = [
      pool({ name: 'billing-api', inFlight: 7, runs: 2 }),
      pool({ name: 'per tenant/x', limit: null, perKey: 5, total: 40, inFlight: 10, runs: 3 }),
    ];
    const els = elements(PoolsTable({ pools }));
    const rows = els.filter((e) => e.type === 'tr' && e.props['data-pool'] !== undefined);
    expect(rows.map((r) => r.props['data-pool'])).toEqual(['billing-api', 'per tenant/x']);
    const cells = rows.map((r) =>
      elements(r.props.children)
        .filter((e) => e.type === 'td')
        .map((td) => text(td.props.children)),
    );
    expect(cells.map((c) => c.slice(0, 3))).toEqual([
      ['billing-api', '20', '7'],
      ['per tenant/x', '40, 5 per key', '10'],
    ]);
    expect(cells.map((c) => c[4])).toEqual(['2', '3']);
    const links = els.filter((e) => e.type === 'a').map((a) => a.props.href);
    expect(links).toEqual([poolHref('billing-api'), poolHref('per tenant/x')]);
    // A name with a slash stays one part of the address (main.ts splits the hash on `/`).
    expect(poolHref('per tenant/x')).toBe('#/pools/per%20tenant%2Fx');
    const meters = els.filter((e) => e.props.role === 'meter').map((m) => m.props['aria-valuetext']);
    expect(meters).toEqual(['7 of 20 in flight (35 %)', '10 of 40 in flight (25 %)']);
  });
});
