/// <reference path="./.sst/platform/config.d.ts" />
// `npx sst deploy --stage dev`: the app's own function and its leasehold runner.
export default $config({
  app(input) {
    return {
      name: 'example',
      home: 'aws',
      removal: input?.stage === 'production' ? 'retain' : 'remove',
    };
  },
  async run() {
    const { Leasehold } = await import('leasehold/sst');

    // A function the app already has; lambda-invoke batches run it once per item.
    const score = new sst.aws.Function('Score', { handler: 'src/functions/score.handler' });

    const runner = new Leasehold('Runner', {
      handlers: 'src/leasehold',
      // The worker may invoke these (and only these); batches name them as `functionName`.
      invokable: { score },
      schedules: [
        {
          name: 'nightly-squares',
          schedule: 'cron(0 2 * * ? *)',
          job: 'squares',
          tenant: 'ops',
          datasource: 'nightly',
          params: { n: 1000 },
        },
      ],
    });

    return { api: runner.url, bus: runner.busName, worker: runner.workerName };
  },
});
