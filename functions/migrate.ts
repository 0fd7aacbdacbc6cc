// Lambda entry point: applies the migrations at deploy time, before new code takes traffic.
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { invocation, migrateInvocation, type MigrateResult } from '../src/runtime/index.js';

export const handler = middy<unknown, MigrateResult, Error, Context>()
  .use(invocation({ service: 'migrate' }))
  .handler(migrateInvocation);
