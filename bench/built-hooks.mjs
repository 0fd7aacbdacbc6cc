// The module resolution hook of bench/built.mjs: src/**/*.ts → dist/src/**/*.js.
const SRC = new URL('../src/', import.meta.url).href;
const DIST = new URL('../dist/src/', import.meta.url).href;

/** @type {import('node:module').ResolveHook} */
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  if (!r.url.startsWith(SRC) || !r.url.endsWith('.ts')) return r;
  return { url: `${DIST}${r.url.slice(SRC.length, -'.ts'.length)}.js`, format: 'module', shortCircuit: true };
}
