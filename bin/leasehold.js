#!/usr/bin/env node
// The `leasehold` command: loads the TypeScript sources through tsx, so a clone runs as-is.
import { register } from 'tsx/esm/api';

register();
// `leasehold batch results ID | head`: a closed pipe ends the command quietly, as in any Unix tool.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (e) => {
    if (e.code === 'EPIPE') process.exit(0);
    throw e;
  });
}
await import('../src/cli.ts');
