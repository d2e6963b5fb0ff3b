// The overview page: the namespace's topics, live throughput and latency, and the
// transaction manager.

import { api, paths } from "./api.js";
import { ago, bytes, count, duration, isoTime, rate } from "./format.js";
import { Chart, html, registerPanel } from "./panel.js";

function Stat({ label, value, field, title }) {
  return html`<div class="stat" title=${title || ""}>
    <div class="stat-value" data-field=${field}>${value}</div>
    <div class="stat-label">${label}</div>
  </div>`;
}

export function TopicsTable({ rows, ns }) {
  if (!rows.length) return html`<p class="muted">No topics in ${ns} yet.</p>`;
  return html`<table class="grid" data-table="topics">
    <thead><tr>
      <th>Topic</th><th class="num">Messages</th><th class="num">Bytes</th>
      <th class="num">Rate (1 min)</th><th>Last publish</th><th class="num">TTL</th>
    </tr></thead>
    <tbody>${rows.map(
      (t) => html`<tr data-topic=${t.topic}>
        <td><a href=${`#/topic/${ns}/${t.topic}`}>${t.topic}</a></td>
        <td class="num" data-field="messages">${count(t.messages)}${t.exact ? "" : html`<span class="estimate" title="estimated">≈</span>`}</td>
        <td class="num" data-field="payloadBytes">${bytes(t.payloadBytes)}</td>
        <td class="num" data-field="publishRate">${rate(t.publishRate)}</td>
        <td data-field="lastPublishTime" title=${isoTime(t.lastPublishTime)}>${t.lastPublishTime ? ago(t.lastPublishTime) : "never"}</td>
        <td class="num">${duration(t.ttl)}</td>
      </tr>`,
    )}</tbody>
  </table>`;
}

registerPanel({
  id: "topics",
  page: "overview",
  title: "Topics",
  order: 10,
  wide: true,
  refreshMs: 5000,
  load: (ctx) => api(paths.stats(ctx.route.ns)),
  view: (rows, ctx) => {
    const total = rows.reduce((n, t) => n + t.messages, 0);
    const totalBytes = rows.reduce((n, t) => n + t.payloadBytes, 0);
    const totalRate = rows.reduce((n, t) => n + t.publishRate, 0);
    const last = rows.reduce((m, t) => Math.max(m, t.lastPublishTime || 0), 0) || null;
    return html`<div class="stats">
        <${Stat} label="topics" value=${count(rows.length)} field="topicCount" />
        <${Stat} label="messages stored" value=${count(total)} field="totalMessages" />
        <${Stat} label="payload bytes" value=${bytes(totalBytes)} field="totalBytes" />
        <${Stat} label="published, last minute" value=${rate(totalRate)} field="totalRate" />
        <${Stat} label="last publish" value=${last ? ago(last) : "never"} field="lastPublish" title=${isoTime(last)} />
      </div>
      <${TopicsTable} rows=${rows} ns=${ctx.route.ns} />`;
  },
});

const last = (points, key) => (points.length ? points[points.length - 1][key] : null);
const ms = (v) => (v === null || v === undefined ? "–" : `${Number(v.toPrecision(3))} ms`);

// A panel of the metrics history: the newest value of some series, and a chart of them.
// stats: [label, key, format, field]; lines: [label, key, colour].
function historyPanel({ id, title, order, unit, stats, lines }) {
  registerPanel({
    id,
    page: "overview",
    title,
    order,
    feature: "metricsHistory",
    when: (ctx) => ctx.info.metrics,
    refreshMs: 2000,
    load: () => api(paths.history()),
    view: (h) => {
      const pts = h.points;
      return html`<div class="stats compact">
          ${stats.map(([label, key, fmt, field]) => html`<${Stat} label=${label} value=${fmt(last(pts, key))} field=${field} />`)}
        </div>
        ${pts.length < 2
          ? html`<p class="muted">Collecting samples (every ${h.intervalSeconds} s)…</p>`
          : html`<${Chart} id=${id} unit=${unit} times=${pts.map((p) => p.time)}
              series=${lines.map(([label, key, color]) => ({ label, values: pts.map((p) => p[key]), color }))} />`}`;
    },
  });
}

historyPanel({
  id: "throughput",
  title: "Throughput",
  order: 20,
  unit: "/s",
  stats: [
    ["published", "publishRate", rate, "publishRate"],
    ["fetched", "fetchRate", rate, "fetchRate"],
    ["requests", "requestRate", rate, "requestRate"],
  ],
  lines: [
    ["published msg/s", "publishRate", "#2563eb"],
    ["fetched msg/s", "fetchRate", "#16a34a"],
  ],
});

historyPanel({
  id: "latency",
  title: "Latency",
  order: 30,
  unit: " ms",
  stats: [
    ["HTTP p50", "httpP50Ms", ms, "httpP50"],
    ["HTTP p99", "httpP99Ms", ms, "httpP99"],
    ["publish p99", "publishP99Ms", ms, "publishP99"],
  ],
  lines: [
    ["HTTP p50", "httpP50Ms", "#0891b2"],
    ["HTTP p99", "httpP99Ms", "#7c3aed"],
    ["publish p99", "publishP99Ms", "#ea580c"],
  ],
});

registerPanel({
  id: "transactions",
  page: "overview",
  title: "Transaction manager",
  order: 40,
  feature: "transactions",
  when: (ctx) => ctx.info.metrics,
  refreshMs: 5000,
  load: () => api(paths.transactions()),
  view: (tx) => {
    const hist = tx.history || [];
    const prune = tx.lastPrune
      ? `${ago(tx.lastPrune.time)}, removed ${count(tx.lastPrune.removed)}`
      : tx.pruneKnown
        ? "not yet"
        : "not known here (the transaction server prunes)";
    return html`<div class="stats compact">
        <${Stat} label="in progress" value=${count(tx.inProgress)} field="inProgress" />
        <${Stat} label="invalid" value=${count(tx.invalid)} field="invalid" />
        <${Stat} label="last prune" value=${tx.lastPrune ? ago(tx.lastPrune.time) : "–"} field="lastPrune" title=${prune} />
      </div>
      <dl class="facts">
        <dt>manager</dt><dd>${tx.manager}</dd>
        <dt>read pointer</dt><dd class="mono" data-field="readPointer">${tx.readPointer}</dd>
        <dt>write pointer</dt><dd class="mono" data-field="writePointer">${tx.writePointer}</dd>
        <dt>oldest in progress</dt><dd>${tx.oldestInProgressTime ? `${isoTime(tx.oldestInProgressTime)} (${ago(tx.oldestInProgressTime)})` : "none"}</dd>
        <dt>last prune</dt><dd>${prune}</dd>
      </dl>
      ${hist.length >= 2
        ? html`<${Chart} id="invalid" height=${110} times=${hist.map((p) => p.time)} series=${[
            { label: "invalid list size", values: hist.map((p) => p.invalid), color: "#dc2626" },
            { label: "in progress", values: hist.map((p) => p.inProgress), color: "#ca8a04" },
          ]} />`
        : html`<p class="muted">The invalid list's trend appears after a few samples.</p>`}`;
  },
});
