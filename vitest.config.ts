import { defineConfig } from 'vitest/config';

// Tests run against a real PostgreSQL (see test/support/global-setup.ts and test/support/db.ts).
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The SDK's notice that its 2027 releases need Node 22 (deploys run nodejs22.x).
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
    globalSetup: ['test/support/global-setup.ts'],
    // Concurrency tests wait for beats to turn stale; the embedded server takes seconds to init.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
    pool: 'forks',
    // Two cores: most test time is spent waiting on the database and timers, so a few files at
    // once still pay off without starving the server.
    maxWorkers: 3,
  },
});
