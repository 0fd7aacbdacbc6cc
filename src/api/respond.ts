// The shapes every route answers with: JSON results and ISO 8601 times.
import type { APIGatewayProxyStructuredResultV2 } from 'aws-lambda';

/** What a route returns: an API Gateway v2 structured result. */
export type Result = APIGatewayProxyStructuredResultV2;

/** A JSON answer with `statusCode` and extra headers. */
export function json(statusCode: number, body: unknown, headers: Record<string, string> = {}): Result {
  return { statusCode, headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) };
}

/** An error answer: `{ error: { code, message } }`. */
export function errorResult(status: number, code: string, message: string, headers: Record<string, string> = {}): Result {
  return json(status, { error: { code, message } }, headers);
}

/** A time as ISO 8601, null as null. */
export function iso(d: Date): string;
export function iso(d: Date | null): string | null;
export function iso(d: Date | null): string | null {
  return d === null ? null : new Date(d).toISOString();
}
