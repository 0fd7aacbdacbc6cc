// Routes of bulk actions (docs/design.md, "Bulk actions"; docs/api.md): POST /actions makes an
// action and works it for up to ACTION_REQUEST_BUDGET_MS; GET /actions/{id} follows it.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { getAction, parseInput, requestKeySchema, startAction, workAction } from '../../batch/index.js';
import { InvalidRequestError } from '../../errors.js';
import type { ApiDeps } from '../deps.js';
import { actionSchema, header, objectBody } from '../request.js';
import { json, type Result } from '../respond.js';
import { actionView } from '../views.js';

/**
 * How long `POST /actions` works its action's chunks before it answers, ms: within API Gateway's
 * 30 s. What is left the scheduler's actions service continues (docs/design.md, "Bulk actions").
 */
export const ACTION_REQUEST_BUDGET_MS = 20_000;

/**
 * `POST /actions` `{ action, filter, requestKey? }` (or header `Idempotency-Key`) → 200 the action
 * when it is finished, 202 while batches are left (follow `GET /actions/{id}`); `created` says
 * whether this request made it. The same key answers the action it made, and works what it has
 * left. 400 `invalid_request` (no request key, an empty filter), 413 `too_many_matched`.
 */
export async function startActionRoute(event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  const body = parseInput(actionSchema, objectBody(event, deps));
  const headerValue = header(event, 'idempotency-key');
  const headerKey = headerValue === undefined ? undefined : parseInput(requestKeySchema, headerValue, 'Idempotency-Key');
  if (body.requestKey !== undefined && headerKey !== undefined && body.requestKey !== headerKey) {
    throw new InvalidRequestError('requestKey: differs from the Idempotency-Key header; send one or make them equal');
  }
  const requestKey = body.requestKey ?? headerKey;
  if (requestKey === undefined)
    throw new InvalidRequestError('requestKey: Required (or the Idempotency-Key header): an action is made once per key');
  const { action, created } = await startAction(deps.sql, { requestKey, action: body.action, filter: body.filter });
  await workAction(deps.sql, action.id, { budgetMs: ACTION_REQUEST_BUDGET_MS, maxOpen: deps.config.maxOpen });
  const now = actionView(await getAction(deps.sql, action.id));
  return json(now.finishedAt === null ? 202 : 200, { ...now, created });
}

/** `GET /actions/{id}` → 200 the action: matched, done, skipped (with reasons), remaining. 404 `action_not_found`. */
export async function showActionRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps, [id]: string[]): Promise<Result> {
  return json(200, actionView(await getAction(deps.sql, id)));
}
