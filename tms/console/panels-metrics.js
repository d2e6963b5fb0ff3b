// The metrics page: every sample /metrics exports, searchable (the same list as
// `tms metrics`).

import { useState } from "preact/hooks";
import { api, paths } from "./api.js";
import { html, registerPanel } from "./panel.js";

// Prometheus text format: `name{label="value",...} value` lines; comments skipped.
export function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const [, name, , labelText, value] = match;
    if (name.endsWith("_created") || name.endsWith("_bucket")) continue;
    const labels = [];
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
    let m;
    while ((m = re.exec(labelText || "")) !== null) labels.push(`${m[1]}=${m[2]}`);
    samples.push({ name, labels: labels.sort().join(", "), value: Number(value) });
  }
  return samples;
}

function Samples({ samples }) {
  const [filter, setFilter] = useState("");
  const shown = samples.filter((s) => !filter || `${s.name} ${s.labels}`.includes(filter));
  return html`<div class="toolbar">
      <input type="search" placeholder="Filter, e.g. tms_published or topic=events" value=${filter}
        onInput=${(e) => setFilter(e.target.value)} aria-label="filter metrics" />
      <span class="muted small">${shown.length} of ${samples.length} samples (histogram buckets left out)</span>
    </div>
    <table class="grid" data-table="metrics">
      <thead><tr><th>Metric</th><th>Labels</th><th class="num">Value</th></tr></thead>
      <tbody>${shown.map(
        (s) => html`<tr><td class="mono">${s.name}</td><td class="small">${s.labels}</td>
          <td class="num mono">${Number.isInteger(s.value) ? s.value.toLocaleString("en-US") : s.value.toPrecision(4)}</td></tr>`,
      )}</tbody>
    </table>`;
}

registerPanel({
  id: "metrics",
  page: "metrics",
  title: "Everything the metrics know",
  order: 10,
  wide: true,
  refreshMs: 10000,
  load: () => api(paths.metrics()).then(parseMetrics),
  view: (samples) => html`<${Samples} samples=${samples} />`,
});
