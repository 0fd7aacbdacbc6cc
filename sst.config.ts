/// <reference path="./.sst/platform/config.d.ts" />
// leasehold on AWS: `npx sst deploy --stage NAME` (see README, "Deploy").
//
// Targets SST v4 (written against sst 4.17.1 from npm, whose components include CronV2,
// ApiGatewayV2, Bus, Postgres and Vpc as used in infra/). SST generates
// .sst/platform/config.d.ts on its first run; this file and infra/ are kept out of this
// project's `tsc` and are tested by evaluating them with stand-ins (test/infra).
//
// No top-level imports here, as SST asks: infra/ is imported inside run().
export default $config({
  app(input) {
    // Same list as PRODUCTION_STAGES in infra/config.ts (the infrastructure test checks).
    const production = ['production', 'prod'].includes(input?.stage);
    return {
      name: 'leasehold',
      home: 'aws',
      version: '^4.17.1',
      // Production keeps its database (RDS instance, parameter and subnet groups) and VPC when
      // removed; other stages remove everything.
      removal: production ? 'retain' : 'remove',
      protect: production,
    };
  },
  async run() {
    const { stageSettings } = await import('./infra/config.js');
    const { awsIdentity } = await import('./infra/identity.js');
    const { network } = await import('./infra/network.js');
    const { database } = await import('./infra/database.js');
    const { migrations } = await import('./infra/migrations.js');
    const { runner, worker, scheduler } = await import('./infra/functions.js');
    const { api } = await import('./infra/api.js');
    const { triggers } = await import('./infra/triggers.js');

    const settings = stageSettings($app.stage, process.env);
    const ids = awsIdentity();
    const net = network(settings, ids);
    const db = database(settings, net, ids);
    const migration = migrations(settings, net, db);
    const r = runner(settings, net, db, ids, migration);

    const workerFn = worker(r);
    scheduler(r);
    const http = api(r);
    const { bus } = triggers(r);

    return {
      api: http.gateway.url,
      bus: bus.name,
      worker: workerFn.name,
      database: db.host,
    };
  },
});
