// Files the Leasehold component reads at deploy time: the app's handler file, and leasehold's
// migration files, which the migrate function ships.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** @throws {Error} the handler file is not there. */
export function checkHandlerFile(root: string, base: string): void {
  const found = ['.ts', '.mts', '.js', '.mjs'].some((ext) => existsSync(join(root, base + ext)));
  if (!found) throw new Error(`handlers: no ${base}.ts (or .mts, .js, .mjs) in ${root}`);
}

/**
 * Where leasehold's migration files are, to ship with the migrate function: the package the app
 * resolves from its root (its sources in a clone of leasehold, else its build), else the package
 * this module lies in.
 * @throws {Error} none is found.
 */
export function migrationsSource(root: string): string {
  const packages: string[] = [];
  try {
    packages.push(dirname(createRequire(join(root, 'package.json')).resolve('leasehold/package.json')));
  } catch {
    // not resolvable from the app: look next to this module
  }
  try {
    for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
      const pkg = join(dir, 'package.json');
      if (existsSync(pkg) && (JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'leasehold') {
        packages.push(dir);
        break;
      }
    }
  } catch {
    // bundled: import.meta.url is not this package's
  }
  for (const pkg of packages) {
    for (const dir of [join(pkg, 'src', 'store', 'migrations'), join(pkg, 'dist', 'src', 'store', 'migrations')]) {
      if (existsSync(dir)) return dir;
    }
  }
  throw new Error(`leasehold's migration files were not found (is leasehold installed in ${root}?)`);
}
