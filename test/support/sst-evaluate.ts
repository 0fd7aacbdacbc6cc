// Evaluate an sst.config.ts with the recording stand-ins (sst-stand-ins.ts), as `sst deploy --stage`
// would, and read what it created: handlers, IAM permissions, invokers.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { vi } from 'vitest';
import { installStandIns, type Recorded, type World } from './sst-stand-ins.js';

/** What an sst.config.ts exports. */
export interface SstConfig {
  app(input: { stage: string }): Record<string, unknown>;
  run(): Promise<Record<string, unknown>>;
}

/** Evaluate `<root>/sst.config.ts` afresh for `stage`; its app settings, outputs and what it created. */
export async function deploy(root: string, stage = 'dev') {
  const world = installStandIns(stage, { root });
  vi.resetModules();
  // A computed path: tsc must not follow it (sst.config.ts is typed by SST, not by this project).
  const path = join(root, 'sst.config.ts');
  const config = ((await import(/* @vite-ignore */ path)) as { default: SstConfig }).default;
  const app = config.app({ stage });
  (globalThis as { $app?: { name: unknown } }).$app!.name = app.name;
  const outputs = await config.run();
  return { world, app, outputs };
}

export const functions = (w: World) => w.of('sst.aws.Function');

/** A function's handler string, with where it was declared. */
export interface HandlerRef {
  where: string;
  handler: string;
}

/** Every handler the config names: functions, and any FunctionArgs or handler strings given to crons, buses and routes. */
export function handlersOf(w: World): HandlerRef[] {
  const refs: HandlerRef[] = functions(w).map((r) => ({ where: `Function ${r.name}`, handler: r.args.handler }));
  const add = (where: string, target: unknown) => {
    if (typeof target === 'string' && !target.startsWith('arn:')) refs.push({ where, handler: target });
    else if (target && typeof target === 'object' && 'handler' in target) refs.push({ where, handler: String(target.handler) });
  };
  for (const c of w.of('sst.aws.CronV2')) add(`CronV2 ${c.name}`, c.args.function ?? c.args.job);
  for (const c of w.calls) if (c.method !== 'registerOutputs') add(`${c.on.name}.${c.method}(${String(c.args[0])})`, c.args[1]);
  return refs;
}

/**
 * What is wrong with `refs`: a handler `dir/file.export` must name `dir/file.ts` (or .js/.mjs)
 * under `root` that exports `export` (also as `export const { export, … } = …`).
 */
export function handlerProblems(root: string, refs: HandlerRef[]): string[] {
  const problems: string[] = [];
  for (const { where, handler } of refs) {
    const m = /^([\w./-]+)\.([A-Za-z_$][\w$]*)$/.exec(handler ?? '');
    if (!m) {
      problems.push(`${where}: handler "${handler}" is not "path/file.export"`);
      continue;
    }
    const [, base, exported] = m as unknown as [string, string, string];
    const file = ['.ts', '.js', '.mjs'].map((ext) => join(root, base + ext)).find((f) => existsSync(f));
    if (!file) {
      problems.push(`${where}: handler "${handler}": ${base}.ts does not exist`);
      continue;
    }
    const source = readFileSync(file, 'utf8');
    const exports = new RegExp(
      `export\\s+(const|let|var|(async\\s+)?function)\\s+${exported}\\b|export\\s+const\\s*\\{[^}]*\\b${exported}\\b[^}]*\\}\\s*=|export\\s*\\{[^}]*\\b${exported}\\b[^}]*\\}`,
    );
    if (!exports.test(source)) problems.push(`${where}: handler "${handler}": ${base}.ts has no export "${exported}"`);
  }
  return problems;
}

/** `"900 seconds"` / `"15 minutes"` → seconds. */
export function seconds(duration: string): number {
  const m = /^(\d+) (second|minute)s?$/.exec(duration);
  if (!m) throw new Error(`not a duration: ${duration}`);
  return Number(m[1]) * (m[2] === 'minute' ? 60 : 1);
}

export interface Permission {
  actions: string[];
  resources: string[];
}
export const permissionsOf = (r: Recorded): Permission[] => (r.args.permissions ?? []) as Permission[];

/** Does an IAM `pattern` (with `*` and `?`) match `value`? */
export function iamMatches(pattern: string, value: string): boolean {
  const re = new RegExp(
    `^${pattern
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
  );
  return re.test(value);
}

/** Functions allowed to invoke the function with `arn` through permissions or links. */
export function invokersOf(w: World, target: Recorded | string): string[] {
  const arn = typeof target === 'string' ? target : (target.instance as { arn: string }).arn;
  return functions(w)
    .filter(
      (r) =>
        permissionsOf(r).some(
          (p) => p.actions.some((a) => iamMatches(a, 'lambda:InvokeFunction')) && p.resources.some((res) => iamMatches(res, arn)),
        ) ||
        (typeof target !== 'string' && ((r.args.link ?? []) as unknown[]).includes(target.instance)),
    )
    .map((r) => r.name)
    .sort();
}

/** Every resource `lambda:InvokeFunction` is granted on, by function. */
export function invokeGrants(w: World): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const r of functions(w)) {
    const resources = permissionsOf(r)
      .filter((p) => p.actions.some((a) => iamMatches(a, 'lambda:InvokeFunction')))
      .flatMap((p) => p.resources);
    if (resources.length) out[r.name] = resources.sort();
  }
  return out;
}
