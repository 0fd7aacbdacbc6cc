// Lease settings: defaults as documented, and configurations that cannot work are refused with
// an error naming the setting.
import { hostname } from 'node:os';
import { describe, expect, it } from 'vitest';
import { LEASE_DEFAULTS, Leaser, LeaseConfigError, leaseConfig, type LeaseConfig } from '../../src/lease/index.js';
import type { Sql } from '../../src/store/index.js';
import { Recorder } from '../support/lease.js';

// Never queried: constructing a leaser touches no database.
const sql = {} as Sql;

describe('lease configuration', () => {
  it('defaults to TTL 15 s, heartbeats and rebalancing every 5 s, sweeps every 10 min with a 1 h cutoff', () => {
    const c = leaseConfig();
    expect(c).toMatchObject({
      ttlMs: 15_000,
      heartbeatIntervalMs: 5_000,
      rebalanceIntervalMs: 5_000,
      sweepIntervalMs: 600_000,
      sweepCutoffMs: 3_600_000,
      shedHysteresis: 0.2,
      claimBatch: 64,
      maxClaimPerTick: 1024,
      maxUnitCrashes: 3,
      quarantineMs: 300_000,
      maxQuarantineMs: 86_400_000,
      version: 'unknown',
      hostname: hostname(),
    });
    expect(c.processId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(leaseConfig().processId).not.toBe(c.processId);
    expect({ ...LEASE_DEFAULTS }).toEqual({
      version: 'unknown',
      ttlMs: 15_000,
      heartbeatIntervalMs: 5_000,
      rebalanceIntervalMs: 5_000,
      sweepIntervalMs: 600_000,
      sweepCutoffMs: 3_600_000,
      shedHysteresis: 0.2,
      claimBatch: 64,
      maxClaimPerTick: 1024,
      maxUnitCrashes: 3,
      quarantineMs: 300_000,
      maxQuarantineMs: 86_400_000,
    });
    // A leaser takes the same defaults; settings left undefined take them too.
    const leaser = new Leaser(sql, { ttlMs: undefined, claimBatch: 8 }, new Recorder('x'));
    expect(leaser.config).toMatchObject({ ttlMs: 15_000, heartbeatIntervalMs: 5_000, claimBatch: 8 });
    expect(leaser.processId).toBe(leaser.config.processId);
  });

  it('refuses a heartbeat interval not below the TTL, naming the setting', () => {
    for (const partial of [{ ttlMs: 5_000, heartbeatIntervalMs: 5_000 }, { heartbeatIntervalMs: 20_000 }, { ttlMs: 4_000 }]) {
      const attempt = () => new Leaser(sql, partial, new Recorder('x'));
      expect(attempt).toThrow(LeaseConfigError);
      expect(attempt).toThrow(/heartbeatIntervalMs/);
      try {
        attempt();
      } catch (e) {
        expect((e as LeaseConfigError).code).toBe('lease_config');
        expect((e as Error).name).toBe('LeaseConfigError');
      }
    }
    expect(leaseConfig({ ttlMs: 5_000, heartbeatIntervalMs: 4_999 }).heartbeatIntervalMs).toBe(4_999);
  });

  it.each<[string, Partial<LeaseConfig>]>([
    ['ttlMs', { ttlMs: 0 }],
    ['ttlMs', { ttlMs: Number.NaN }],
    ['heartbeatIntervalMs', { heartbeatIntervalMs: -1 }],
    ['rebalanceIntervalMs', { rebalanceIntervalMs: 0 }],
    ['sweepIntervalMs', { sweepIntervalMs: -1 }],
    ['sweepCutoffMs', { sweepCutoffMs: 10_000 }],
    ['shedHysteresis', { shedHysteresis: -0.1 }],
    ['shedHysteresis', { shedHysteresis: Number.NaN }],
    ['claimBatch', { claimBatch: 0 }],
    ['claimBatch', { claimBatch: 2_000 }],
    ['maxClaimPerTick', { maxClaimPerTick: Number.POSITIVE_INFINITY }],
    ['processId', { processId: '' }],
  ])('refuses a bad %s (%o)', (name, partial) => {
    expect(() => leaseConfig(partial)).toThrow(LeaseConfigError);
    expect(() => leaseConfig(partial)).toThrow(new RegExp(name));
  });

  it('accepts sweeps turned off and no hysteresis', () => {
    expect(leaseConfig({ sweepIntervalMs: 0, shedHysteresis: 0 })).toMatchObject({ sweepIntervalMs: 0, shedHysteresis: 0 });
  });
});
