// dependency-cruiser (`npm run lint`): no import cycles, and the layers of docs/design.md,
// "Layout", as rules. Imports run one way:
//
//   functions/ → src/lambda.ts → src/runtime/ → src/api/, src/trigger/ → the domain → src/store/
//
// where the domain is src/batch/, src/lease/, src/units/ and src/jobs/: within it, jobs use
// batch, units use jobs and lease, and batch and lease use only the store. Three leaves serve
// every layer: src/clock.ts, src/errors.ts (the error base and the table of error codes) and
// src/log.ts (the logger), and the domain also uses src/tracing.ts (OpenTelemetry spans, its API
// loaded only once an app registered a tracer provider) and src/zod.ts (zod/mini with its English
// locale, for leasehold's own schemas); a fourth, src/contract.ts (the strings infra/ and src/ agree on),
// imports nothing and serves infra/ too. src/local/, src/cli/ and bench/ drive the same code from
// outside (tests share helpers only through test/support/), through src/client/ (the API client,
// browser-safe) and src/terminal/ (following a batch on a terminal); src/dashboard/ (the browser
// page) stands alone but for the client. infra/ (the deploy component, `leasehold/sst`) sits
// beside src/: it may use the library's public entry points (src/index.ts, src/lambda.ts) and
// src/contract.ts, and nothing else of it, and nothing in src/ or functions/ imports it.
const DOMAIN = '^src/(batch|lease|units|jobs)/';
const OUTSIDE = '^(functions/|infra/|src/(lambda|index)\\.ts$|src/(cli|local|dashboard|client|terminal)/)';

/** A rule that forbids imports from `from` to `to`. */
const forbid = (name, comment, from, to) => ({ name, comment, severity: 'error', from: { path: from }, to: { path: to } });

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'An import cycle: the modules on it cannot be read, tested or loaded one at a time.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    forbid(
      'store-is-the-bottom',
      'The store knows nothing of the modules that use it.',
      '^src/store/',
      '^src/(?!store/|(clock|errors|log|contract)\\.ts$)',
    ),
    forbid(
      'batch-and-lease-use-only-the-store',
      'batch and lease are the base of the domain: they use the store and the clock only.',
      '^src/(batch|lease)/',
      '^src/(?!store/|(clock|errors|log|contract|tracing|zod)\\.ts$|$1/)',
    ),
    forbid(
      'jobs-use-batch',
      'Jobs use batches (and the store), not units, leases or anything above.',
      '^src/jobs/',
      '^src/(?!jobs/|batch/|store/|(clock|errors|log|contract|tracing|zod)\\.ts$)',
    ),
    forbid(
      'units-use-jobs-and-lease',
      'Unit jobs use jobs, leases and the store, nothing above the domain.',
      '^src/units/',
      '^src/(?!units/|jobs/|lease/|batch/|store/|(clock|errors|log|contract|tracing|zod)\\.ts$)',
    ),
    forbid(
      'api-and-trigger-below-runtime',
      'The API and the trigger serve the runtime; they never import it (or each other).',
      '^src/api/',
      '^src/(runtime|trigger)/|' + OUTSIDE,
    ),
    forbid(
      'trigger-below-runtime',
      'The trigger serves the runtime; it never imports it (or the API).',
      '^src/trigger/',
      '^src/(runtime|api)/|' + OUTSIDE,
    ),
    forbid(
      'domain-below-api',
      'The domain knows nothing of Lambda, HTTP or the CLI.',
      DOMAIN,
      '^src/(runtime|api|trigger)/|' + OUTSIDE,
    ),
    forbid(
      'runtime-below-entries',
      'The runtime is driven by the entry points, never the other way round.',
      '^src/runtime/',
      OUTSIDE,
    ),
    forbid(
      'lambda-entry-below-functions',
      'functions/ use leasehold/lambda, not the other way round.',
      '^src/lambda\\.ts$',
      '^(functions/|infra/|src/(cli|local|dashboard|client|terminal)/)',
    ),
    forbid(
      'infra-uses-public-entries',
      "The deploy component runs in SST: of the library it may use only the public entry points, as an app's sst.config.ts would.",
      '^infra/',
      '^(src/(?!(index|lambda|contract)\\.ts$)|functions/)',
    ),
    forbid(
      'nothing-imports-infra',
      'The library and its functions never depend on the deploy component.',
      '^(src|functions)/',
      '^infra/',
    ),
    forbid(
      'dashboard-stands-alone',
      'The dashboard page is bundled for the browser on its own; it reads the API through the one client.',
      '^src/dashboard/',
      '^src/(?!dashboard/|client/|api/wire\\.ts$)',
    ),
    forbid(
      'client-is-browser-safe',
      'The API client is bundled into the browser page too: the wire types and the error base only.',
      '^src/client/',
      '^(?!src/client/|src/api/wire\\.ts$|src/errors\\.ts$)',
    ),
    forbid(
      'client-and-terminal-drive-nothing',
      'The API client and the terminal follow serve the CLI and local mode; they import neither.',
      '^src/(client|terminal)/',
      '^src/(cli|local|dashboard)/',
    ),
    {
      name: 'contract-imports-nothing',
      comment:
        'src/contract.ts holds the strings infra/ and src/ share: it imports nothing, so infra/ loads none of the library with it.',
      severity: 'error',
      from: { path: '^src/contract\\.ts$' },
      to: { path: '.' },
    },
    {
      name: 'wire-types-only',
      comment: 'src/api/wire.ts declares the answers: types only, so every reader (the browser page too) can take it.',
      severity: 'error',
      from: { path: '^src/api/wire\\.ts$' },
      to: { path: '.' },
    },
    forbid(
      'test-folders-share-through-support',
      "A test folder uses its own files and test/support/, never another folder's internals.",
      '^test/([^/]+)/',
      '^test/(?!$1/|support/)',
    ),
    forbid(
      'tests-stay-out-of-src',
      'src never imports tests, benchmarks or scripts.',
      '^(src|functions)/',
      '^(test|bench|scripts)/',
    ),
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(node_modules|dist)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { exportsFields: ['exports'], conditionNames: ['import', 'require', 'node', 'default', 'types'] },
  },
};
