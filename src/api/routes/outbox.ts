// Routes of a tenant's outbox: POST and GET /tenants/{tenant}/outbox.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { checkStorableJson, parseInput, storedNameSchema } from '../../batch/index.js';
import { enqueueOutbox, outboxStatus } from '../../units/index.js';
import type { ApiDeps } from '../deps.js';
import { objectBody, outboxSchema, tenantParam } from '../request.js';
import { json, type Result } from '../respond.js';
import { outboxStatusView } from '../views.js';

/** `GET /tenants/{tenant}/outbox`: per endpoint, its backlog, oldest message, failures and last error. */
export async function outboxStatusRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  // Any stored tenant name may be looked at, not only the registration charset.
  const tenant = parseInput(storedNameSchema, rawTenant, 'tenant');
  return json(200, outboxStatusView(await outboxStatus(deps.sql, tenant)));
}

/** `POST /tenants/{tenant}/outbox` `{ key, payload }`: enqueue on the shard the key hashes to. */
export async function enqueueOutboxRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  const tenant = tenantParam(rawTenant);
  const body = parseInput(outboxSchema, objectBody(event, deps));
  checkStorableJson(body.payload, 'payload');
  const { id, shard } = await enqueueOutbox(deps.sql, tenant, { key: body.key, payload: body.payload });
  return json(201, { id, shard });
}
