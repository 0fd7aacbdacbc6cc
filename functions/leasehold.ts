// This repository's own runner: the built-in jobs, wired the way an app wires its own (docs/app.md; an app imports from 'leasehold' and 'leasehold/lambda' instead). The
// SST component points every function at one export of this file (sst.config.ts), and
// `leasehold dev` without --app runs it.
import { checksum, lambdaInvoke, outboxDelivery } from '../src/index.js';
import { createHandlers } from '../src/lambda.js';

export const { worker, scheduler, api, trigger, migrate, events } = createHandlers({
  jobs: [checksum, lambdaInvoke],
  unitJobs: [outboxDelivery()],
});
