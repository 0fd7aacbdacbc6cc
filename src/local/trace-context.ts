// The context manager `leasehold dev` registers with its local traces (docs/design.md, "Traces"):
// the active span follows async work through Node's AsyncLocalStorage, so the spans made inside a
// span's work (a scheduler service's statements, an item's own spans, nested `traced` calls) are
// its children, as under the ADOT layer's context manager. Imported by src/local/traces.ts only
// when LEASEHOLD_TRACES asks for traces.
import { AsyncLocalStorage } from 'node:async_hooks';
import { ROOT_CONTEXT, type Context, type ContextManager } from '@opentelemetry/api';

/** An OpenTelemetry context manager over `AsyncLocalStorage` (what `@opentelemetry/context-async-hooks` does, without the dependency). */
export class LocalContextManager implements ContextManager {
  private readonly storage = new AsyncLocalStorage<Context>();

  /** The context of the running async work; the root context outside any {@link with}. */
  active(): Context {
    return this.storage.getStore() ?? ROOT_CONTEXT;
  }

  /** Runs `fn` (with `thisArg` and `args`) with `context` active for it and the async work it starts. */
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    context: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    const cb = thisArg === undefined ? fn : (fn.bind(thisArg) as F);
    return this.storage.run(context, cb, ...args);
  }

  /** A function that runs `target` with `context` active; anything else as it is. */
  bind<T>(context: Context, target: T): T {
    if (typeof target !== 'function') return target;
    const with_ = (f: () => unknown) => this.with(context, f);
    const f = target as (...a: unknown[]) => unknown;
    return function (this: unknown, ...args: unknown[]) {
      return with_(() => f.apply(this, args));
    } as T;
  }

  enable(): this {
    return this;
  }

  /** Forgets every active context. */
  disable(): this {
    this.storage.disable();
    return this;
  }
}
