// The scheduler's services run one after the other, and one that fails stops none of the
// others (invariant 7): the loop itself, with services that fail on purpose; no database.
import { describe, expect, it } from 'vitest';
import { runServices, type MaintenanceContext, type MaintenanceService } from '../../src/runtime/maintenance/service.js';
import type { Log } from '../../src/log.js';

const lines: { level: string; message: string; fields?: unknown }[] = [];
const log = ((level: string, message: string, fields?: unknown) => void lines.push({ level, message, fields })) as Log;
const ctx = { log } as unknown as MaintenanceContext;
const lockTimeout = Object.assign(new Error('canceling statement due to lock timeout'), { code: '55P03' });

describe('the scheduler services', () => {
  it('a failing service stops none of the others; a lock timeout is reported, any other error kept and logged', async () => {
    const ran: string[] = [];
    const service = (name: string, run: () => object, onLockTimeout?: () => object): MaintenanceService => ({
      name,
      run: async () => {
        ran.push(name);
        return run();
      },
      ...(onLockTimeout ? { onLockTimeout } : {}),
    });
    const broken = new Error('broken');
    const outcome = await runServices(ctx, [
      service(
        'sweep',
        () => {
          throw lockTimeout;
        },
        () => ({ swept: 0 }),
      ),
      service('dispatch', () => {
        throw broken;
      }),
      service('fleet', () => {
        throw new Error('second');
      }),
      service('retention', () => ({ retention: 1 })),
    ]);
    expect(ran).toEqual(['sweep', 'dispatch', 'fleet', 'retention']);
    expect(outcome.parts).toEqual({ swept: 0, retention: 1 });
    expect(outcome.lockTimeouts).toEqual(['sweep']);
    expect(outcome.error).toBe(broken);
    expect(lines.map((l) => l.message)).toEqual([
      'scheduler service dispatch failed; the others ran',
      'scheduler service fleet failed; the others ran',
    ]);
  });

  it('a lock timeout in a service that does not give up on it is its failure', async () => {
    const outcome = await runServices(ctx, [{ name: 'dispatch', run: () => Promise.reject(lockTimeout) }]);
    expect(outcome.lockTimeouts).toEqual([]);
    expect(outcome.error).toBe(lockTimeout);
  });
});
