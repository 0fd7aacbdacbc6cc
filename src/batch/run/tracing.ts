// A run's spans (docs/design.md, "Traces"): the run's own span, a child of the span that started
// the batch (its context read from the batch row), and one span per item attempt. A first
// attempt is a child of the run's span; a retry starts a new trace linked to the batch's (where
// the first attempt is) and to its run's, as the OpenTelemetry messaging conventions advise for
// a message processed again. Made only when an app registered a tracer provider: without one a
// run has no RunTrace and its items pay one `undefined` check.
import type { Attributes, Context, Span } from '@opentelemetry/api';
import { parseTraceparent, tracing, type SpanKindName, type TraceLinks, type Tracing } from '../../tracing.js';
import type { BatchInfo, ItemContext, RunOutcome, StoredSource } from '../types.js';
import { ATTEMPT_TRACE, type TracedItem } from './call-rules.js';
import type { Settled } from './types.js';

/** One run's tracer, its span and the batch's trace context (one per run, when tracing). */
export class RunTrace {
  /** The run's span: parent of its first attempts, ended by {@link end}. */
  readonly span: Span;
  private readonly started;
  private readonly base: Attributes;
  /** The run's span as a context, made once: the parent of every first attempt. */
  private readonly runContext: Context;
  private readonly attemptName: string;
  private readonly callName: string;

  private constructor(
    readonly t: Tracing,
    batch: BatchInfo,
    runId: string,
  ) {
    this.started = parseTraceparent(batch.traceContext);
    this.base = {
      'messaging.system': 'leasehold',
      'messaging.destination.name': batch.job,
      'leasehold.batch.id': batch.id,
      'leasehold.tenant': batch.tenant,
      'leasehold.run.id': runId,
    };
    this.span = t.start(`run ${batch.job}`, 'consumer', { ...this.base, 'messaging.operation.type': 'receive' }, this.started);
    this.runContext = t.contextOf(this.span);
    this.attemptName = `process ${batch.job}`;
    this.callName = `call ${batch.job}`;
  }

  /** The run's tracing, or undefined when no tracer provider is registered. */
  static async open(batch: BatchInfo, runId: string): Promise<RunTrace | undefined> {
    const t = await tracing();
    return t ? new RunTrace(t, batch, runId) : undefined;
  }

  /**
   * The span of one attempt of an item (`attempt` counts from 1). Only the attributes the
   * OpenTelemetry messaging conventions name as a sampler's (`messaging.system`,
   * `messaging.destination.name`, `messaging.operation.type`) are given at its start; the rest
   * are set on the started span, and only when it records (none when a sampler dropped it). The
   * SDK checks and copies a span's start attributes twice more than those it sets: set after,
   * they cost it about 0.3 µs less per span (docs/development.md, tracing's cost).
   */
  attempt(key: string, attempt: number): Span {
    const b = this.base;
    const sampled: Attributes = {
      'messaging.system': 'leasehold',
      'messaging.destination.name': b['messaging.destination.name'],
      'messaging.operation.type': 'process',
    };
    let span: Span;
    if (attempt <= 1) span = this.t.startIn(this.attemptName, 'consumer', sampled, this.runContext);
    else {
      const links = [{ context: this.span.spanContext(), attributes: { 'leasehold.link': 'run' } }];
      if (this.started) links.unshift({ context: this.started, attributes: { 'leasehold.link': 'first attempt' } });
      span = this.t.start(this.attemptName, 'consumer', sampled, undefined, links, true);
    }
    if (span.isRecording()) {
      span.setAttributes({
        'messaging.message.id': key,
        'leasehold.batch.id': b['leasehold.batch.id'],
        'leasehold.tenant': b['leasehold.tenant'],
        'leasehold.run.id': b['leasehold.run.id'],
        'leasehold.item.key': key,
        'leasehold.item.attempt': attempt,
      });
    }
    return span;
  }

  /**
   * How to run an attempt's work with its span active; undefined when no context manager is
   * registered (nothing could see it: no closure is made).
   */
  within(span: Span): (<T>(f: () => T) => T) | undefined {
    return this.t.contextManaged() ? (f) => this.t.within(span, f) : undefined;
  }

  /** End an attempt's span with how the attempt settled (status error unless done or given back). */
  settled(span: Span, s: Settled): void {
    span.setAttribute('leasehold.item.outcome', s.outcome);
    if (s.move.state === 'failed' || s.outcome === 'retry' || s.outcome === 'interrupted') {
      this.t.failWith(span, s.move.error ?? s.outcome);
    }
    span.end();
  }

  /**
   * `f` inside a child span of the run's: `name`, kind `kind`, the run's attributes and
   * `attributes`; status error and the exception recorded when it throws (rethrown).
   */
  private async child<T>(
    name: string,
    kind: SpanKindName,
    attributes: Attributes,
    f: () => Promise<T>,
    links?: TraceLinks,
  ): Promise<T> {
    const span = this.t.startIn(name, kind, { ...this.base, ...attributes }, this.runContext, links);
    try {
      return await this.t.within(span, f);
    } catch (e) {
      this.t.fail(span, e);
      throw e;
    } finally {
      span.end();
    }
  }

  /**
   * `f`, the read of one page of the batch's S3 source, in a client span `read source page`
   * (child of the run's) with `aws.s3.bucket`, and `aws.s3.key` for a one-object source.
   */
  sourcePage<T>(source: StoredSource, f: () => Promise<T>): Promise<T> {
    const s3 = source.s3 as { bucket: string; key?: string };
    const at: Attributes = { 'rpc.system': 'aws-api', 'rpc.service': 'S3', 'aws.s3.bucket': s3.bucket };
    if (s3.key !== undefined) at['aws.s3.key'] = s3.key;
    return this.child('read source page', 'client', at, f);
  }

  /**
   * `f`, one batched call of `items` to the job's `workMany` (docs/design.md, "Item batching"), in
   * a client span `call <job>`: a child of the run's span (whichever item's work set the call
   * off), with the messaging attributes of a process of `items.length` messages
   * (`messaging.batch.message_count`) and a link to each item's attempt span
   * (`messaging.message.id` its key, `leasehold.item.attempt` its attempt); status error with
   * `error.type` and the exception recorded when the call throws (rethrown).
   */
  call<T>(items: readonly ItemContext[], f: () => Promise<T>): Promise<T> {
    const links: TraceLinks = [];
    for (const item of items) {
      const span = (item as TracedItem)[ATTEMPT_TRACE]?.span as Span | undefined;
      if (span) {
        links.push({
          context: span.spanContext(),
          attributes: { 'messaging.message.id': item.key, 'leasehold.item.attempt': item.attempt },
        });
      }
    }
    const at: Attributes = {
      'messaging.operation.type': 'process',
      'messaging.operation.name': 'call',
      'messaging.batch.message_count': items.length,
    };
    return this.child(this.callName, 'client', at, f, links);
  }

  /** End the run's span with its outcome (status error for a store error or a loss). */
  end(outcome: RunOutcome, error: Error | undefined): void {
    this.span.setAttribute('leasehold.run.outcome', outcome);
    if (error) this.t.fail(this.span, error);
    this.span.end();
  }
}
