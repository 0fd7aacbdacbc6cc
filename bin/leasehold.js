#!/usr/bin/env node
// The `leasehold` command: loads the TypeScript sources through tsx, so a clone runs as-is.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli.ts');
