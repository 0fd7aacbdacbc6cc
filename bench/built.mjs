// `npm run bench` measures leasehold as it ships: compiled JavaScript (dist/, `npm run build`),
// not its TypeScript sources compiled on the fly by tsx (docs/development.md, "Where an item's
// time goes": tsx's keepNames wraps every function a run makes per item). Loaded after tsx
// (`node --import tsx --import ./bench/built.mjs bench/run.ts`), it maps every module of src/
// that a bench file (or test/support, which the bench uses) imports to its compiled twin in
// dist/src/, so the whole process runs one copy of leasehold, the compiled one. The bench's own
// files stay TypeScript. BENCH_SOURCES=1 keeps the sources (tsx), as before 2026-12-07.
import { register } from 'node:module';

if (process.env.BENCH_SOURCES !== '1') register('./built-hooks.mjs', import.meta.url);
