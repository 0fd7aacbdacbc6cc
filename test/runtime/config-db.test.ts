// The database settings of the one configuration module: validated at cold start, a bad value
// stops the function with a message naming the variable.
import { beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, databaseTarget, loadConfig, loadRdsCertificateAuthorities } from '../../src/runtime/index.js';

beforeAll(() => loadRdsCertificateAuthorities());

const host = {
  LEASEHOLD_DB_HOST: 'leasehold.abc123.eu-west-1.rds.amazonaws.com',
  LEASEHOLD_DB_NAME: 'leasehold',
  LEASEHOLD_DB_USER: 'leasehold',
  LEASEHOLD_DB_IAM_AUTH: 'true',
  AWS_REGION: 'eu-west-1',
};

/** The variable a ConfigError names, or undefined when the configuration loads. */
function refused(env: Record<string, string>): { variable: string; message: string } | undefined {
  try {
    loadConfig(env);
    return undefined;
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    return { variable: e.variable, message: e.message };
  }
}

describe('database configuration', () => {
  it('defaults: port 5432, TLS against the RDS bundle, IAM off, idle 120 s, lifetime 10 min', () => {
    const c = loadConfig({});
    expect(c.db).toMatchObject({
      port: 5432,
      tls: 'rds',
      iamAuth: false,
      idleTimeoutMs: 120_000,
      maxLifetimeMs: 600_000,
      pooler: 'none',
    });
    expect(loadConfig({ LEASEHOLD_DB_POOLER: 'transaction' }).db.pooler).toBe('transaction');
    expect(c.db.maxLifetimeMs).toBeLessThan(15 * 60_000);
  });

  it('reads the agreed variables', () => {
    const c = loadConfig({
      ...host,
      LEASEHOLD_DB_PORT: '6543',
      LEASEHOLD_WORKER_FUNCTION: 'app-prod-worker',
      LEASEHOLD_DEADLINE_MARGIN_MS: '15000',
    });
    expect(c.db).toMatchObject({
      host: host.LEASEHOLD_DB_HOST,
      port: 6543,
      name: 'leasehold',
      user: 'leasehold',
      iamAuth: true,
      region: 'eu-west-1',
    });
    expect(c.workerFunction).toBe('app-prod-worker');
    expect(c.deadlineMarginMs).toBe(15_000);
  });

  it.each([
    [{ ...host, LEASEHOLD_DB_PORT: '70000' }, 'LEASEHOLD_DB_PORT'],
    [{ ...host, LEASEHOLD_DB_PORT: 'five' }, 'LEASEHOLD_DB_PORT'],
    [{ ...host, LEASEHOLD_DB_IAM_AUTH: 'yes' }, 'LEASEHOLD_DB_IAM_AUTH'],
    [{ ...host, LEASEHOLD_DB_TLS: 'verify-full' }, 'LEASEHOLD_DB_TLS'],
    [{ ...host, LEASEHOLD_DB_TLS: 'off' }, 'LEASEHOLD_DB_TLS'],
    [{ ...host, LEASEHOLD_DB_NAME: '' }, 'LEASEHOLD_DB_NAME'],
    [{ ...host, LEASEHOLD_DB_USER: '' }, 'LEASEHOLD_DB_USER'],
    [{ ...host, AWS_REGION: '' }, 'AWS_REGION'],
    [{ LEASEHOLD_DB_IAM_AUTH: 'true' }, 'LEASEHOLD_DB_USER'],
    [{ ...host, LEASEHOLD_DB_MAX_LIFETIME_MS: '10' }, 'LEASEHOLD_DB_MAX_LIFETIME_MS'],
    [{ ...host, LEASEHOLD_DB_IDLE_TIMEOUT_MS: '-1' }, 'LEASEHOLD_DB_IDLE_TIMEOUT_MS'],
    [{ ...host, LEASEHOLD_DB_IAM_USER: 'x'.repeat(64) }, 'LEASEHOLD_DB_IAM_USER'],
    [{ ...host, LEASEHOLD_DB_POOLER: 'session' }, 'LEASEHOLD_DB_POOLER'],
  ])('refuses %j naming %s', (env, variable) => {
    const r = refused(env);
    expect(r?.variable).toBe(variable);
    expect(r?.message.startsWith(`${variable}: `)).toBe(true);
  });

  it('DATABASE_URL wins over incomplete host settings, and is what functions connect to', () => {
    const c = loadConfig({ DATABASE_URL: 'postgres://u@127.0.0.1:5432/db', LEASEHOLD_DB_HOST: 'somewhere' });
    expect(databaseTarget(c)).toBe('postgres://u@127.0.0.1:5432/db');
  });

  it('DATABASE_URL must be a postgres:// URL, and a refused one is named without its password', () => {
    for (const url of ['http://127.0.0.1:5432/db', 'mysql://x', 'postgres://u:s3cr3t@host:99999/db']) {
      const error = (() => {
        try {
          loadConfig({ DATABASE_URL: url });
        } catch (e) {
          return e as ConfigError;
        }
      })();
      expect(error, url).toBeInstanceOf(ConfigError);
      expect(error!.variable).toBe('DATABASE_URL');
      expect(error!.message).not.toContain('s3cr3t');
    }
    expect(() => loadConfig({ DATABASE_URL: 'postgres://u:s3cr3t@host:99999/db' })).toThrow(
      '(got "postgres://u:***@host:99999/db")',
    );
    expect(loadConfig({ DATABASE_URL: 'postgresql://u:p@127.0.0.1/db' }).databaseUrl).toBe('postgresql://u:p@127.0.0.1/db');
  });

  it('with neither DATABASE_URL nor LEASEHOLD_DB_HOST, connecting stops naming DATABASE_URL', () => {
    expect(() => databaseTarget(loadConfig({}))).toThrow(ConfigError);
    expect(() => databaseTarget(loadConfig({}))).toThrow(/^DATABASE_URL: is required/);
  });

  it('a password instead of IAM: sent as is, TLS still verified', () => {
    const target = databaseTarget(loadConfig({ ...host, LEASEHOLD_DB_IAM_AUTH: 'false', LEASEHOLD_DB_PASSWORD: 'pw' }));
    if (typeof target === 'string') throw new Error('expected a host target');
    expect(target.password).toBe('pw');
    expect(target.ssl && target.ssl.rejectUnauthorized).toBe(true);
  });
});

describe('start limits configuration', () => {
  it('defaults to 200,000 items, 64 KiB inputs, 512 MiB in all and 64 KiB bodies, and reads each variable', () => {
    expect(loadConfig({})).toMatchObject({
      maxItems: 200_000,
      maxInputBytes: 65_536,
      maxTotalBytes: 536_870_912,
      maxBodyBytes: 65_536,
    });
    expect(
      loadConfig({
        LEASEHOLD_MAX_ITEMS: '10',
        LEASEHOLD_MAX_INPUT_BYTES: '0',
        LEASEHOLD_MAX_TOTAL_BYTES: '1000',
        LEASEHOLD_MAX_BODY_BYTES: '6291456',
      }),
    ).toMatchObject({ maxItems: 10, maxInputBytes: 0, maxTotalBytes: 1000, maxBodyBytes: 6_291_456 });
  });

  it.each([
    [{ LEASEHOLD_MAX_BODY_BYTES: '6291457' }, 'LEASEHOLD_MAX_BODY_BYTES', /Lambda refuses larger request events/],
    [{ LEASEHOLD_MAX_INPUT_BYTES: '-1' }, 'LEASEHOLD_MAX_INPUT_BYTES', /./],
    [{ LEASEHOLD_MAX_TOTAL_BYTES: '0' }, 'LEASEHOLD_MAX_TOTAL_BYTES', /./],
  ])('refuses %j naming %s', (env, variable, message) => {
    expect(refused(env)).toMatchObject({ variable, message: expect.stringMatching(message) });
  });
});
