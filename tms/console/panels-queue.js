// A queue's page (a topic of kind "queue", docs/queues.md): how many messages are
// ready, leased, scheduled, dead-lettered, pending in transactions and acked, and how
// long the oldest ready one has waited. The panel reads the topic's properties first
// and shows nothing for a topic that is not a queue.

import { api, paths } from "./api.js";
import { ago, count, isoTime } from "./format.js";
import { html, registerPanel } from "./panel.js";

const STATES = [
  ["ready", "ready"],
  ["leased", "leased"],
  ["scheduled", "scheduled"],
  ["dead", "dead-lettered"],
  ["pending", "pending (in transactions)"],
  ["acked", "acked, not yet purged"],
];

registerPanel({
  id: "queue",
  page: "topic",
  title: "Queue",
  order: 5,
  wide: true,
  feature: "queues",
  refreshMs: 5000,
  load: async (ctx) => {
    const properties = await api(paths.topic(ctx.route.ns, ctx.route.topic));
    if (properties.kind !== "queue") return null;
    return { properties, stats: await api(paths.queue(ctx.route.ns, ctx.route.topic)) };
  },
  view: (data) => {
    if (data === null) return null;
    const { stats, properties } = data;
    return html`<div class="stats" data-table="queue">
        ${STATES.map(
          ([key, label]) => html`<div class="stat"><div class="stat-value" data-field=${key}>${count(stats[key])}</div><div class="stat-label">${label}</div></div>`,
        )}
      </div>
      <dl class="facts">
        <dt>oldest ready since</dt><dd data-field="oldestReadyTime">${isoTime(stats.oldestReadyTime)} ${stats.oldestReadyTime ? html`<span class="muted">(${ago(stats.oldestReadyTime)})</span>` : ""}</dd>
        <dt>lease</dt><dd>${properties.lease_s ?? "30"} s</dd>
        <dt>max attempts</dt><dd>${properties.max_attempts ?? "10"}</dd>
      </dl>`;
  },
});
