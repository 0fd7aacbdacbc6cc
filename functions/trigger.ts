// Lambda entry point: starts a batch from an EventBridge event (bus rule or schedule).
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { invocation, triggerInvocation, type TriggerResult } from '../src/runtime/index.js';

export const handler = middy<unknown, TriggerResult, Error, Context>()
  .use(invocation({ service: 'trigger' }))
  .handler(triggerInvocation);
