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

registerPanel({
  id: "throughput",
  page: "overview",
  title: "Throughput",
  order: 20,
  feature: "metricsHistory",
  when: (ctx) => ctx.info.metrics,
  refreshMs: 2000,
  load: () => api(paths.history()),
  view: (h) => {
    const pts = h.points;
    return html`<div class="stats compact">
        <${Stat} label="published" value=${rate(last(pts, "publishRate"))} field="publishRate" />
        <${Stat} label="fetched" value=${rate(last(pts, "fetchRate"))} field="fetchRate" />
        <${Stat} label="requests" value=${rate(last(pts, "requestRate"))} field="requestRate" />
      </div>
      ${pts.length < 2
        ? html`<p class="muted">Collecting samples (every ${h.intervalSeconds} s)…</p>`
        : html`<${Chart} id="throughput" unit="/s" times=${pts.map((p) => p.time)} series=${[
            { label: "published msg/s", values: pts.map((p) => p.publishRate), color: "#2563eb" },
            { label: "fetched msg/s", values: pts.map((p) => p.fetchRate), color: "#16a34a" },
          ]} />`}`;
  },
});

const ms = (v) => (v === null || v === undefined ? "–" : `${Number(v.toPrecision(3))} ms`);

registerPanel({
  id: "latency",
  page: "overview",
  title: "Latency",
  order: 30,
  feature: "metricsHistory",
  when: (ctx) => ctx.info.metrics,
  refreshMs: 2000,
  load: () => api(paths.history()),
  view: (h) => {
    const pts = h.points;
    return html`<div class="stats compact">
        <${Stat} label="HTTP p50" value=${ms(last(pts, "httpP50Ms"))} field="httpP50" />
        <${Stat} label="HTTP p99" value=${ms(last(pts, "httpP99Ms"))} field="httpP99" />
        <${Stat} label="publish p99" value=${ms(last(pts, "publishP99Ms"))} field="publishP99" />
      </div>
      ${pts.length < 2
        ? html`<p class="muted">Collecting samples…</p>`
        : html`<${Chart} id="latency" unit=" ms" times=${pts.map((p) => p.time)} series=${[
            { label: "HTTP p50", values: pts.map((p) => p.httpP50Ms), color: "#0891b2" },
            { label: "HTTP p99", values: pts.map((p) => p.httpP99Ms), color: "#7c3aed" },
            { label: "publish p99", values: pts.map((p) => p.publishP99Ms), color: "#ea580c" },
          ]} />`}`;
  },
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
