import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/runtime/index.js';

const base = { DATABASE_URL: 'postgres://u@127.0.0.1:5432/d' };
const load = (env: Record<string, string>) => loadConfig({ ...base, ...env });

/** The ConfigError `env` is refused with. */
function refusal(env: Record<string, string>): ConfigError {
  try {
    load(env);
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error(`accepted ${JSON.stringify(env)}`);
}

describe('batch settings', () => {
  it('defaults: 3 attempts, 5 s backoff capped at 10 minutes, 256 KiB outputs, 10 stalled runs, queue as deep as parallel', () => {
    expect(load({}).runner).toMatchObject({
      attempts: 3,
      backoffMs: 5_000,
      maxBackoffMs: 600_000,
      maxOutputBytes: 262_144,
      maxStalledRuns: 10,
      queueDepth: undefined,
    });
    expect(
      load({
        LEASEHOLD_MAX_BACKOFF_MS: '60000',
        LEASEHOLD_MAX_OUTPUT_BYTES: '1024',
        LEASEHOLD_MAX_STALLED_RUNS: '3',
        LEASEHOLD_QUEUE_DEPTH: '0',
      }).runner,
    ).toMatchObject({
      maxBackoffMs: 60_000,
      maxOutputBytes: 1024,
      maxStalledRuns: 3,
      queueDepth: 0,
    });
  });

  it("refuses attempts and backoffs out of range, naming the variable (the issue's inputs)", () => {
    expect(refusal({ LEASEHOLD_ATTEMPTS: '100000' }).variable).toBe('LEASEHOLD_ATTEMPTS');
    expect(refusal({ LEASEHOLD_ATTEMPTS: '100000' }).message).toMatch(/^LEASEHOLD_ATTEMPTS: .*1000.* \(got "100000"\)$/);
    expect(refusal({ LEASEHOLD_BACKOFF_MS: '1e15' }).variable).toBe('LEASEHOLD_BACKOFF_MS');
    expect(refusal({ LEASEHOLD_BACKOFF_MS: '1e15' }).message).toMatch(/86400000/);
    expect(load({ LEASEHOLD_ATTEMPTS: '1000', LEASEHOLD_BACKOFF_MS: '600000' }).runner).toMatchObject({
      attempts: 1000,
      backoffMs: 600_000,
    });
  });

  it('refuses every other setting that would reach a time out of range or make no sense', () => {
    const cases: [Record<string, string>, string][] = [
      [{ LEASEHOLD_MAX_BACKOFF_MS: '86400001' }, 'LEASEHOLD_MAX_BACKOFF_MS'],
      [{ LEASEHOLD_BACKOFF_MS: '700000' }, 'LEASEHOLD_BACKOFF_MS'],
      [{ LEASEHOLD_STALE_MS: '1e300' }, 'LEASEHOLD_STALE_MS'],
      [{ LEASEHOLD_DISPATCH_COOLDOWN_MS: '1e300' }, 'LEASEHOLD_DISPATCH_COOLDOWN_MS'],
      [{ LEASEHOLD_MOVE_TRIES: '1000000' }, 'LEASEHOLD_MOVE_TRIES'],
      [{ LEASEHOLD_MOVE_BACKOFF_MS: '1e12' }, 'LEASEHOLD_MOVE_BACKOFF_MS'],
      [{ LEASEHOLD_MAX_OUTPUT_BYTES: '0' }, 'LEASEHOLD_MAX_OUTPUT_BYTES'],
      [{ LEASEHOLD_MAX_STALLED_RUNS: '0' }, 'LEASEHOLD_MAX_STALLED_RUNS'],
      [{ LEASEHOLD_QUEUE_DEPTH: '-1' }, 'LEASEHOLD_QUEUE_DEPTH'],
    ];
    for (const [env, variable] of cases) expect(refusal(env).variable, JSON.stringify(env)).toBe(variable);
    expect(refusal({ LEASEHOLD_BACKOFF_MS: '700000' }).message).toMatch(/must not exceed LEASEHOLD_MAX_BACKOFF_MS \(600000\)/);
  });
});
