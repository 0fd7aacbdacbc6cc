// The app's runner: its jobs, and the built-in ones it wants. Every function the Leasehold
// component deploys points at one export of this file; `leasehold dev --app src/leasehold.ts`
// runs them locally.
import { lambdaInvoke } from 'leasehold';
import { createHandlers, type LocalFunctions } from 'leasehold/lambda';
import { handler as score } from './functions/score.js';
import { squares, uptimeCheck } from './jobs.js';

export const { worker, scheduler, api, trigger, migrate, events } = createHandlers({
  jobs: [squares, lambdaInvoke],
  unitJobs: [uptimeCheck],
});

/**
 * Locally, `lambda-invoke` batches call these by name through leasehold dev's invoke endpoint.
 * Deployed, the component's `invokable` names the real functions instead.
 */
export const localFunctions: LocalFunctions = { score };
