// The app `leasehold dev --app` runs for the fan-out bench's local-stack lines (bench/fanout.ts):
// one job, `fanout-timer`, whose `n` items each await a 20 ms timer, parallel 16. Plain
// JavaScript importing the built package (`leasehold/lambda`, dist/), the copy `bin/leasehold.js`
// runs, so the handlers carry the same mark as the command.
import { createHandlers } from 'leasehold/lambda';
import * as z from 'zod';

const timer = {
  name: 'fanout-timer',
  description: 'n items that each await a 20 ms timer',
  params: z.object({ n: z.number().int().min(1).max(200_000) }),
  async expand(params) {
    return { items: Array.from({ length: params.n }, (_, i) => ({ key: String(i).padStart(6, '0') })) };
  },
  run: () => new Promise((resolve) => setTimeout(() => resolve(null), 20)),
  parallel: 16,
};

export const { worker, scheduler, api, trigger, migrate, events } = createHandlers({ jobs: [timer] });
