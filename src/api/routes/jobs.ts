// GET /jobs: the batch jobs this deployment knows.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import type { ApiDeps } from '../deps.js';
import { json, type Result } from '../respond.js';

/** `GET /jobs`: the batch jobs this deployment knows, with their descriptions. */
export async function listJobs(_event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  const jobs = deps.jobs.names().map((name) => ({ name, description: deps.jobs.get(name).description }));
  return json(200, { jobs });
}
