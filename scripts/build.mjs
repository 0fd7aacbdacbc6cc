#!/usr/bin/env node
// `npm run build`: compile src/ and functions/ to JavaScript and type declarations in dist/
// (tsconfig.build.json), and copy the migration files next to the compiled migrate module.
//
// --if-stale: do nothing when dist/ is newer than every input (what `npm start` and the test
// setup use, so an unchanged clone starts at once). Otherwise dist/ is removed first, so files of
// deleted sources never linger in it.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
const stamp = join(dist, '.built');
const inputs = ['src', 'functions', 'tsconfig.json', 'tsconfig.build.json', 'package.json', 'scripts/build.mjs'];

/** Newest modification time under `path`, ms. */
function newest(path) {
  const s = statSync(path);
  if (!s.isDirectory()) return s.mtimeMs;
  return readdirSync(path).reduce((m, name) => Math.max(m, newest(join(path, name))), s.mtimeMs);
}

if (process.argv.includes('--if-stale') && existsSync(stamp)) {
  const built = statSync(stamp).mtimeMs;
  if (inputs.every((i) => newest(join(root, i)) < built)) process.exit(0);
}

rmSync(dist, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const { status } = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit', cwd: root });
if (status !== 0) {
  rmSync(dist, { recursive: true, force: true });
  console.error('build: tsc failed');
  process.exit(status ?? 1);
}
cpSync(join(root, 'src', 'store', 'migrations'), join(dist, 'src', 'store', 'migrations'), { recursive: true });
writeFileSync(stamp, `${new Date().toISOString()}\n`);
