// A Lambda function's bundle as SST builds it for deploy, and what importing it costs: shared by
// the function bundle test, the packed-install test (an app's handler file) and `npm run bench`.
//
// SST's build (pkg/runtime/node/build.go): platform node, format esm, bundle, `mainFields`
// module then main, keepNames, minify (SST's default `nodejs.minify`), no source map, the
// createRequire/__dirname banner, target esnext, one `<handler file>.mjs` per function at the
// bundle's root. Only `sharp` and `pg-native` are external: the AWS SDK v3 is bundled too
// (SST does not rely on the runtime's copy, so the deployed SDK is the locked one).
import { spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { build, type Metafile } from 'esbuild';

/** What {@link buildLikeSst} made. */
export interface SstBundle {
  /** The bundle's path. */
  file: string;
  /** Its size, bytes. */
  bytes: number;
  /** esbuild's account of what went in (inputs with their bytes in the output). */
  metafile: Metafile;
}

/**
 * Bundle `entry` (a handler file, `.ts` or `.js`) into `outfile` (`.mjs`) the way SST bundles a
 * Node function. `absWorkingDir`: the folder it builds in (an app's root: its `node_modules`).
 * @throws esbuild's error when the file does not bundle.
 */
export async function buildLikeSst(entry: string, outfile: string, options: { absWorkingDir?: string } = {}): Promise<SstBundle> {
  const result = await build({
    entryPoints: [entry],
    outfile,
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
  return { file: outfile, bytes: statSync(outfile).size, metafile: result.metafile! };
}

/** Bytes each package (or source folder) put into the bundle, largest first. */
export function bundleInputs(bundle: SstBundle): { name: string; bytes: number }[] {
  const bytes = new Map<string, number>();
  for (const output of Object.values(bundle.metafile.outputs)) {
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
