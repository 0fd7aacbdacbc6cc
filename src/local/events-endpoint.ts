// A local EventBridge PutEvents endpoint (docs/design.md, "Local mode"): the real
// `@aws-sdk/client-eventbridge` reaches it through AWS_ENDPOINT_URL_EVENTBRIDGE, and it routes
// each event as the deployed bus's rules would: `leasehold.start-batch` events and, when a chain
// rule follows their job, leasehold's own `Batch Finished` events, to the trigger handler.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { closeServer, listen, readBody } from './http-util.js';
import {
  BATCH_FINISHED_DETAIL_TYPE,
  EVENT_SOURCE,
  PUT_EVENTS_MAX_BYTES,
  putEventsEntrySize,
  START_BATCH_DETAIL_TYPE,
} from '../contract.js';

/** One event as a rule's target receives it (EventBridge's envelope). */
export interface LocalBusEvent {
  version: '0';
  id: string;
  'detail-type': string;
  source: string;
  account: string;
  time: string;
  region: string;
  resources: string[];
  detail: unknown;
}

/** What {@link createEventsEndpoint} takes. */
export interface EventsEndpointOptions {
  /**
   * Whether an event goes to the trigger (the bus's rules): default, a `leasehold.start-batch`
   * event or a `Batch Finished` event from source `leasehold` (the trigger matches chain rules).
   */
  routes?: (event: LocalBusEvent) => boolean;
  /** Called for each event a rule routes, after PutEvents answered (like a rule's async target). */
  deliver: (event: LocalBusEvent) => Promise<unknown>;
  /** Every event put, routed or not, as it arrives (for tests, benches and the dev log). */
  onEvent?: (event: LocalBusEvent, routed: boolean) => void;
  /** Called when a delivery fails (the trigger threw). */
  onError?: (error: unknown, event: LocalBusEvent) => void;
  /** Port on 127.0.0.1; default any free one. */
  port?: number;
}

/** A running local PutEvents endpoint. */
export interface EventsEndpoint {
  /** `http://127.0.0.1:<port>`: the value of `AWS_ENDPOINT_URL_EVENTBRIDGE`. */
  url: string;
  /** Stop listening and wait for the deliveries in flight. */
  close(): Promise<void>;
}

/** The default routing: the deployed bus's two rules (start-batch events; Batch Finished for chain rules). */
export function defaultRoute(event: LocalBusEvent): boolean {
  return (
    event['detail-type'] === START_BATCH_DETAIL_TYPE ||
    (event.source === EVENT_SOURCE && event['detail-type'] === BATCH_FINISHED_DETAIL_TYPE)
  );
}

/** The variables that point the SDK's EventBridge client at `url`, with the local credentials. */
export function localEventsEnv(url: string): Record<string, string> {
  return {
    AWS_ENDPOINT_URL_EVENTBRIDGE: url,
    AWS_ACCESS_KEY_ID: process.env.AWS_ACCESS_KEY_ID ?? 'local',
    AWS_SECRET_ACCESS_KEY: process.env.AWS_SECRET_ACCESS_KEY ?? 'local',
    AWS_REGION: process.env.AWS_REGION ?? 'us-east-1',
  };
}

interface PutEntry {
  Source?: unknown;
  DetailType?: unknown;
  Detail?: unknown;
  EventBusName?: unknown;
  Resources?: unknown;
  Time?: unknown;
}

/**
 * Serve PutEvents (AWS JSON 1.1, `X-Amz-Target: AWSEvents.PutEvents`) on 127.0.0.1. Each entry
 * needs `Source`, `DetailType` and `Detail` (a JSON object's text), as EventBridge checks; an
 * entry without them fails alone (`InvalidArgument`), the others are accepted with a fresh
 * `EventId`. Accepted events are routed after the answer, each delivery on its own (a failed one
 * is reported through `onError`, never to the caller: as with an async Lambda target). Other
 * operations answer 400 `UnknownOperationException`; a call whose entries add up past 256 KiB
 * (EventBridge's count, {@link putEventsEntrySize}) fails whole, 400 `ValidationException`, as
 * EventBridge's does. Signatures are not checked.
 */
export async function createEventsEndpoint(options: EventsEndpointOptions): Promise<EventsEndpoint> {
  const routes = options.routes ?? defaultRoute;
  const inFlight = new Set<Promise<void>>();
  const region = process.env.AWS_REGION ?? 'us-east-1';
  const answer = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/x-amz-json-1.1' });
    res.end(JSON.stringify(body));
  };
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const target = String(req.headers['x-amz-target'] ?? '');
    const raw = await readBody(req, 1_048_576);
    if (req.method !== 'POST' || target !== 'AWSEvents.PutEvents') {
      return answer(res, 400, { __type: 'UnknownOperationException', message: `not served locally: ${target || req.method}` });
    }
    if (raw === undefined) return answer(res, 413, { __type: 'ValidationException', message: 'request over 1 MiB' });
    let body: { Entries?: PutEntry[] };
    try {
      body = JSON.parse(raw.toString('utf8')) as { Entries?: PutEntry[] };
    } catch {
      return answer(res, 400, { __type: 'SerializationException', message: 'body is not JSON' });
    }
    const entries = Array.isArray(body.Entries) ? body.Entries : [];
    if (entries.length < 1 || entries.length > 10) {
      return answer(res, 400, { __type: 'ValidationException', message: 'Entries: 1 to 10 entries' });
    }
    // EventBridge refuses the whole call when its entries add up past 256 KiB.
    if (entries.reduce((n, e) => n + putEventsEntrySize(e), 0) > PUT_EVENTS_MAX_BYTES) {
      return answer(res, 400, {
        __type: 'ValidationException',
        message: 'Total size of the entries in the request is over the limit.',
      });
    }
    const accepted: LocalBusEvent[] = [];
    const out = entries.map((e) => {
      let detail: unknown;
      try {
        detail = typeof e.Detail === 'string' ? JSON.parse(e.Detail) : undefined;
      } catch {
        detail = undefined;
      }
      if (typeof e.Source !== 'string' || typeof e.DetailType !== 'string' || detail === null || typeof detail !== 'object') {
        return { ErrorCode: 'InvalidArgument', ErrorMessage: 'Source, DetailType and Detail (a JSON object) are required' };
      }
      const time =
        typeof e.Time === 'number' ? new Date(e.Time * 1000) : typeof e.Time === 'string' ? new Date(e.Time) : new Date();
      const event: LocalBusEvent = {
        version: '0',
        id: randomUUID(),
        'detail-type': e.DetailType,
        source: e.Source,
        account: '000000000000',
        time: (Number.isFinite(time.getTime()) ? time : new Date()).toISOString().replace(/\.\d{3}Z$/, 'Z'),
        region,
        resources: Array.isArray(e.Resources) ? e.Resources.filter((r): r is string => typeof r === 'string') : [],
        detail,
      };
      accepted.push(event);
      return { EventId: event.id };
    });
    answer(res, 200, { FailedEntryCount: out.filter((o) => 'ErrorCode' in o).length, Entries: out });
    for (const event of accepted) {
      const routed = routes(event);
      options.onEvent?.(event, routed);
      if (!routed) continue;
      const delivery: Promise<void> = options
        .deliver(event)
        .then(
          () => undefined,
          (error: unknown) => options.onError?.(error, event),
        )
        .finally(() => inFlight.delete(delivery));
      inFlight.add(delivery);
    }
  };
  const server: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) answer(res, 500, { __type: 'InternalException', message: String(error) });
    });
  });
  const { url } = await listen(server, options.port ?? 0, '127.0.0.1');
  return {
    url,
    close: async () => {
      const drained = (async () => {
        while (inFlight.size) await Promise.allSettled([...inFlight]);
      })();
      await closeServer(server, drained);
    },
  };
}
