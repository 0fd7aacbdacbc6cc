// The account, region and partition the stage deploys to, for ARNs SST does not hand out
// (the worker's own ARN, the database user's ARN). SST v4 / @pulumi/aws v7 data sources.

/** Region, account id and partition of the deploy, as outputs. */
export function awsIdentity() {
  return {
    region: aws.getRegionOutput().region,
    accountId: aws.getCallerIdentityOutput().accountId,
    partition: aws.getPartitionOutput().partition,
  };
}

export type AwsIdentity = ReturnType<typeof awsIdentity>;
