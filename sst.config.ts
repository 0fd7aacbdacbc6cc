/// <reference path="./.sst/platform/config.d.ts" />
// leasehold on AWS: `npx sst deploy --stage NAME` (see docs/deploy.md). This repository's own
// app: its runner (functions/leasehold.ts, the built-in jobs) through the Leasehold component,
// the same one apps use from 'leasehold/sst' (here from the sources).
//
// Targets SST v4 (sst 4.17.1 from npm). SST generates .sst/platform/config.d.ts on its first run;
// this file is kept out of this project's `tsc` and tested by evaluating it with stand-ins
// (test/infra). No top-level imports, as SST asks: the component is imported inside run().
export default $config({
  app(input) {
    // Production stages keep their database and VPC when removed and are protected from
    // `sst remove` (the component's PRODUCTION_STAGES; the infrastructure test checks).
    const production = ['production', 'prod'].includes(input?.stage);
    return {
      name: 'leasehold',
      home: 'aws',
      version: '^4.17.1',
      removal: production ? 'retain' : 'remove',
      protect: production,
    };
  },
  async run() {
    const { Leasehold, databaseFromEnv } = await import('./infra/index.js');
    const runner = new Leasehold('Runner', {
      handlers: 'functions/leasehold',
      // LEASEHOLD_DATABASE_HOST & co. at deploy time: use that database instead of creating one.
      ...databaseFromEnv(process.env),
      schedules: [
        {
          // An example, deployed disabled: set `enabled: true` to checksum the function's own code
          // every night at 03:00 UTC.
          name: 'nightly-checksum',
          schedule: 'cron(0 3 * * ? *)',
          enabled: false,
          job: 'checksum',
          tenant: 'ops',
          datasource: 'lambda-code',
          params: { dir: '/var/task' },
        },
      ],
    });
    return {
      api: runner.url,
      events: runner.eventsUrl,
      bus: runner.busName,
      worker: runner.workerName,
      database: runner.databaseHost,
    };
  },
});
