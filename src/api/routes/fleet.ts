// Routes of the fleet: GET /processes, GET and PUT /concurrency.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { parseInput } from '../../batch/index.js';
import { balanceOf, LEASE_DEFAULTS, listProcesses, readFleet, setDesired } from '../../lease/index.js';
import type { ApiDeps } from '../deps.js';
import { concurrencySchema, objectBody } from '../request.js';
import { json, type Result } from '../respond.js';
import { concurrencyView, processView } from '../views.js';

/** `GET /processes`: the fleet (its knob, fair share and balance) and every process row. */
export async function listProcessesRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  const [fleet, processes] = await Promise.all([readFleet(deps.sql), listProcesses(deps.sql)]);
  const owning = processes.filter((p) => p.live && p.role === 'fleet' && !p.retiring).map((p) => p.weight);
  const hysteresis = deps.config.lease?.shedHysteresis ?? LEASE_DEFAULTS.shedHysteresis;
  return json(200, {
    fleet: {
      ...concurrencyView(fleet),
      totalWeight: fleet.totalWeight,
      fairShare: fleet.fairShare,
      evenShare: fleet.evenShare,
      ...balanceOf(owning, fleet.fairShare, hysteresis),
    },
    processes: processes.map(processView),
  });
}

/** `GET /concurrency`: the desired count against the fleet. */
export async function getConcurrency(_event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  return json(200, concurrencyView(await readFleet(deps.sql)));
}

/** `PUT /concurrency` `{ desired }`: set the desired count; answers as `GET /concurrency`. */
export async function putConcurrency(event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  const { desired } = parseInput(concurrencySchema, objectBody(event, deps));
  await setDesired(deps.sql, desired);
  return json(200, concurrencyView(await readFleet(deps.sql)));
}
