// A job for API tests that takes any JSON object as params and expands to one item.
import { tmpdir } from 'node:os';
import { z } from 'zod';
import { builtinJobs, defineJob, JobRegistry } from '../../src/jobs/index.js';

/** `echo`: one item whose output is the batch's params. */
export const echo = defineJob<Record<string, unknown>, unknown>({
  name: 'echo',
  description: 'one item that outputs the params',
  params: z.record(z.string(), z.unknown()),
  async expand() {
    return { items: [{ key: 'only' }] };
  },
  async run(item) {
    return item.params;
  },
});

/** The built-in jobs plus {@link echo}. */
export function registryWithEcho(): JobRegistry {
  return new JobRegistry([...builtinJobs, echo as never], { allowedRoots: [tmpdir()], maxItems: 1000 });
}
