// leasehold's own schemas are zod/mini (src/zod.ts); a job's params and a unit job's config
// may be either zod flavour. These check that an application's classic schemas still type-check
// as params and config, are parsed as before, and give the same messages as the same schema in
// zod/mini, and that leasehold's messages stay English where zod classic is never loaded.
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, expectTypeOf, it } from 'vitest';
import * as z from 'zod';
import * as zm from 'zod/mini';
import { checksum, defineJob, InvalidParamsError, JobRegistry, type Job } from '../../src/jobs/index.js';
import { defineUnitJob, type UnitJob } from '../../src/units/index.js';

const registry = (...jobs: Job<any, any>[]) => new JobRegistry(jobs, { allowedRoots: [], maxItems: 10 });
const base = { description: 'x', expand: async () => ({ items: [] }), run: async () => null };

/** The InvalidParamsError parseParams throws for `params`. */
async function refusal(r: JobRegistry, job: string, params: unknown): Promise<InvalidParamsError> {
  const error = await r.parseParams(job, params).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(InvalidParamsError);
  return error as InvalidParamsError;
}

describe('a job whose params are a zod classic schema', () => {
  const classic = defineJob({
    ...base,
    name: 'classic',
    params: z
      .object({ dir: z.string().min(1, 'must be a non-empty path'), n: z.coerce.number().int().min(1).default(3) })
      .strict(),
  });
  const mini = defineJob({
    ...base,
    name: 'mini',
    params: zm.strictObject({
      dir: zm.string().check(zm.minLength(1, 'must be a non-empty path')),
      n: zm._default(zm.coerce.number().check(zm.int(), zm.gte(1)), 3),
    }),
  });
  const r = registry(classic, mini, checksum);

  it('type-checks: the params type is the schema output', () => {
    expectTypeOf(classic).toEqualTypeOf<Job<{ dir: string; n: number }, null>>();
    expectTypeOf(mini).toEqualTypeOf<Job<{ dir: string; n: number }, null>>();
    const unitJob = defineUnitJob({
      name: 'u',
      description: 'x',
      intervalMs: 1000,
      config: z.object({ url: z.string() }),
      run: async () => undefined,
    });
    expectTypeOf(unitJob).toEqualTypeOf<UnitJob<{ url: string }>>();
  });

  it('parses valid params with the schema (defaults and coercion applied)', async () => {
    expect(await r.parseParams('classic', { dir: '/d', n: '5' })).toEqual({ params: { dir: '/d', n: 5 } });
    expect(await r.parseParams('classic', { dir: '/d' })).toEqual({ params: { dir: '/d', n: 3 } });
  });

  it('refuses bad params with the same messages as the zod/mini schema and the built-in job', async () => {
    for (const [params, field, message] of [
      [{ dir: '' }, 'params.dir', 'params.dir: must be a non-empty path'],
      [{ dir: '/d', n: '0' }, 'params.n', 'params.n: Too small: expected number to be >=1'],
      [{ dir: 7 }, 'params.dir', 'params.dir: Invalid input: expected string, received number'],
      [{ dir: '/d', x: 1 }, 'params', 'params: Unrecognized key: "x"'],
    ] as const) {
      for (const job of ['classic', 'mini']) {
        const e = await refusal(r, job, params);
        expect([e.field, e.message]).toEqual([field, message]);
      }
    }
    expect((await refusal(r, 'checksum', { dir: '' })).message).toBe('params.dir: must be a non-empty path');
  });
});

it("leasehold's messages are English where zod classic is never imported", async () => {
  // A fresh process imports only the config module (as a worker's cold start does, without classic).
  const script = `
    import { loadConfig } from ${JSON.stringify(resolve(import.meta.dirname, '../../src/runtime/config.ts'))};
    try { loadConfig({ LEASEHOLD_PARALLEL: '0' }); } catch (e) { console.log(e.message); }
  `;
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script]);
  expect(stdout.trim()).toBe('LEASEHOLD_PARALLEL: Too small: expected number to be >=1 (got "0")');
});
