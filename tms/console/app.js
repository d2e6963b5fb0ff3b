// The console's shell: sign-in, navigation and pages made of panels.

import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api, ApiError, paths, session } from "./api.js";
import { html, Panel, panelsFor } from "./panel.js";
import "./panels-overview.js";
import "./panels-topic.js";
import "./panels-subscriptions.js";
import "./panels-queue.js";
import "./panels-metrics.js";

const NS_KEY = "txms.console.namespace";

function parseRoute(hash) {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "topic" && parts.length === 3) return { page: "topic", ns: parts[1], topic: parts[2] };
  if (parts[0] === "metrics") return { page: "metrics" };
  if (parts[0] === "ns" && parts[1]) return { page: "overview", ns: parts[1] };
  return { page: "overview" };
}

function SignIn({ onSignedIn, problem }) {
  const [token, setToken] = useState("");
  const [error, setError] = useState(problem);
  const [busy, setBusy] = useState(false);
  const submit = async (event) => {
    event.preventDefault();
    setBusy(true);
    session.signIn(token.trim());
    try {
      onSignedIn(await api(paths.console()));
    } catch (err) {
      session.signOut();
      setError(err.status === 401 ? "That token is not accepted." : err.message);
    } finally {
      setBusy(false);
    }
  };
  return html`<main class="signin">
    <form class="card" onSubmit=${submit}>
      <div class="brand big"><span class="logo">tx</span>ms <span class="muted">console</span></div>
      <p class="muted">This service asks for a bearer token: one of its auth file's tokens.</p>
      <label for="token">Token</label>
      <input id="token" type="password" autocomplete="off" value=${token} onInput=${(e) => setToken(e.target.value)} autofocus />
      ${error ? html`<p class="bad-text" role="alert">${error}</p>` : ""}
      <button type="submit" disabled=${busy || !token.trim()}>Sign in</button>
      <p class="muted small">The token stays in this tab's session storage and is sent only to this service.</p>
    </form>
  </main>`;
}

function Header({ info, route, ns, onSignOut }) {
  const namespaces = info.namespaces.length ? info.namespaces : [ns];
  const choose = (e) => {
    window.location.hash = `#/ns/${encodeURIComponent(e.target.value)}`;
  };
  return html`<header class="top">
    <a class="brand" href="#/"><span class="logo">tx</span>ms <span class="muted">console</span></a>
    <nav>
      <a href=${`#/ns/${ns}`} class=${route.page === "overview" ? "on" : ""}>Overview</a>
      ${route.page === "topic" ? html`<a class="on" href=${`#/topic/${route.ns}/${route.topic}`}>${route.ns}:${route.topic}</a>` : ""}
      ${info.metrics ? html`<a href="#/metrics" class=${route.page === "metrics" ? "on" : ""}>Metrics</a>` : ""}
    </nav>
    <label class="ns">Namespace
      <select value=${ns} onChange=${choose} aria-label="namespace">
        ${namespaces.map((n) => html`<option value=${n}>${n}</option>`)}
      </select>
    </label>
    <div class="who">
      ${info.authentication
        ? html`<span data-field="principal">${info.principal}</span>
            <button type="button" class="link" onClick=${onSignOut}>Sign out</button>`
        : html`<span class="muted">open service (no authentication)</span>`}
      <span class="muted small">v${info.version}</span>
    </div>
  </header>`;
}

function Page({ info, route, refresh, generation }) {
  const ctx = { info, route, refresh };
  const panels = panelsFor(route.page, ctx);
  let title;
  if (route.page === "topic") title = html`<h1>${route.topic} <span class="muted">in ${route.ns}</span></h1>`;
  else if (route.page === "metrics") title = html`<h1>Metrics</h1>`;
  else title = html`<h1>Overview <span class="muted">of ${route.ns}</span></h1>`;
  return html`<main class="page">
    ${title}
    <div class="panels">${panels.map((p) => html`<${Panel} key=${p.id} panel=${p} ctx=${ctx} generation=${generation} />`)}</div>
  </main>`;
}

function App() {
  const [info, setInfo] = useState(null);
  const [problem, setProblem] = useState(null);
  const [hash, setHash] = useState(window.location.hash);
  const [generation, setGeneration] = useState(0);
  useEffect(() => {
    const onHash = () => setHash(window.location.hash);
    window.addEventListener("hashchange", onHash);
    api(paths.console())
      .then(setInfo)
      .catch((err) => {
        if (!(err instanceof ApiError) || err.status !== 401) setProblem(err.message);
        if (session.token() && err.status === 401) setProblem("Your token is no longer accepted.");
        session.signOut();
        setInfo(false);
      });
    return () => window.removeEventListener("hashchange", onHash);
  }, []);
  if (info === null) return html`<p class="boot">Connecting…</p>`;
  if (info === false) return html`<${SignIn} problem=${problem} onSignedIn=${setInfo} />`;
  const route = parseRoute(hash);
  const remembered = sessionStorage.getItem(NS_KEY);
  const ns = route.ns || remembered || info.namespaces[0] || "default";
  if (route.page === "overview") route.ns = ns;
  if (route.ns) sessionStorage.setItem(NS_KEY, route.ns);
  const signOut = () => {
    session.signOut();
    setInfo(false);
    setProblem(null);
  };
  return html`<${Header} info=${info} route=${route} ns=${ns} onSignOut=${signOut} />
    <${Page} info=${info} route=${route} generation=${generation} refresh=${() => setGeneration((g) => g + 1)} />`;
}

render(html`<${App} />`, document.getElementById("app"));
