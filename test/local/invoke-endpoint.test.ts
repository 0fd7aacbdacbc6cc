import { request as httpRequest } from 'node:http';
import { InvokeCommand, LambdaClient, ResourceNotFoundException } from '@aws-sdk/client-lambda';
import type { Context } from 'aws-lambda';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createInvokeEndpoint,
  localLambdaEnv,
  LocalInvocationTimeoutError,
  type InvokeEndpoint,
  type InvokeEndpointOptions,
} from '../../src/local/index.js';
import { deferred } from '../support/waits.js';
import { sleep } from '../support/time.js';

const encode = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));
const decode = (bytes: Uint8Array | undefined) => JSON.parse(new TextDecoder().decode(bytes)) as unknown;

const clients: LambdaClient[] = [];
const endpoints: InvokeEndpoint[] = [];

function client(url: string): LambdaClient {
  const c = new LambdaClient({
    endpoint: url,
    region: 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    maxAttempts: 1,
  });
  clients.push(c);
  return c;
}

async function started(options: InvokeEndpointOptions) {
  const endpoint = createInvokeEndpoint(options);
  endpoints.push(endpoint);
  const { url } = await endpoint.start();
  return { endpoint, url };
}

afterEach(async () => {
  for (const c of clients.splice(0)) c.destroy();
  await Promise.all(endpoints.splice(0).map((e) => e.stop({ wait: false })));
});

describe('local Lambda invoke endpoint', () => {
  it('delivers an async SDK invoke to the handler with its payload and answers 202', async () => {
    const seen: { event: unknown; context: Context }[] = [];
    const arrived = deferred();
    const { endpoint, url } = await started({
      functions: {
        worker: async (event: unknown, context: Context) => {
          seen.push({ event, context });
          arrived.resolve();
        },
      },
      timeoutMs: 5_000,
    });

    const out = await client(url).send(
      new InvokeCommand({ FunctionName: 'worker', InvocationType: 'Event', Payload: encode({ batchId: 'b-1' }) }),
    );
    expect(out.StatusCode).toBe(202);
    await arrived.promise;
    await endpoint.idle();

    expect(seen).toHaveLength(1);
    const [{ event, context }] = seen;
    expect(event).toEqual({ batchId: 'b-1' });
    expect(context.functionName).toBe('worker');
    expect(context.awsRequestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(context.invokedFunctionArn).toMatch(/^arn:aws:lambda:[a-z0-9-]+:\d{12}:function:worker$/);
    const remaining = context.getRemainingTimeInMillis();
    expect(remaining).toBeGreaterThan(3_000);
    expect(remaining).toBeLessThanOrEqual(5_000);
    expect(endpoint.completed).toBe(1);
    expect(endpoint.failed).toBe(0);
  });

  it('is reached by a client configured only through AWS_ENDPOINT_URL_LAMBDA', async () => {
    const received = deferred();
    let payload: unknown;
    const { url } = await started({
      functions: {
        scheduler: async (event: unknown) => {
          payload = event;
          received.resolve();
          return { ok: true };
        },
      },
    });

    const saved = { ...process.env };
    try {
      Object.assign(process.env, localLambdaEnv(url));
      delete process.env.AWS_PROFILE;
      const viaEnv = new LambdaClient({ maxAttempts: 1 });
      clients.push(viaEnv);
      const out = await viaEnv.send(new InvokeCommand({ FunctionName: 'scheduler', Payload: encode({ tick: 1 }) }));
      expect(out.StatusCode).toBe(200);
      expect(decode(out.Payload)).toEqual({ ok: true });
      await received.promise;
      expect(payload).toEqual({ tick: 1 });
    } finally {
      for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
      Object.assign(process.env, saved);
    }
  });

  it('returns the result of a RequestResponse invoke, and a thrown error as an Unhandled function error', async () => {
    const { endpoint, url } = await started({
      functions: {
        echo: async (event: unknown, context: Context) => ({ event, name: context.functionName }),
        nothing: async () => undefined,
        boom: async () => {
          throw new TypeError('kaput');
        },
      },
    });
    const lambda = client(url);

    const ok = await lambda.send(new InvokeCommand({ FunctionName: 'echo', Payload: encode({ a: [1, 2] }) }));
    expect(ok.StatusCode).toBe(200);
    expect(ok.FunctionError).toBeUndefined();
    expect(decode(ok.Payload)).toEqual({ event: { a: [1, 2] }, name: 'echo' });

    const none = await lambda.send(new InvokeCommand({ FunctionName: 'nothing' }));
    expect(decode(none.Payload)).toBeNull();

    const failed = await lambda.send(new InvokeCommand({ FunctionName: 'boom', Payload: encode({}) }));
    expect(failed.StatusCode).toBe(200);
    expect(failed.FunctionError).toBe('Unhandled');
    expect(decode(failed.Payload)).toMatchObject({ errorType: 'TypeError', errorMessage: 'kaput' });
    expect(endpoint.completed).toBe(2);
    expect(endpoint.failed).toBe(1);
  });

  it('resolves function ARNs and qualified names to the function', async () => {
    const { url } = await started({ functions: { worker: async () => 'hit' } });
    const lambda = client(url);
    for (const FunctionName of ['arn:aws:lambda:us-east-1:123456789012:function:worker', 'worker:$LATEST']) {
      const out = await lambda.send(new InvokeCommand({ FunctionName }));
      expect(decode(out.Payload)).toBe('hit');
    }
  });

  it('answers an unknown function with a ResourceNotFoundException the SDK recognises', async () => {
    const { url } = await started({ functions: { worker: async () => {} } });
    const error = await client(url)
      .send(new InvokeCommand({ FunctionName: 'nope', InvocationType: 'Event', Payload: encode({}) }))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResourceNotFoundException);
    expect((error as ResourceNotFoundException).$metadata.httpStatusCode).toBe(404);
    expect((error as Error).message).toContain('function:nope');

    const raw = await fetch(`${url}/2015-03-31/functions/nope/invocations`, { method: 'POST', body: '{}' });
    expect(raw.status).toBe(404);
    expect(raw.headers.get('x-amzn-errortype')).toBe('ResourceNotFoundException');
    expect(await raw.json()).toEqual({ Type: 'User', message: expect.stringContaining('nope') });
  });

  it('rejects a payload that is not JSON, and an async payload above the Event limit', async () => {
    const { endpoint, url } = await started({ functions: { worker: async () => {} }, maxEventPayloadBytes: 1_000 });
    const bad = await fetch(`${url}/2015-03-31/functions/worker/invocations`, { method: 'POST', body: '{nope' });
    expect(bad.status).toBe(400);
    expect(bad.headers.get('x-amzn-errortype')).toBe('InvalidRequestContentException');

    const big = await fetch(`${url}/2015-03-31/functions/worker/invocations`, {
      method: 'POST',
      headers: { 'x-amz-invocation-type': 'Event' },
      body: JSON.stringify({ blob: 'x'.repeat(2_000) }),
    });
    expect(big.status).toBe(413);
    expect(big.headers.get('x-amzn-errortype')).toBe('RequestEntityTooLargeException');
    expect(endpoint.completed + endpoint.failed).toBe(0);
  });

  it('never runs more Event invocations at once than its concurrency, and runs them all in order', async () => {
    let now = 0;
    let peak = 0;
    const started_: number[] = [];
    const { endpoint, url } = await started({
      concurrency: 3,
      functions: {
        worker: async (event: unknown) => {
          now++;
          peak = Math.max(peak, now);
          started_.push((event as { n: number }).n);
          await sleep(20 + Math.random() * 20);
          now--;
        },
      },
    });
    const lambda = client(url);
    // Sequential sends fix the arrival order, so FIFO start order is observable.
    for (let n = 0; n < 20; n++) {
      const out = await lambda.send(
        new InvokeCommand({ FunctionName: 'worker', InvocationType: 'Event', Payload: encode({ n }) }),
      );
      expect(out.StatusCode).toBe(202);
      expect(endpoint.running()).toBeLessThanOrEqual(3);
    }
    expect(endpoint.running() + endpoint.queued() + endpoint.completed).toBe(20);
    await endpoint.idle();

    expect(peak).toBe(3);
    expect(endpoint.completed).toBe(20);
    expect(endpoint.running()).toBe(0);
    expect(endpoint.queued()).toBe(0);
    expect(started_).toEqual([...Array(20).keys()]);
  });

  it('holds the limit under 20 concurrent SDK invokes', async () => {
    let now = 0;
    let peak = 0;
    const { endpoint, url } = await started({
      concurrency: 3,
      functions: {
        worker: async () => {
          now++;
          peak = Math.max(peak, now);
          await sleep(30);
          now--;
        },
      },
    });
    const lambda = client(url);
    const outs = await Promise.all(
      Array.from({ length: 20 }, (_, n) =>
        lambda.send(new InvokeCommand({ FunctionName: 'worker', InvocationType: 'Event', Payload: encode({ n }) })),
      ),
    );
    expect(outs.map((o) => o.StatusCode)).toEqual(Array(20).fill(202));
    await endpoint.idle();
    expect(peak).toBe(3);
    expect(endpoint.completed).toBe(20);
  });

  it('reports handler failures to onError and keeps serving', async () => {
    const errors: unknown[] = [];
    const done: { ok: boolean; functionName: string }[] = [];
    const { endpoint, url } = await started({
      functions: {
        flaky: async (event: unknown) => {
          if ((event as { fail: boolean }).fail) throw new Error('flaky failed');
          return 'fine';
        },
      },
      onError: (error) => errors.push(error),
      onDone: (outcome) => done.push({ ok: outcome.ok, functionName: outcome.functionName }),
      onInvoke: () => {
        throw new Error('a broken observer changes nothing');
      },
    });
    const lambda = client(url);
    await lambda.send(new InvokeCommand({ FunctionName: 'flaky', InvocationType: 'Event', Payload: encode({ fail: true }) }));
    await endpoint.idle();
    const out = await lambda.send(new InvokeCommand({ FunctionName: 'flaky', Payload: encode({ fail: false }) }));

    expect(decode(out.Payload)).toBe('fine');
    expect(errors).toHaveLength(1);
    expect((errors[0] as Error).message).toBe('flaky failed');
    expect(done).toEqual([
      { ok: false, functionName: 'flaky' },
      { ok: true, functionName: 'flaky' },
    ]);
    expect(endpoint.failed).toBe(1);
    expect(endpoint.completed).toBe(1);
  });

  it('reports an invocation running past its timeout, and counts down remaining time on the given clock', async () => {
    const errors: unknown[] = [];
    const release = deferred();
    let t = 1_000_000;
    const remaining: number[] = [];
    const { endpoint, url } = await started({
      timeoutMs: 50,
      clock: { now: () => t },
      functions: {
        slow: async (_event: unknown, context: Context) => {
          remaining.push(context.getRemainingTimeInMillis());
          t += 30;
          remaining.push(context.getRemainingTimeInMillis());
          t += 100;
          remaining.push(context.getRemainingTimeInMillis());
          await release.promise;
        },
      },
      onError: (e) => errors.push(e),
    });
    const out = await client(url).send(new InvokeCommand({ FunctionName: 'slow' }));
    expect(out.FunctionError).toBe('Unhandled');
    expect(decode(out.Payload)).toMatchObject({ errorMessage: expect.stringContaining('Task timed out after 0.05 seconds') });
    expect(remaining).toEqual([50, 20, 0]);
    expect(errors[0]).toBeInstanceOf(LocalInvocationTimeoutError);
    // The handler still holds its slot until it really ends.
    expect(endpoint.running()).toBe(1);
    expect(endpoint.failed).toBe(1);
    release.resolve();
    await endpoint.idle();
    expect(endpoint.running()).toBe(0);
    expect(endpoint.failed + endpoint.completed).toBe(1);
  });

  it('refuses what a web page sends: a request with an Origin, or with a Host other than its loopback address', async () => {
    let calls = 0;
    const { url } = await started({ functions: { worker: async () => void calls++ } });
    const { port } = new URL(url);
    const invoke = (headers: Record<string, string>) =>
      new Promise<number>((resolve, reject) => {
        const req = httpRequest(
          {
            host: '127.0.0.1',
            port,
            method: 'POST',
            path: '/2015-03-31/functions/worker/invocations',
            headers: { 'content-type': 'text/plain', ...headers },
          },
          (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode ?? 0));
          },
        );
        req.on('error', reject);
        req.end('{}');
      });
    expect(await invoke({ origin: 'http://evil.example' })).toBe(403);
    expect(await invoke({ host: `evil.example:${port}` })).toBe(403);
    expect(calls).toBe(0);
    expect(await invoke({})).toBe(200);
    expect(calls).toBe(1);
  });

  it('stop waits for running and queued invocations, then refuses new ones', async () => {
    const ran: number[] = [];
    const { endpoint, url } = await started({
      concurrency: 1,
      functions: {
        worker: async (event: unknown) => {
          await sleep(30);
          ran.push((event as { n: number }).n);
        },
      },
    });
    const lambda = client(url);
    for (let n = 0; n < 3; n++) {
      await lambda.send(new InvokeCommand({ FunctionName: 'worker', InvocationType: 'Event', Payload: encode({ n }) }));
    }
    await endpoint.stop();
    expect(ran).toEqual([0, 1, 2]);
    await expect(fetch(`${url}/2015-03-31/functions/worker/invocations`, { method: 'POST', body: '{}' })).rejects.toThrow();
  });

  it('stop without waiting drops the queue and returns while a handler still runs', async () => {
    const release = deferred();
    const ran: number[] = [];
    const { endpoint, url } = await started({
      concurrency: 1,
      functions: {
        worker: async (event: unknown) => {
          ran.push((event as { n: number }).n);
          await release.promise;
        },
      },
    });
    const lambda = client(url);
    for (let n = 0; n < 3; n++) {
      await lambda.send(new InvokeCommand({ FunctionName: 'worker', InvocationType: 'Event', Payload: encode({ n }) }));
    }
    expect(endpoint.queued()).toBe(2);
    await endpoint.stop({ wait: false });
    expect(endpoint.queued()).toBe(0);
    expect(endpoint.running()).toBe(1);
    release.resolve();
    await endpoint.idle();
    expect(ran).toEqual([0]);
  });
});
