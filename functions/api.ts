// Lambda entry point: the HTTP API (API Gateway HTTP API, payload format 2.0).
import middy from '@middy/core';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { handleApi } from '../src/api/index.js';
import { jsonLog, runtimeDeps } from '../src/runtime/index.js';

export const handler = middy<APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Error, Context>().handler(
  async (event) => handleApi(event, { ...runtimeDeps(), log: jsonLog('api') }),
);
