#!/usr/bin/env node
// The `leasehold` command: runs the built JavaScript in dist/, so no TypeScript loader is needed.
// In a clone, `npm ci` builds it (the `prepare` script), `npm start` rebuilds what changed, and
// `npm run build` builds it by hand.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const cli = new URL('../dist/src/cli/index.js', import.meta.url);
if (!existsSync(fileURLToPath(cli))) {
  console.error('leasehold: dist/ is missing: run `npm run build` first (in a clone of leasehold)');
  process.exit(1);
}
// `leasehold batch results ID | head`: a closed pipe ends the command quietly, as in any Unix tool.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (e) => {
    if (e.code === 'EPIPE') process.exit(0);
    throw e;
  });
}
await import(cli.href);
