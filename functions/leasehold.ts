// This repository's own runner: the built-in jobs, wired the way an app wires its own (docs/app.md; an app imports from 'leasehold' and 'leasehold/lambda' instead). The
// SST component points every function at one export of this file (sst.config.ts), and
// `leasehold dev` without --app runs it. Each job comes from its own file, not src/index.ts:
// with code splitting, whatever the handler file reaches statically (the barrel's createBatch,
// migrate) goes to a chunk every cold start loads (docs/design.md, "Cold starts and code splitting").
import { checksum } from '../src/jobs/checksum.js';
import { lambdaInvoke } from '../src/jobs/lambda-invoke.js';
import { outboxDelivery } from '../src/units/outbox-delivery.js';
import { createHandlers } from '../src/lambda.js';

export const { worker, scheduler, api, trigger, migrate, events } = createHandlers({
  jobs: [checksum, lambdaInvoke],
  unitJobs: [outboxDelivery()],
});
