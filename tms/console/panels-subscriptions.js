// A topic's subscriptions: where each one is, how far behind (lag), and moving it (seek).
// One API call (GET …/subscriptions); seeking is POST …/seek with the version shown,
// so a subscription that moved meanwhile is refused (409 bad_version) and the list
// reloads.

import { useState } from "preact/hooks";
import { api, may, paths } from "./api.js";
import { ago, count, isoTime } from "./format.js";
import { html, registerPanel } from "./panel.js";

function lag(s) {
  if (!s.lag) return "–";
  return `${count(s.lag.messages)}${s.lag.exact ? "" : " ≈"}`;
}

function Seek({ s, ctx }) {
  const [to, setTo] = useState("earliest");
  const [value, setValue] = useState("");
  const [said, setSaid] = useState(null);
  const [busy, setBusy] = useState(false);
  const target = () => {
    if (to === "time") return { time: Date.parse(value) || Number(value) };
    if (to === "id") return { id: value.trim().toLowerCase() };
    return to;
  };
  const submit = async (event) => {
    event.preventDefault();
    setBusy(true);
    try {
      const moved = await api(paths.seek(ctx.route.ns, ctx.route.topic, s.name), {
        method: "POST",
        body: { to: target(), version: s.version },
      });
      setSaid({ ok: true, text: `Moved to ${moved.position.slice(0, 16)}… (version ${moved.version}).` });
      ctx.refresh();
    } catch (error) {
      setSaid({ ok: false, text: error.message });
    } finally {
      setBusy(false);
    }
  };
  return html`<form class="seek" data-seek=${s.name} onSubmit=${submit}>
      <select aria-label=${`seek ${s.name} to`} value=${to} onChange=${(e) => setTo(e.target.value)}>
        <option value="earliest">earliest</option>
        <option value="latest">latest</option>
        <option value="time">time</option>
        <option value="id">message id</option>
      </select>
      ${to === "time" || to === "id"
        ? html`<input type="text" aria-label="where" placeholder=${to === "time" ? "2024-05-20T12:00:00Z" : "40 hex digits"}
            value=${value} onInput=${(e) => setValue(e.target.value)} />`
        : ""}
      <button type="submit" class="small" disabled=${busy || ((to === "time" || to === "id") && !value)}>Seek</button>
      ${said ? html`<span class=${said.ok ? "ok-text" : "bad-text"} role="status">${said.text}</span>` : ""}
    </form>`;
}

registerPanel({
  id: "subscriptions",
  page: "topic",
  title: "Subscriptions",
  order: 15,
  wide: true,
  feature: "subscriptions",
  refreshMs: 5000,
  load: (ctx) => api(paths.subscriptions(ctx.route.ns, ctx.route.topic)),
  view: (subs, ctx) =>
    subs.length === 0
      ? html`<p class="muted">No subscriptions. <span class="mono small">tms subscriptions create ${ctx.route.ns} ${ctx.route.topic} NAME</span> makes one.</p>`
      : html`<table class="grid" data-table="subscriptions">
          <thead><tr><th>Name</th><th class="num">Lag</th><th>Position</th><th class="num">Version</th><th>Last moved</th><th>Reads</th><th>Seek</th></tr></thead>
          <tbody>${subs.map(
            (s) => html`<tr data-name=${s.name}>
              <td>${s.name}</td>
              <td class="num" data-field="lag" title=${s.lag && !s.lag.exact ? "estimated" : "counted"}>${lag(s)}</td>
              <td class="mono small" data-field="position" title=${s.committedBy ? `committed by transaction ${s.committedBy}` : "committed position"}>${s.position}</td>
              <td class="num" data-field="version">${s.version}</td>
              <td class="nowrap" title=${isoTime(s.updated)}>${ago(s.updated)}</td>
              <td><span class=${`badge ${s.preferences.transactional ? "ok" : "muted"}`}>${s.preferences.transactional ? "committed only" : "everything"}</span></td>
              <td>${may(ctx.info, "read", ctx.route.ns, ctx.route.topic) ? html`<${Seek} s=${s} ctx=${ctx} />` : ""}</td>
            </tr>`,
          )}</tbody>
        </table>`,
});
