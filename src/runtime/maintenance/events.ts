// Batch Finished events left unsent: a run that died between its end and the send, a failed
// put (docs/design.md, "Events").
import type { SendResult } from '../events.js';
import type { MaintenanceService } from './service.js';

/** What sending the events left reads. */
export interface EventsSettings {
  /** No send begins after this long, ms. */
  budgetMs: number;
}

/** The settings of sending events when none are given. */
export const EVENTS_DEFAULTS: Readonly<EventsSettings> = {
  /** @defaultValue 10,000 */
  budgetMs: 10_000,
};

/** What sending the events left did; absent without a sender. */
export interface EventsPart {
  /** Batch Finished events sent by this run. */
  events?: SendResult;
}

/**
 * Send the Batch Finished events left unsent with `ctx.events`, row by row with skip locked so
 * no locked row holds it up; after the fleet's work, before retention. Does nothing without a
 * sender.
 */
export function eventsService(settings: Partial<EventsSettings> = {}): MaintenanceService<'events', EventsPart> {
  const s = { ...EVENTS_DEFAULTS, ...settings };
  return {
    name: 'events',
    run: async ({ events }) => (events ? { events: await events({ budgetMs: s.budgetMs }) } : {}),
  };
}
