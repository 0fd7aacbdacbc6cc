// Lambda entry point: the HTTP API (API Gateway HTTP API, payload format 2.0, IAM auth).
import middy from '@middy/core';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { apiInvocation, httpErrorBoundary, invocation } from '../src/runtime/index.js';

export const handler = middy<APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Error, Context>()
  .use(invocation({ service: 'api' }))
  .use(httpErrorBoundary())
  .handler(apiInvocation);
