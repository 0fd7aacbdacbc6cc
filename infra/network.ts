// The network the functions and the database live in (SST v4 `sst.aws.Vpc`).
//
// Every function that talks to the database runs in the VPC's private subnets. The scheduler, the
// API and the worker also call the Lambda Invoke API, and unit jobs such as outbox delivery call
// tenants' webhooks: both leave the VPC through NAT (`nat: "ec2"` is fck-nat on t4g.nano, cheap;
// production stages get `"managed"` NAT gateways). A Lambda interface endpoint can be added
// (`network.lambdaEndpoint`) to keep Invoke calls inside the VPC.
import type { StageSettings } from './config.js';
import type { AwsIdentity } from './identity.js';

/** Where functions run: an SST Vpc, or the subnets and security groups of an existing one. */
export interface Network {
  /** The `vpc` argument of every function. */
  functionVpc: sst.aws.Vpc | { privateSubnets: string[]; securityGroups: string[] };
  /** The Vpc created here, when one is (the database goes in its private subnets). */
  vpc?: sst.aws.Vpc;
}

/** Create the stage's network, or use the one an existing database names. */
export function network(settings: StageSettings, ids: AwsIdentity): Network {
  const db = settings.database;
  if (db.kind === 'existing' && db.vpc) return { functionVpc: db.vpc };

  const vpc = new sst.aws.Vpc('Vpc', { az: 2, nat: settings.network.nat });
  if (settings.network.lambdaEndpoint) {
    new aws.ec2.VpcEndpoint('LambdaEndpoint', {
      vpcId: vpc.id,
      serviceName: $interpolate`com.amazonaws.${ids.region}.lambda`,
      vpcEndpointType: 'Interface',
      privateDnsEnabled: true,
      subnetIds: vpc.privateSubnets,
      securityGroupIds: vpc.securityGroups,
    });
  }
  return { functionVpc: vpc, vpc };
}
