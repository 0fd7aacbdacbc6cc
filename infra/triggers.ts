// What starts batches without an API call (SST v4 `sst.aws.Bus`, `sst.aws.CronV2`): the trigger
// function, subscribed to the stage's EventBridge bus for `leasehold.start-batch` events, and
// invoked by the schedules declared in infra/config.ts. Both deliver the same event shape
// (`detail: { job, tenant, datasource, params }`); the request key is the event id, so a
// redelivered event starts nothing new. Like the API, the trigger sends a new batch to a worker at
// once (src/runtime/trigger.ts), so it may invoke the worker.
import { pascal, scheduleEvent, schedules, START_BATCH_DETAIL_TYPE, type ScheduleDeclaration } from './config.js';
import { runnerFunction, type Runner } from './functions.js';

/** Create the trigger function, its bus rule and the declared schedules. */
export function triggers(r: Runner, declared: readonly ScheduleDeclaration[] = schedules) {
  const trigger = runnerFunction(r, 'trigger', { timeoutSeconds: r.settings.timeouts.triggerSeconds, invokesWorker: true });
  const bus = new sst.aws.Bus('Events');
  bus.subscribe('StartBatch', trigger, { pattern: { detailType: [START_BATCH_DETAIL_TYPE] } });
  for (const s of declared) {
    new sst.aws.CronV2(`Schedule${pascal(s.name)}`, {
      function: trigger,
      schedule: s.schedule,
      ...(s.timezone ? { timezone: s.timezone } : {}),
      enabled: s.enabled ?? true,
      event: scheduleEvent(s),
    });
  }
  return { trigger, bus };
}
