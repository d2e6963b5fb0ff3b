// The REST API from the page: the bearer token lives in this tab's session storage
// only (never in a URL), and every error is an ApiError with the API's code and message.

const KEY = "txms.console.token";

export const session = {
  token: () => sessionStorage.getItem(KEY),
  signIn: (token) => sessionStorage.setItem(KEY, token),
  signOut: () => sessionStorage.removeItem(KEY),
};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function api(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  const token = session.token();
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
    });
  } catch (err) {
    throw new ApiError(0, "unreachable", `the service cannot be reached (${err.message})`);
  }
  if (!response.ok) {
    let code = "http_error";
    let message = response.statusText;
    try {
      const error = await response.json();
      code = error.error;
      message = error.message;
    } catch (_) {
      // not the documented JSON: keep the status text
    }
    throw new ApiError(response.status, code, message);
  }
  const type = response.headers.get("Content-Type") || "";
  if (type.includes("json")) return response.json();
  return response.text();
}

export const paths = {
  console: () => "/v1/console",
  stats: (ns) => `/v1/namespaces/${encodeURIComponent(ns)}/stats`,
  topicStats: (ns, t) => `/v1/namespaces/${encodeURIComponent(ns)}/topics/${encodeURIComponent(t)}/stats`,
  topic: (ns, t) => `/v1/namespaces/${encodeURIComponent(ns)}/topics/${encodeURIComponent(t)}`,
  messages: (ns, t, limit, before) =>
    `/v1/namespaces/${encodeURIComponent(ns)}/topics/${encodeURIComponent(t)}/messages?limit=${limit}` +
    (before ? `&before=${before}` : ""),
  queue: (ns, t) => `/v1/namespaces/${encodeURIComponent(ns)}/topics/${encodeURIComponent(t)}/queue`,
  publish: (ns, t) => `/v1/namespaces/${encodeURIComponent(ns)}/topics/${encodeURIComponent(t)}/publish`,
  subscriptions: (ns, t) => `/v1/namespaces/${encodeURIComponent(ns)}/topics/${encodeURIComponent(t)}/subscriptions`,
  seek: (ns, t, name) =>
    `/v1/namespaces/${encodeURIComponent(ns)}/topics/${encodeURIComponent(t)}/subscriptions/${encodeURIComponent(name)}/seek`,
  transactions: () => "/v1/transactions",
  cluster: () => "/v1/cluster",
  history: () => "/v1/metrics/history",
  metrics: () => "/metrics",
};

// What the signed-in principal may do, from GET /v1/console's grants (the API decides;
// this only hides what it would refuse).
export function may(info, permission, namespace, topic) {
  if (!info.authentication) return true;
  return (info.grants || []).some(
    (g) =>
      (g.namespace === "*" || g.namespace === namespace) &&
      (g.topic === "*" || (topic !== undefined && g.topic === topic)) &&
      g.permissions.includes(permission),
  );
}
