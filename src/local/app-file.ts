// Loading the app `leasehold dev --app FILE` runs (or the built-in runner), and checking what it
// exports before anything starts (docs/design.md, "Local mode").
import { existsSync, statSync } from 'node:fs';
import { extname, resolve } from 'node:path';
import { createRequire, Module } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { LeaseholdError } from '../errors.js';
import type { LocalLambdaHandler } from './invoke-endpoint.js';

/** The handlers the local stack runs, and the functions `lambda-invoke` may call locally. */
export interface LocalApp {
  worker: LocalLambdaHandler;
  api: LocalLambdaHandler;
  scheduler: LocalLambdaHandler;
  /** The trigger: events put on the local bus go to it (absent: they are only logged). */
  trigger: LocalLambdaHandler | undefined;
  localFunctions: Record<string, LocalLambdaHandler>;
  /** The app's chain rules (`export const rules = [...]`), as LEASEHOLD_RULES takes them; undefined: none exported. */
  rules: unknown[] | undefined;
}

/** An app file that cannot be run; the message says why (printed by `leasehold dev`). Code `invalid_app`. */
export class AppFileError extends LeaseholdError {
  constructor(message: string) {
    super('invalid_app', message);
  }
}

/**
 * Load the app file (or, without one, this package's own runner) and check what it exports.
 * TypeScript files are loaded through tsx's loader, registered once for the process.
 * @throws {AppFileError} the file is missing, fails to load, or lacks handlers made by this copy of leasehold.
 */
export async function loadApp(appFile: string | undefined, cwd: string): Promise<LocalApp> {
  const { HANDLERS_MARK, HANDLERS_MODULE } = await import('../lambda.js');
  let mod: Record<string, unknown>;
  const shown = appFile ?? 'the built-in runner';
  if (appFile === undefined) {
    mod = await import('../../functions/leasehold.js');
  } else {
    const path = resolve(cwd, appFile);
    if (!existsSync(path) || !statSync(path).isFile()) throw new AppFileError(`--app ${appFile}: no such file`);
    await shareEntryPointsWithRequire();
    if (/^\.[cm]?tsx?$/.test(extname(path))) {
      // Both of tsx's loaders, as `node --import tsx` registers them: a .ts file in a package
      // that is not "type": "module" is loaded as CommonJS.
      if (!tsxRegistered) {
        const [esm, cjs] = await Promise.all([import('tsx/esm/api'), import('tsx/cjs/api')]);
        esm.register();
        cjs.register();
        tsxRegistered = true;
      }
    }
    try {
      mod = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
    } catch (e) {
      throw new AppFileError(`--app ${appFile}: could not load it: ${(e as Error)?.stack ?? e}`);
    }
  }
  // A file loaded as CommonJS (its package is not "type": "module") has its exports on `default`.
  if (typeof mod.worker !== 'function' && mod.default !== null && typeof mod.default === 'object')
    mod = mod.default as Record<string, unknown>;
  const missing = (['worker', 'scheduler', 'api'] as const).filter((name) => typeof mod[name] !== 'function');
  if (missing.length) {
    throw new AppFileError(
      `${shown} does not export ${missing.join(', ')}: export the handlers of createHandlers from 'leasehold/lambda' ` +
        '(export const { worker, scheduler, api, trigger, migrate, events } = createHandlers({ jobs: [...] }))',
    );
  }
  const mark = (mod.worker as unknown as Record<symbol, { url?: string } | undefined>)[HANDLERS_MARK];
  if (mark === undefined) throw new AppFileError(`${shown}: its worker was not made by createHandlers from 'leasehold/lambda'`);
  if (mark !== HANDLERS_MODULE) {
    throw new AppFileError(
      mark.url === HANDLERS_MODULE.url
        ? `${shown} loaded this copy of leasehold a second time (${HANDLERS_MODULE.url}), as another module instance: ` +
            'import leasehold and leasehold/lambda by those names only (never a file under dist/)'
        : `${shown} uses another copy of leasehold (${String(mark.url)}) than this command (${HANDLERS_MODULE.url}): ` +
            "run the app's own: npx leasehold dev --app …",
    );
  }
  const localFunctions: Record<string, LocalLambdaHandler> = {};
  const declared = mod.localFunctions;
  if (declared !== undefined) {
    if (declared === null || typeof declared !== 'object')
      throw new AppFileError(`${shown}: localFunctions must be an object of functions by name`);
    for (const [name, fn] of Object.entries(declared)) {
      if (typeof fn !== 'function') throw new AppFileError(`${shown}: localFunctions.${name} is not a function`);
      if (!/^[A-Za-z0-9_-]{1,64}$/.test(name))
        throw new AppFileError(`${shown}: localFunctions: "${name}" is not a Lambda function name (letters, digits, _ and -)`);
      localFunctions[name] = fn as LocalLambdaHandler;
    }
  }
  if (mod.rules !== undefined && !Array.isArray(mod.rules))
    throw new AppFileError(`${shown}: rules must be an array of chain rules`);
  return {
    worker: mod.worker as LocalLambdaHandler,
    api: mod.api as LocalLambdaHandler,
    scheduler: mod.scheduler as LocalLambdaHandler,
    trigger: typeof mod.trigger === 'function' ? (mod.trigger as LocalLambdaHandler) : undefined,
    localFunctions,
    rules: mod.rules as unknown[] | undefined,
  };
}

/** tsx's loaders are registered at most once per process. */
let tsxRegistered = false;

/**
 * Make `require('leasehold')` and `require('leasehold/lambda')` return the modules this command
 * runs. An app whose package is not `"type": "module"` (npm 11's `npm init -y` writes
 * `"commonjs"`) is loaded as CommonJS, and tsx's CommonJS loader compiles leasehold's ESM files
 * into a second copy of every module: the app's handlers would then write their logs past
 * `setLogSink`, never see `requestWorkerShutdown`, and keep a pool `resetRuntimeDeps` does not
 * close. Seeding the require cache with this command's own module namespaces, by the files the
 * package's exports resolve to, leaves one copy for both module kinds.
 */
async function shareEntryPointsWithRequire(): Promise<void> {
  const require = createRequire(import.meta.url);
  for (const entry of ['../index.js', '../lambda.js']) {
    const url = new URL(entry, import.meta.url);
    const file = fileURLToPath(url);
    if (require.cache[file]) continue;
    const shared = new Module(file);
    shared.filename = file;
    shared.loaded = true;
    shared.exports = await import(url.href);
    require.cache[file] = shared;
  }
}
