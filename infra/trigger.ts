// The Leasehold component's trigger (docs/deploy.md, "Starting batches from events"): the trigger
// function, the bus rules that invoke it (start-batch events, and the Batch Finished events chain
// rules follow), the declared schedules, and its dead-letter queue.
import { START_BATCH_DETAIL_TYPE } from '../src/contract.js';
import type { Build } from './build.js';
import type { RunnerFunction, RunnerGrants } from './functions.js';
import type { FunctionLike, Output, Platform } from './platform.js';
import { pascal, rulesPattern, scheduleEvent } from './settings.js';

type Bus = InstanceType<Platform['sst']['aws']['Bus']>;

/**
 * The trigger: start-batch events on the bus, and the declared schedules. Both invoke it
 * asynchronously: an event whose start keeps failing (a store error; an invalid event is dropped
 * and logged instead) goes to a dead-letter queue after Lambda's two retries, kept 14 days,
 * instead of being lost.
 */
export function triggerFunction(
  b: Build,
  runnerFunction: RunnerFunction,
  g: RunnerGrants,
  bus: Bus,
): { trigger: FunctionLike; triggerFailures: { arn: Output<string>; url: Output<string> } } {
  const { settings, name, t, create } = b;
  const { sst } = b.p;
  const triggerFailures = create(
    sst.aws.Queue,
    `${name}TriggerFailures`,
    { transform: { queue: { messageRetentionSeconds: 1_209_600 } } },
    t.triggerFailures,
  );
  const trigger = runnerFunction(
    'trigger',
    {
      timeout: `${settings.trigger.timeoutSeconds} seconds`,
      transform: { function: { deadLetterConfig: { targetArn: triggerFailures.arn } } },
    },
    [g.invokeWorker, { actions: ['sqs:SendMessage'], resources: [triggerFailures.arn] }, ...g.s3.check],
  );
  bus.subscribe(`${name}StartBatch`, trigger, { pattern: { detailType: [START_BATCH_DETAIL_TYPE] } });
  // Chaining: the Batch Finished events of the jobs the rules follow.
  if (settings.rules.length) bus.subscribe(`${name}AfterJobs`, trigger, { pattern: rulesPattern(settings.rules) });
  for (const s of settings.schedules) {
    create(
      sst.aws.CronV2,
      `${name}Schedule${pascal(s.name)}`,
      {
        function: trigger,
        schedule: s.schedule,
        ...(s.timezone ? { timezone: s.timezone } : {}),
        enabled: s.enabled ?? true,
        event: scheduleEvent(s),
      },
      t.schedule,
    );
  }
  return { trigger, triggerFailures };
}
