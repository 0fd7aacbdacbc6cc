// A Lambda function's bundle as SST builds it for deploy, and what importing it costs: shared by
// the function bundle test, the packed-install test (an app's handler file) and `npm run bench`.
//
// SST's build (pkg/runtime/node/build.go): platform node, format esm, bundle, `mainFields`
// module then main, keepNames, minify (SST's default `nodejs.minify`), no source map, the
// createRequire/__dirname banner, target esnext, one `<handler file>.mjs` per function at the
// bundle's root. Only `sharp` and `pg-native` are external: the AWS SDK v3 is bundled too
// (SST does not rely on the runtime's copy, so the deployed SDK is the locked one). With
// `nodejs.splitting` (the Leasehold component sets it on every function), each dynamically
// imported module goes to a chunk of its own, next to the handler file, loaded on first use.
import { spawnSync } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { build, type Metafile } from 'esbuild';

/** What {@link buildLikeSst} made. */
export interface SstBundle {
  /** The handler file's path (the entry module the Lambda runtime imports). */
  file: string;
  /**
   * Bytes a cold start loads before the handler runs: the handler file and the chunks it imports
   * statically (all of the bundle without splitting).
   */
  bytes: number;
  /** Bytes of every file of the bundle, the chunks loaded on first use included. */
  totalBytes: number;
  /** Every file of the bundle (the handler file first). */
  files: string[];
  /** The files a cold start loads (the handler file first). */
  coldFiles: string[];
  /** The same, as keys of `metafile.outputs`. */
  coldOutputs: string[];
  /** esbuild's account of what went in (inputs with their bytes in each output). */
  metafile: Metafile;
}

/** Options of {@link buildLikeSst}. */
export interface SstBuildOptions {
  /** The folder it builds in (an app's root: its `node_modules`). Default the working directory. */
  absWorkingDir?: string;
  /** SST's `nodejs.splitting`: dynamic imports become chunks of their own. Default true, as the component deploys. */
  splitting?: boolean;
}

/**
 * Bundle `entry` (a handler file, `.ts` or `.js`) into `outfile` (`.mjs`; its chunks, if any, go
 * next to it) the way SST bundles a Node function.
 * @throws esbuild's error when the file does not bundle.
 */
export async function buildLikeSst(entry: string, outfile: string, options: SstBuildOptions = {}): Promise<SstBundle> {
  const splitting = options.splitting ?? true;
  const result = await build({
    entryPoints: [entry],
    ...(splitting
      ? {
          outdir: dirname(outfile),
          splitting: true,
          entryNames: basename(outfile).replace(/\.mjs$/, ''),
          chunkNames: 'chunk-[hash]',
          outExtension: { '.js': '.mjs' },
        }
      : { outfile }),
    platform: 'node',
    format: 'esm',
    target: 'esnext',
    bundle: true,
    minify: true,
    keepNames: true,
    mainFields: ['module', 'main'],
    external: ['sharp', 'pg-native'],
    sourcemap: false,
    metafile: true,
    logLevel: 'silent',
    ...(options.absWorkingDir ? { absWorkingDir: options.absWorkingDir } : {}),
    banner: {
      js: [
        `import { createRequire as topLevelCreateRequire } from 'module';`,
        `const require = topLevelCreateRequire(import.meta.url);`,
        `import { fileURLToPath as topLevelFileUrlToPath, URL as topLevelURL } from "url"`,
        `const __filename = topLevelFileUrlToPath(import.meta.url)`,
        `const __dirname = topLevelFileUrlToPath(new topLevelURL(".", import.meta.url))`,
      ].join('\n'),
    },
  });
  if (result.errors.length) throw new Error(`esbuild: ${result.errors.map((e) => e.text).join('; ')}`);
  const metafile = result.metafile!;
  const cwd = options.absWorkingDir ?? process.cwd();
  const key = (file: string) => relative(cwd, file);
  const entryKey = key(outfile);
  const outputs = Object.keys(metafile.outputs);
  // What a cold start loads: the handler file and, transitively, what it imports statically.
  const cold = new Set<string>();
  const visit = (k: string) => {
    if (cold.has(k) || !metafile.outputs[k]) return;
    cold.add(k);
    for (const i of metafile.outputs[k].imports) if (i.kind === 'import-statement' && !i.external) visit(i.path);
  };
  visit(entryKey);
  const size = (k: string) => statSync(join(cwd, k)).size;
  return {
    file: outfile,
    bytes: [...cold].reduce((n, k) => n + size(k), 0),
    totalBytes: outputs.reduce((n, k) => n + size(k), 0),
    files: [entryKey, ...outputs.filter((k) => k !== entryKey)].map((k) => join(cwd, k)),
    coldFiles: [...cold].map((k) => join(cwd, k)),
    coldOutputs: [...cold],
    metafile,
  };
}

/** The text of every file of a bundle, joined (to look for what went in, wherever it landed). */
export function bundleText(bundle: SstBundle): string {
  return bundle.files.map((f) => readFileSync(f, 'utf8')).join('\n');
}

/** Bytes each package (or source folder) put into the bundle, largest first. */
export function bundleInputs(bundle: SstBundle, options: { coldOnly?: boolean } = {}): { name: string; bytes: number }[] {
  const bytes = new Map<string, number>();
  const cold = new Set(bundle.coldOutputs);
  for (const [file, output] of Object.entries(bundle.metafile.outputs)) {
    if (options.coldOnly && !cold.has(file)) continue;
    for (const [path, input] of Object.entries(output.inputs)) {
      const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path);
      const name = pkg ? pkg[1] : path.split('/').slice(0, 2).join('/');
      bytes.set(name, (bytes.get(name) ?? 0) + input.bytesInOutput);
    }
  }
  return [...bytes].map(([name, b]) => ({ name, bytes: b })).sort((a, b) => b.bytes - a.bytes);
}

/** What importing a bundle costs over a bare `node` start, ms (medians). */
export interface ImportCost {
  /** Wall time of `node -e "await import(bundle)"` less that of `node -e 0`. */
  wallMs: number;
  /** The same for the process's CPU time (user + system): steadier on a loaded machine. */
  cpuMs: number;
  /** Runs of each. */
  runs: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * Start `node` `runs` times importing `file` (what the Lambda runtime does at a cold start) and
 * `runs` times doing nothing, in turns, and compare the medians.
 * @throws {Error} the import fails.
 */
export function importCost(file: string, runs = 7): ImportCost {
  const env = { PATH: process.env.PATH ?? '', AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' };
  const cpu = `const u = process.cpuUsage(); process.stdout.write(String((u.user + u.system) / 1000))`;
  const once = (code: string, module: boolean) => {
    const t = performance.now();
    const r = spawnSync(process.execPath, [...(module ? ['--input-type=module'] : []), '-e', code], { env, encoding: 'utf8' });
    const wallMs = performance.now() - t;
    if (r.status !== 0) throw new Error(`node exited ${r.status}: ${r.stderr}`);
    return { wallMs, cpuMs: Number(r.stdout.trim().split('\n').pop()) };
  };
  const bare: { wallMs: number; cpuMs: number }[] = [];
  const loaded: { wallMs: number; cpuMs: number }[] = [];
  once('0', false);
  for (let i = 0; i < runs; i++) {
    bare.push(once(cpu, false));
    loaded.push(once(`await import(${JSON.stringify(pathToFileURL(file).href)}); ${cpu}`, true));
  }
  return {
    wallMs: median(loaded.map((r) => r.wallMs)) - median(bare.map((r) => r.wallMs)),
    cpuMs: median(loaded.map((r) => r.cpuMs)) - median(bare.map((r) => r.cpuMs)),
    runs,
  };
}
