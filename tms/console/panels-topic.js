// A topic's page: what it holds, its newest messages with their transactional status
// (the table debugger), and publishing a test message.

import { useState } from "preact/hooks";
import { api, may, paths } from "./api.js";
import { ago, bytes, count, duration, fromBase64, isoTime, payloadHex, payloadJson, payloadText, rate, toBase64 } from "./format.js";
import { html, registerPanel } from "./panel.js";

registerPanel({
  id: "topic-stats",
  page: "topic",
  title: "What it holds",
  order: 10,
  wide: true,
  refreshMs: 5000,
  load: (ctx) => api(paths.topicStats(ctx.route.ns, ctx.route.topic)),
  view: (s) => html`<div class="stats">
      <div class="stat"><div class="stat-value" data-field="messages">${count(s.messages)}${s.exact ? "" : " ≈"}</div><div class="stat-label">messages</div></div>
      <div class="stat"><div class="stat-value" data-field="payloadBytes">${bytes(s.payloadBytes)}</div><div class="stat-label">payload bytes</div></div>
      <div class="stat"><div class="stat-value" data-field="diskBytes">${bytes(s.diskBytes)}</div><div class="stat-label">on disk (estimate)</div></div>
      <div class="stat"><div class="stat-value" data-field="publishRate">${rate(s.publishRate)}</div><div class="stat-label">published, last minute</div></div>
      <div class="stat"><div class="stat-value" data-field="ttl">${duration(s.ttl)}</div><div class="stat-label">time to live</div></div>
    </div>
    <dl class="facts">
      <dt>first publish</dt><dd data-field="firstPublishTime">${isoTime(s.firstPublishTime)}</dd>
      <dt>last publish</dt><dd data-field="lastPublishTime">${isoTime(s.lastPublishTime)} ${s.lastPublishTime ? html`<span class="muted">(${ago(s.lastPublishTime)})</span>` : ""}</dd>
      <dt>generation</dt><dd>${s.generation}</dd>
    </dl>`,
});

const STATUS = {
  plain: ["non-transactional", "ok"],
  committed: ["committed", "ok"],
  "in progress": ["in progress", "warn"],
  "rolled back": ["rolled back", "muted"],
  invalid: ["invalid", "bad"],
  unknown: ["unknown", "muted"],
};

function preview(message, mode) {
  const data = fromBase64(message.payload);
  if (mode === "hex") return payloadHex(data);
  if (mode === "json") return payloadJson(data) ?? "(not JSON)";
  return payloadText(data);
}

function Messages({ first, ctx }) {
  const [mode, setMode] = useState("text");
  const [pages, setPages] = useState([first]);
  const [loading, setLoading] = useState(false);
  const messages = pages.flatMap((p) => p.messages);
  const lastPage = pages[pages.length - 1];
  const older = async () => {
    setLoading(true);
    try {
      const next = await api(paths.messages(ctx.route.ns, ctx.route.topic, 50, messages[messages.length - 1].id));
      setPages([...pages, next]);
    } finally {
      setLoading(false);
    }
  };
  const judged = {
    fresh: "Statuses judged against a fresh transaction just now.",
    none: "No transaction manager is known to this service: transactional entries show as unknown.",
    unavailable: "The transaction manager could not be reached: transactional entries show as unknown.",
  }[first.judged];
  return html`<div class="toolbar">
      <div class="segmented" role="group" aria-label="payload view">
        ${["text", "hex", "json"].map(
          (m) => html`<button type="button" class=${mode === m ? "on" : ""} data-mode=${m} aria-pressed=${mode === m}
            onClick=${() => setMode(m)}>${m === "json" ? "JSON" : m[0].toUpperCase() + m.slice(1)}</button>`,
        )}
      </div>
      <span class="muted small">${judged}</span>
    </div>
    ${messages.length === 0
      ? html`<p class="muted">No messages yet.</p>`
      : html`<table class="grid messages" data-table="messages">
          <thead><tr><th>Published</th><th>Status</th><th>Payload</th><th class="num">Size</th><th>Id</th></tr></thead>
          <tbody>${messages.map((m) => {
            const [label, tone] = STATUS[m.status] || [m.status, "muted"];
            return html`<tr data-id=${m.id} data-status=${m.status}>
              <td class="nowrap" title=${isoTime(m.publishTime)}>${isoTime(m.publishTime)}</td>
              <td><span class=${`badge ${tone}`} title=${m.txWritePointer === null ? "" : `write pointer ${m.txWritePointer}`}>${label}</span></td>
              <td class="payload"><pre data-field="payload">${preview(m, mode)}${m.truncated ? "…" : ""}</pre></td>
              <td class="num">${bytes(m.size)}</td>
              <td class="mono small id">${m.id}</td>
            </tr>`;
          })}</tbody>
        </table>`}
    ${lastPage.more ? html`<button type="button" class="secondary" disabled=${loading} onClick=${older}>Load older</button>` : ""}`;
}

registerPanel({
  id: "messages",
  page: "topic",
  title: "Newest messages",
  order: 20,
  wide: true,
  load: (ctx) => api(paths.messages(ctx.route.ns, ctx.route.topic, 50)),
  view: (data, ctx) => html`<${Messages} first=${data} ctx=${ctx} key=${JSON.stringify(data.messages.map((m) => m.id))} />`,
});

function Publish({ ctx }) {
  const [text, setText] = useState("");
  const [said, setSaid] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (event) => {
    event.preventDefault();
    setBusy(true);
    try {
      await api(paths.publish(ctx.route.ns, ctx.route.topic), { method: "POST", body: { messages: [toBase64(text)] } });
      setSaid({ ok: true, text: `Published 1 message to ${ctx.route.ns}:${ctx.route.topic}.` });
      setText("");
      ctx.refresh();
    } catch (error) {
      setSaid({ ok: false, text: error.message });
    } finally {
      setBusy(false);
    }
  };
  return html`<form class="publish" onSubmit=${submit}>
      <label for="test-message">Payload (UTF-8)</label>
      <textarea id="test-message" rows="3" placeholder='{"hello": "world"}' value=${text}
        onInput=${(e) => setText(e.target.value)}></textarea>
      <div class="row">
        <button type="submit" disabled=${busy || text === ""}>Publish</button>
        ${said ? html`<span class=${said.ok ? "ok-text" : "bad-text"} role="status">${said.text}</span>` : ""}
      </div>
    </form>`;
}

registerPanel({
  id: "publish",
  page: "topic",
  title: "Publish a test message",
  order: 30,
  when: (ctx) => may(ctx.info, "write", ctx.route.ns, ctx.route.topic),
  load: async () => ({}),
  view: (_data, ctx) => html`<${Publish} ctx=${ctx} />`,
});
