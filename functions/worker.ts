// Lambda entry point: one worker invocation (async `Event` invoke with `{ batchId? }`).
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { runtimeDeps, runWorker, type WorkerEvent } from '../src/runtime/index.js';
import { jsonLog } from '../src/runtime/log.js';

export const handler = middy<WorkerEvent, unknown, Error, Context>().handler(async (event, context) => {
  const deps = runtimeDeps();
  return runWorker(event ?? {}, context, { ...deps, log: jsonLog('worker') });
});
