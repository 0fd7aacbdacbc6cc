// Lambda entry point: one worker invocation (async `Event` invoke with `{ batchId?, invocationId? }`).
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { invocation, workerInvocation, workerMarginMs, type WorkerEvent, type WorkerResult } from '../src/runtime/index.js';

export const handler = middy<WorkerEvent, WorkerResult, Error, Context>()
  .use(invocation({ service: 'worker', marginMs: workerMarginMs }))
  .handler(workerInvocation);
