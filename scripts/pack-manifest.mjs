#!/usr/bin/env node
// The package.json that `npm pack` and `npm publish` put in the tarball, without `scripts`.
//
// `prepare` (patch-package, then the build) is for a clone's `npm ci`; in an app's install it
// would point at files the tarball does not carry, and npm 11 lists every install script of a
// dependency for approval. None of the other scripts works outside a clone either. npm reads the
// manifest for the tarball after `prepack`, so:
//
//   node scripts/pack-manifest.mjs strip     (prepack, after the build) keeps package.json in
//                                            .package.json.packing and writes it without scripts;
//   node scripts/pack-manifest.mjs restore   (postpack) puts the kept file back, byte for byte and
//                                            with its modification time (the build's --if-stale
//                                            compares it).
//
// A `strip` that finds a kept file (a pack that died before its postpack) restores it first, so
// the original is never lost.
import { existsSync, readFileSync, renameSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const manifest = join(process.cwd(), 'package.json');
const kept = join(process.cwd(), '.package.json.packing');

function restore() {
  if (!existsSync(kept)) return;
  const { atime, mtime } = statSync(kept);
  renameSync(kept, manifest);
  utimesSync(manifest, atime, mtime);
}

const command = process.argv[2];
if (command === 'strip') {
  restore();
  const text = readFileSync(manifest, 'utf8');
  const { atime, mtime } = statSync(manifest);
  writeFileSync(kept, text);
  utimesSync(kept, atime, mtime);
  const packed = JSON.parse(text);
  delete packed.scripts;
  writeFileSync(manifest, JSON.stringify(packed, null, 2) + '\n');
} else if (command === 'restore') {
  restore();
} else {
  console.error('usage: node scripts/pack-manifest.mjs strip|restore');
  process.exit(2);
}
