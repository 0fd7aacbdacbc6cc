// The deployed database connection, without AWS: IAM tokens signed offline with static
// credentials, handed to postgres.js as the password (seen by a fake server that asks for a
// cleartext password), and TLS verified against the RDS CA bundle shipped with the code.
import { execFileSync } from 'node:child_process';
import { createHash, createHmac, X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ConfigError,
  databaseTarget,
  dbTls,
  iamTokenPassword,
  loadConfig,
  loadRdsCertificateAuthorities,
  openDatabase,
  rdsCertificateAuthorities,
} from '../../src/runtime/index.js';
import { connect, type Sql } from '../../src/store/index.js';
import { fakePostgres, type FakePostgres } from './fake-postgres.js';

const credentials = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY' };
const REGION = 'eu-west-1';

/** Check a token as RDS would: a SigV4 presigned GET for service `rds-db`, computed here independently. */
function verifyToken(token: string, secret: string): { host: string; user: string; params: URLSearchParams } {
  const url = new URL(`https://${token}`);
  const enc = (s: string) => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  const query = [...url.searchParams]
    .filter(([k]) => k !== 'X-Amz-Signature')
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([k, v]) => `${enc(k)}=${enc(v)}`)
    .join('&');
  const date = url.searchParams.get('X-Amz-Date')!;
  const [, , region, service] = url.searchParams.get('X-Amz-Credential')!.split('/');
  const scope = `${date.slice(0, 8)}/${region}/${service}/aws4_request`;
  const canonical = ['GET', '/', query, `host:${url.host}\n`, 'host', createHash('sha256').update('').digest('hex')].join('\n');
  const toSign = ['AWS4-HMAC-SHA256', date, scope, createHash('sha256').update(canonical).digest('hex')].join('\n');
  let key: Buffer = createHmac('sha256', `AWS4${secret}`).update(date.slice(0, 8)).digest();
  for (const part of [region, service, 'aws4_request']) key = createHmac('sha256', key).update(part).digest();
  expect(createHmac('sha256', key).update(toSign).digest('hex')).toBe(url.searchParams.get('X-Amz-Signature'));
  return { host: url.host, user: url.searchParams.get('DBUser')!, params: url.searchParams };
}

const iamEnv = (extra: Record<string, string> = {}) => ({
  LEASEHOLD_DB_HOST: 'leasehold.abc123.eu-west-1.rds.amazonaws.com',
  LEASEHOLD_DB_PORT: '6543',
  LEASEHOLD_DB_NAME: 'leasehold',
  LEASEHOLD_DB_USER: 'leasehold_runtime',
  LEASEHOLD_DB_IAM_AUTH: 'true',
  AWS_REGION: REGION,
  ...extra,
});

let hasOpenssl = true;
try {
  execFileSync('openssl', ['version'], { stdio: 'ignore' });
} catch {
  hasOpenssl = false;
}

/** A self-signed certificate for `localhost` (its own CA), made with openssl. */
function selfSigned(dir: string): { key: string; cert: string; certFile: string } {
  const keyFile = join(dir, 'key.pem');
  const certFile = join(dir, 'cert.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      keyFile,
      '-out',
      certFile,
      '-days',
      '2',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=DNS:localhost',
    ],
    { stdio: 'ignore' },
  );
  return { key: readFileSync(keyFile, 'utf8'), cert: readFileSync(certFile, 'utf8'), certFile };
}

let dir: string;
const pools: Sql[] = [];
const servers: FakePostgres[] = [];
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'leasehold-signer-'));
  // A chunk of its own in a bundle, loaded before a connection to RDS (see rds-ca-lazy.test.ts).
  await loadRdsCertificateAuthorities();
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end({ timeout: 1 })));
  await Promise.all(servers.map((s) => s.close()));
  rmSync(dir, { recursive: true, force: true });
});

describe('IAM database authentication', () => {
  it('signs a token offline with static credentials, for the configured host, port and user', async () => {
    const config = loadConfig(iamEnv());
    const target = databaseTarget(config, credentials);
    if (typeof target === 'string') throw new Error('expected a host target');
    expect(typeof target.password).toBe('function');
    const token = await (target.password as () => Promise<string>)();
    const { host, user, params } = verifyToken(token, credentials.secretAccessKey);
    expect(host).toBe('leasehold.abc123.eu-west-1.rds.amazonaws.com:6543');
    expect(user).toBe('leasehold_runtime');
    expect(params.get('Action')).toBe('connect');
    expect(params.get('X-Amz-Algorithm')).toBe('AWS4-HMAC-SHA256');
    expect(params.get('X-Amz-Credential')).toMatch(/^AKIDEXAMPLE\/\d{8}\/eu-west-1\/rds-db\/aws4_request$/);
    expect(params.get('X-Amz-Expires')).toBe('900');
    expect(params.get('X-Amz-SignedHeaders')).toBe('host');
    // No session token with static long-term credentials; a role's would add X-Amz-Security-Token.
    expect(params.has('X-Amz-Security-Token')).toBe(false);
  });

  it('a role session token goes into the token, as RDS needs for Lambda credentials', async () => {
    const token = await iamTokenPassword({
      host: 'db.internal',
      port: 5432,
      user: 'leasehold',
      region: REGION,
      credentials: { ...credentials, sessionToken: 'FQoGZXIvYXdzEXAMPLE' },
    })();
    const { params } = verifyToken(token, credentials.secretAccessKey);
    expect(params.get('X-Amz-Security-Token')).toBe('FQoGZXIvYXdzEXAMPLE');
  });

  it('postgres.js sends a fresh token as the password of every new connection', async () => {
    const server = await fakePostgres();
    servers.push(server);
    let calls = 0;
    const tokens = iamTokenPassword({
      host: server.host,
      port: server.port,
      user: 'leasehold_runtime',
      region: REGION,
      credentials,
    });
    const sql = connect(
      {
        host: server.host,
        port: server.port,
        database: 'leasehold',
        user: 'leasehold_runtime',
        password: () => {
          calls++;
          return tokens();
        },
        ssl: false,
      },
      { max: 1 },
    );
    pools.push(sql);
    await expect(sql`select 1`).rejects.toMatchObject({ code: '28P01' });
    await expect(sql`select 1`).rejects.toMatchObject({ code: '28P01' });
    expect(calls).toBe(2);
    expect(server.logins).toHaveLength(2);
    for (const login of server.logins) {
      expect(login.params).toMatchObject({ user: 'leasehold_runtime', database: 'leasehold' });
      const { host, user } = verifyToken(login.password!, credentials.secretAccessKey);
      expect(host).toBe(`localhost:${server.port}`);
      expect(user).toBe('leasehold_runtime');
    }
  });

  it.skipIf(!hasOpenssl)(
    'from the configuration: TLS verified first, then the token as the password (skipped without openssl, which makes the test certificates)',
    async () => {
      const cert = selfSigned(dir);
      const server = await fakePostgres({ tls: cert });
      servers.push(server);
      const config = loadConfig(
        iamEnv({ LEASEHOLD_DB_HOST: server.host, LEASEHOLD_DB_PORT: String(server.port), LEASEHOLD_DB_CA_FILE: cert.certFile }),
      );
      const sql = openDatabase(config, { credentials, max: 1 });
      pools.push(sql);
      await expect(sql`select 1`).rejects.toMatchObject({ code: '28P01' });
      expect(server.logins).toHaveLength(1);
      expect(server.logins[0].tls).toBe(true);
      expect(server.logins[0].params).toMatchObject({
        user: 'leasehold_runtime',
        database: 'leasehold',
        application_name: 'leasehold',
      });
      const { host, user } = verifyToken(server.logins[0].password!, credentials.secretAccessKey);
      expect(host).toBe(`localhost:${server.port}`);
      expect(user).toBe('leasehold_runtime');
    },
  );

  it.skipIf(!hasOpenssl)(
    'a server whose certificate the RDS bundle does not vouch for gets no password (skipped without openssl)',
    async () => {
      const cert = selfSigned(dir);
      const server = await fakePostgres({ tls: cert });
      servers.push(server);
      const config = loadConfig(iamEnv({ LEASEHOLD_DB_HOST: server.host, LEASEHOLD_DB_PORT: String(server.port) }));
      const sql = openDatabase(config, { credentials, max: 1 });
      pools.push(sql);
      await expect(sql`select 1`).rejects.toThrow(/self[- ]signed certificate/);
      expect(server.logins.filter((l) => l.password !== undefined)).toEqual([]);
    },
  );

  it.skipIf(!hasOpenssl)(
    'a certificate for another name is refused (the host name is verified; skipped without openssl)',
    async () => {
      const cert = selfSigned(dir);
      const server = await fakePostgres({ tls: cert });
      servers.push(server);
      // By address: the certificate names `localhost` only.
      const config = loadConfig(
        iamEnv({
          LEASEHOLD_DB_HOST: server.address,
          LEASEHOLD_DB_PORT: String(server.port),
          LEASEHOLD_DB_CA_FILE: cert.certFile,
        }),
      );
      const sql = openDatabase(config, { credentials, max: 1 });
      pools.push(sql);
      await expect(sql`select 1`).rejects.toMatchObject({ code: 'ERR_TLS_CERT_ALTNAME_INVALID' });
      expect(server.logins.filter((l) => l.password !== undefined)).toEqual([]);
    },
  );
});

describe('TLS towards RDS', () => {
  const subjects = (pems: string[]) =>
    pems.map((p) => new X509Certificate(p).subject.split('\n').find((l) => l.startsWith('CN='))!);

  it("carries the RDS CA bundle (the global bundle's roots still valid) and verifies", () => {
    const tls = dbTls({ tls: 'rds', caFile: undefined });
    expect(tls).toMatchObject({ rejectUnauthorized: true });
    if (!tls) throw new Error('expected TLS options');
    const cns = subjects(tls.ca!);
    for (const cn of [
      'CN=Amazon RDS eu-west-1 Root CA RSA2048 G1',
      'CN=Amazon RDS us-east-1 Root CA RSA4096 G1',
      'CN=Amazon RDS ap-southeast-2 Root CA ECC384 G1',
      // RDS Proxy presents certificates from Amazon's public roots.
      'CN=Amazon Root CA 1',
    ]) {
      expect(cns).toContain(cn);
    }
    // Every entry is one parseable certificate: three generations for each of about 27 regions.
    expect(tls.ca!.length).toBe(rdsCertificateAuthorities().length);
    expect(tls.ca!.length).toBeGreaterThan(80);
  });

  it("the configured target carries the same options; a CA file adds to the bundle, system keeps Node's store", () => {
    const target = databaseTarget(loadConfig(iamEnv()), credentials);
    if (typeof target === 'string' || !target.ssl) throw new Error('expected TLS');
    expect(target.ssl.rejectUnauthorized).toBe(true);
    expect(target.ssl.ca).toEqual(rdsCertificateAuthorities());

    const pem = readFileSync(join(rdsCaSample()), 'utf8');
    const extra = dbTls({ tls: 'rds', caFile: rdsCaSample() });
    if (!extra) throw new Error('expected TLS');
    expect(extra.ca!.at(-1)).toBe(pem.trim());
    expect(dbTls({ tls: 'system', caFile: undefined })).toEqual({ rejectUnauthorized: true });
    expect(dbTls({ tls: 'off', caFile: undefined })).toBe(false);
  });

  it('an unreadable or empty CA file stops the function, naming LEASEHOLD_DB_CA_FILE', () => {
    const empty = join(dir, 'empty.pem');
    writeFileSync(empty, 'not a certificate\n');
    for (const caFile of [join(dir, 'missing.pem'), empty]) {
      let error: unknown;
      try {
        dbTls({ tls: 'rds', caFile });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).variable).toBe('LEASEHOLD_DB_CA_FILE');
    }
  });
});

/** A PEM file with one RDS root, standing in for a newer bundle given with LEASEHOLD_DB_CA_FILE. */
function rdsCaSample(): string {
  const file = join(dir, 'extra.pem');
  writeFileSync(file, `${rdsCertificateAuthorities()[0].trim()}\n`);
  return file;
}
