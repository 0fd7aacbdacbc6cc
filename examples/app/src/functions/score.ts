// A Lambda function the app already had: scores a text. Deployed as its own function
// (sst.config.ts), and run once per item by `lambda-invoke` batches.
import type { LambdaInvokeEvent } from 'leasehold';

const GOOD = new Set(['good', 'great', 'fast', 'love', 'nice']);
const BAD = new Set(['bad', 'slow', 'broken', 'hate', 'late']);

export async function handler(event: LambdaInvokeEvent): Promise<{ words: number; score: number }> {
  const { text } = event.input as { text: string };
  if (typeof text !== 'string') throw new TypeError(`item ${event.key}: input.text must be a string`);
  const words = text.toLowerCase().match(/[a-z']+/g) ?? [];
  const score = words.reduce((s, w) => s + (GOOD.has(w) ? 1 : BAD.has(w) ? -1 : 0), 0);
  return { words: words.length, score };
}
