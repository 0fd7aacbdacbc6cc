#!/usr/bin/env node
// `npm run build`: compile src/, functions/ and infra/ to JavaScript and type declarations in dist/
// (tsconfig.build.json), copy the migration files next to the compiled migrate module, and ship
// the patched database driver with the package (below).
//
// The driver: postgres.js 3.4.9 as patched at install (patches/postgres+3.4.9.patch, applied to
// node_modules by patch-package from `prepare`) for porsager/postgres#1154 and #1208, where a
// connection that died inside a transaction crashed the process. An app that installs leasehold
// from npm gets an unpatched `postgres` in its own node_modules (npm runs no install script of a
// dependency, and patch-package is a devDependency here), so the build bundles the patched copy
// into dist/vendor/postgres.js and points the built modules that import `postgres` at it. The
// type declarations keep naming the `postgres` package (still a dependency, for its types). This
// goes away once a postgres.js release fixes those issues: drop the patch, this step and the
// vendor folder, and depend on that release.
//
// The dashboard: the page `leasehold dev` and `leasehold dashboard` serve (src/dashboard, browser
// code with its own tsconfig) is bundled with esbuild into dist/dashboard/: index.html, app.js
// (Preact, htm and uPlot included), app.css, and LICENSES.txt with the licenses of what app.js
// carries.
//
// --if-stale: do nothing when dist/ is newer than every input (what `npm start` and the test
// setup use, so an unchanged clone starts at once). Otherwise dist/ is removed first, so files of
// deleted sources never linger in it.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
const stamp = join(dist, '.built');
/** Names the bundled driver in its legal comment. */
const VENDOR_MARK = 'leasehold-vendored-postgres';
/** Libraries the dashboard's bundle carries; their license texts ship next to it. */
const DASHBOARD_LIBRARIES = ['preact', 'htm', 'uplot'];
const inputs = [
  'src',
  'functions',
  'infra',
  'tsconfig.json',
  'tsconfig.build.json',
  'package.json',
  'scripts/build.mjs',
  'patches',
];

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
try {
  await vendorDriver();
  await bundleDashboard();
} catch (e) {
  rmSync(dist, { recursive: true, force: true });
  console.error(`build: ${e.message}`);
  process.exit(1);
}
writeFileSync(stamp, `${new Date().toISOString()}\n`);

/** Files under `dir` whose names end with `suffix`. */
function filesUnder(dir, suffix) {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith(suffix))
    .map((e) => join(e.parentPath, e.name));
}

/** Bundle the patched driver into dist/vendor/postgres.js and make the built modules import it. */
async function vendorDriver() {
  // The package's folder (its exports map hides package.json): the one Node resolves from here.
  const pkgDir = join(root, 'node_modules', 'postgres');
  const { version } = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
  const patch = readdirSync(join(root, 'patches')).find((f) => f.startsWith('postgres+'));
  if (!patch || patch !== `postgres+${version}.patch`) {
    throw new Error(
      `patches/ holds ${patch ?? 'no postgres patch'} but postgres ${version} is installed: update the patch (or drop it with this step once upstream fixed the bugs)`,
    );
  }
  // patch-package marks nothing in node_modules: check for the patch's own text instead.
  if (!readFileSync(join(pkgDir, 'src', 'connection.js'), 'utf8').includes('Patched for leasehold')) {
    throw new Error(`node_modules/postgres is not patched: run \`npx patch-package\` (npm ci does it) and build again`);
  }
  const { build } = await import('esbuild');
  const outfile = join(dist, 'vendor', 'postgres.js');
  await build({
    entryPoints: [join(pkgDir, 'src', 'index.js')],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    logLevel: 'warning',
    banner: {
      // A legal comment (`/*!`): bundlers keep it, also minified, so an app's bundle shows that it
      // carries this copy (the packed-install test looks for it).
      js: [
        `/*! ${VENDOR_MARK}: postgres.js ${version} (https://github.com/porsager/postgres, The Unlicense) with`,
        ` * leasehold's patches/${patch}: a statement on a connection whose socket closed fails with`,
        ' * CONNECTION_CLOSED instead of crashing the process (porsager/postgres#1154, #1208). Bundled by',
        " * leasehold's scripts/build.mjs; leasehold imports this copy instead of the `postgres` package. */",
      ].join('\n'),
    },
  });
  // A static or dynamic import of the bare specifier `postgres` in emitted JavaScript.
  const importsPostgres = /(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(['"])postgres\2/g;
  const built = [join(dist, 'src'), join(dist, 'functions')].filter(existsSync).flatMap((d) => filesUnder(d, '.js'));
  let rewritten = 0;
  for (const file of built) {
    const text = readFileSync(file, 'utf8');
    let path = relative(dirname(file), outfile).split(sep).join('/');
    if (!path.startsWith('.')) path = `./${path}`;
    const next = text.replace(importsPostgres, (_m, lead, quote) => `${lead}${quote}${path}${quote}`);
    if (next !== text) {
      writeFileSync(file, next);
      rewritten++;
    }
  }
  if (rewritten === 0) throw new Error('no built module imports postgres: the driver step has nothing to point at dist/vendor');
}

/** Bundle the dashboard page into dist/dashboard/ (see the top of this file). */
async function bundleDashboard() {
  const { build } = await import('esbuild');
  const src = join(root, 'src', 'dashboard');
  const out = join(dist, 'dashboard');
  const names = DASHBOARD_LIBRARIES.map((name) => {
    const { version, license } = JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8'));
    return { name, version, license };
  });
  await build({
    entryPoints: { app: join(src, 'main.ts'), 'app-style': join(src, 'style.css') },
    outdir: out,
    bundle: true,
    platform: 'browser',
    format: 'esm',
    target: ['es2022', 'chrome110', 'firefox110', 'safari16'],
    minify: true,
    legalComments: 'none',
    logLevel: 'warning',
    banner: {
      js: `/*! leasehold dashboard; bundles ${names.map((l) => `${l.name} ${l.version} (${l.license})`).join(', ')}: see LICENSES.txt */`,
    },
  });
  // One stylesheet: the page's own with uPlot's, named as index.html links it.
  renameSync(join(out, 'app-style.css'), join(out, 'app.css'));
  cpSync(join(src, 'index.html'), join(out, 'index.html'));
  const licenses = names.map(({ name, version }) => {
    const text = readFileSync(join(root, 'node_modules', name, 'LICENSE'), 'utf8').trim();
    return `${name} ${version}\n${'-'.repeat(name.length + version.length + 1)}\n${text}\n`;
  });
  writeFileSync(join(out, 'LICENSES.txt'), `The leasehold dashboard's app.js bundles these libraries:\n\n${licenses.join('\n')}`);
}
