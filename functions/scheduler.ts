// Lambda entry point: the scheduler (EventBridge Scheduler, every minute).
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { invocation, schedulerInvocation, type SchedulerResult } from '../src/runtime/index.js';

export const handler = middy<unknown, SchedulerResult, Error, Context>()
  .use(invocation({ service: 'scheduler' }))
  .handler(schedulerInvocation);
