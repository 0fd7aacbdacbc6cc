// Lambda entry point: the scheduler (EventBridge schedule, every minute).
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { runScheduler, runtimeDeps } from '../src/runtime/index.js';
import { jsonLog } from '../src/runtime/log.js';

export const handler = middy<unknown, unknown, Error, Context>().handler(async () => {
  const result = await runScheduler(runtimeDeps());
  jsonLog('scheduler')('info', 'scheduler run', { ...result });
  return result;
});
