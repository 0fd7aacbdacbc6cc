// The RDS certificate authorities (140 KB of PEM) are a module loaded on first use, so a cold
// start whose connection is not TLS to RDS never reads them: until they are loaded, a connection
// that needs them fails (never a connection without verification), and only such a
// configuration loads them. A file of its own: the module state is this file's alone.
import { describe, expect, it } from 'vitest';
import {
  createRuntime,
  databaseTarget,
  dbTls,
  loadConfig,
  prepareDatabase,
  rdsCertificateAuthorities,
} from '../../src/runtime/index.js';
import { RDS_CERTIFICATE_AUTHORITIES } from '../../src/runtime/rds-ca.js';

const host = {
  LEASEHOLD_DB_HOST: 'leasehold.abc123.eu-west-1.rds.amazonaws.com',
  LEASEHOLD_DB_NAME: 'leasehold',
  LEASEHOLD_DB_USER: 'leasehold',
  LEASEHOLD_DB_IAM_AUTH: 'false',
  LEASEHOLD_DB_PASSWORD: 'pw',
};

describe('the RDS certificate authorities, loaded on first use', () => {
  it('a TLS rds target fails until they are loaded; only such a configuration loads them', async () => {
    expect(() => rdsCertificateAuthorities()).toThrow(/not loaded/);
    expect(() => dbTls({ tls: 'rds', caFile: undefined })).toThrow(/not loaded/);
    expect(() => databaseTarget(loadConfig(host))).toThrow(/not loaded/);
    // No TLS to RDS: nothing loaded, and those targets need nothing.
    await prepareDatabase(loadConfig({ DATABASE_URL: 'postgres://u@127.0.0.1:5432/db' }));
    await prepareDatabase(loadConfig({ ...host, LEASEHOLD_DB_TLS: 'system' }));
    await prepareDatabase(loadConfig({ ...host, LEASEHOLD_DB_TLS: 'off' }));
    expect(() => rdsCertificateAuthorities()).toThrow(/not loaded/);
    expect(dbTls({ tls: 'system', caFile: undefined })).toEqual({ rejectUnauthorized: true });

    await prepareDatabase(loadConfig(host));
    expect(rdsCertificateAuthorities()).toEqual([...RDS_CERTIFICATE_AUTHORITIES]);
    const target = databaseTarget(loadConfig(host));
    if (typeof target === 'string' || !target.ssl) throw new Error('expected TLS');
    expect(target.ssl).toMatchObject({ ca: [...RDS_CERTIFICATE_AUTHORITIES], rejectUnauthorized: true });
  });

  it("a runtime's prepare() loads them before deps() opens the pool", async () => {
    const saved = { ...process.env };
    try {
      delete process.env.DATABASE_URL;
      Object.assign(process.env, host);
      const runtime = createRuntime({ jobs: [], unitJobs: [] });
      await runtime.prepare();
      const deps = runtime.deps();
      expect(deps.config.db.tls).toBe('rds');
      await runtime.reset();
    } finally {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    }
  });
});
