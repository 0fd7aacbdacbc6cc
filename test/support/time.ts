// Time in tests: real sleeps, for tests whose other side (the database, a server, a child
// process) runs on its own clock. Code that takes a clock is driven with ManualClock instead.

/** Resolve after `ms` ms of real time. */
export const sleep = (ms: number): Promise<void> => new Promise<void>((r) => setTimeout(r, ms));

/** A promise that never settles: work of a process that died. */
export const never = <T = unknown>(): Promise<T> => new Promise<T>(() => {});
