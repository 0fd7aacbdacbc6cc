// GET /jobs: the batch jobs and the unit jobs this deployment knows.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import type { ApiDeps } from '../deps.js';
import { json, type Result } from '../respond.js';
import { unitJobs as unitJobRegistry } from './units.js';

/**
 * `GET /jobs`: the batch jobs (`jobs`) and the unit jobs (`unitJobs`: the app's, else the
 * built-in `outbox-delivery`) this deployment knows, each `{ name, description }`.
 */
export async function listJobs(_event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  const jobs = deps.jobs.names().map((name) => ({ name, description: deps.jobs.get(name).description }));
  const registry = unitJobRegistry(deps);
  const unitJobs = registry.names().map((name) => ({ name, description: registry.get(name).description }));
  return json(200, { jobs, unitJobs });
}
