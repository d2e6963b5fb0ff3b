// Panels: each box of a page is a panel fed by one API call. A panel names the page it
// belongs to, the feature it needs (GET /v1/console reports the service's features; a
// panel whose feature is missing is not shown), how to load its data, and how to show
// it. docs/console.md, "Adding a panel", shows the pattern.

import { h } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import htm from "htm";

export const html = htm.bind(h);

const registry = [];

// panel = {id, page: "overview" | "topic", title, order, feature?, wide?,
//          when?(ctx) -> bool, load(ctx) -> Promise<data>,
//          view(data, ctx, reload) -> vnode (null: the panel is not shown),
//          refreshMs?}
export function registerPanel(panel) {
  registry.push(panel);
  registry.sort((a, b) => (a.order ?? 50) - (b.order ?? 50));
}

export function panelsFor(page, ctx) {
  return registry.filter(
    (p) => p.page === page && (!p.feature || ctx.info.features[p.feature]) && (!p.when || p.when(ctx)),
  );
}

function explain(error) {
  if (error.status === 403) return `You may not see this: ${error.message}`;
  if (error.status === 401) return "Your token is no longer accepted: sign in again.";
  return error.message || String(error);
}

export function Panel({ panel, ctx, generation = 0 }) {
  const [state, setState] = useState({ data: undefined, error: null });
  const [tick, setTick] = useState(0);
  const key = JSON.stringify(ctx.route);
  useEffect(() => {
    let live = true;
    panel
      .load(ctx)
      .then((data) => live && setState({ data, error: null }))
      .catch((error) => live && setState({ data: undefined, error }));
    return () => {
      live = false;
    };
  }, [key, tick, generation]);
  useEffect(() => {
    if (!panel.refreshMs) return undefined;
    const timer = setInterval(() => setTick((t) => t + 1), panel.refreshMs);
    return () => clearInterval(timer);
  }, [key]);
  const reload = () => setTick((t) => t + 1);
  let body;
  if (state.error) body = html`<p class="panel-error" role="alert">${explain(state.error)}</p>`;
  else if (state.data === undefined) body = html`<p class="muted">Loading…</p>`;
  else body = panel.view(state.data, ctx, reload);
  if (body === null) return null; // the panel has nothing to show here
  return html`<section class=${`panel ${panel.wide ? "wide" : ""}`} id=${`panel-${panel.id}`} data-panel=${panel.id}>
    <header><h2>${panel.title}</h2></header>
    <div class="panel-body">${body}</div>
  </section>`;
}

// A uPlot time-series chart: series [{label, values, color}], x in ms.
export function Chart({ times, series, height = 180, unit = "", id }) {
  const box = useRef(null);
  const plot = useRef(null);
  useEffect(() => {
    let alive = true;
    import("uplot").then(({ default: uPlot }) => {
      if (!alive || !box.current) return;
      const data = [times.map((t) => t / 1000), ...series.map((s) => s.values)];
      const width = box.current.clientWidth || 480;
      if (plot.current) {
        plot.current.setData(data);
        plot.current.setSize({ width, height });
        return;
      }
      plot.current = new uPlot(
        {
          width,
          height,
          legend: { show: true },
          cursor: { drag: { x: false, y: false } },
          scales: { x: { time: true } },
          axes: [
            { stroke: "#8a94a6", grid: { stroke: "#eef1f5" } },
            { stroke: "#8a94a6", grid: { stroke: "#eef1f5" }, size: 60, values: (u, v) => v.map((x) => `${x}${unit}`) },
          ],
          series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 2, fill: `${s.color}14`, spanGaps: true }))],
        },
        data,
        box.current,
      );
    });
    return () => {
      alive = false;
    };
  }, [JSON.stringify(times), JSON.stringify(series.map((s) => s.values))]);
  useEffect(() => () => plot.current && plot.current.destroy(), []);
  return html`<div class="chart" ref=${box} data-chart=${id}></div>`;
}
