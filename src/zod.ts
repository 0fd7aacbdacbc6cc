// The zod leasehold's own schemas use: zod/mini (the same zod v4 core as `import * as z from
// 'zod'`, without classic's chained methods), so a worker's cold start loads about a third of
// the bytes classic does (issue 36). Import it as a namespace (`import * as z from
// '../zod.js'`): a bundler then keeps only what is used; `export *` keeps that true here, where
// exporting the namespace object (or using `core.x` as a value) would carry every locale into
// each bundle. Messages come from
// zod's English locale, as with classic, and only that locale is imported.
// Users' schemas (a job's params, a unit job's config) may be classic or mini: both are
// `z.core.$ZodType`, and leasehold parses them with `z.safeParse`.
import { config } from 'zod/mini';
import { globalConfig } from 'zod/v4/core';
import en from 'zod/v4/locales/en.js';

// Classic sets English the same way when its first schema is built; a locale the application
// set first (`z.config(z.locales.fr())`) is kept.
if (!globalConfig.localeError) config(en());

export * from 'zod/mini';
