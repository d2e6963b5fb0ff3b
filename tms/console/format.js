// How values show: the same conventions as the command line (docs/http.md, "CLI").

const pad = (n, w = 2) => String(n).padStart(w, "0");

// ISO-8601 with milliseconds in the browser's local time, with its offset.
export function isoTime(ms) {
  if (ms === null || ms === undefined) return "–";
  const d = new Date(ms);
  const off = -d.getTimezoneOffset();
  const sign = off >= 0 ? "+" : "-";
  const zone = `${sign}${pad(Math.floor(Math.abs(off) / 60))}:${pad(Math.abs(off) % 60)}`;
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}${zone}`
  );
}

export function ago(ms, now = Date.now()) {
  if (ms === null || ms === undefined) return "never";
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  if (i === 0) return `${v} B`;
  return `${v < 100 ? Number(v.toPrecision(3)) : Math.round(v)} ${units[i]}`;
}

export function count(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US");
}

export function rate(perS) {
  if (perS === null || perS === undefined) return "–";
  if (perS === 0) return "0/s";
  for (const [size, suffix] of [[1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
    if (perS >= size) return `${Number((perS / size).toPrecision(3))}${suffix}/s`;
  }
  return `${Number(perS.toPrecision(3))}/s`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]]) {
    if (seconds % size === 0) return `${seconds / size}${unit}`;
  }
  return `${seconds}s`;
}

export function fromBase64(text) {
  const raw = atob(text);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i += 1) out[i] = raw.charCodeAt(i);
  return out;
}

export function toBase64(text) {
  const data = new TextEncoder().encode(text);
  let raw = "";
  for (const b of data) raw += String.fromCharCode(b);
  return btoa(raw);
}

const ESCAPES = { "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t" };

// A payload as text: UTF-8, control characters and undecodable bytes escaped, so a
// payload can never change how the page reads (it is also only ever set as text).
export function payloadText(data) {
  let out = "";
  let i = 0;
  const decoder = new TextDecoder("utf-8", { fatal: true });
  while (i < data.length) {
    const b = data[i];
    const len = b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc2 ? 2 : 0;
    let ch = null;
    if (len && i + len <= data.length) {
      try {
        ch = decoder.decode(data.subarray(i, i + len));
      } catch (_) {
        ch = null;
      }
    }
    if (ch === null) {
      out += `\\x${pad(data[i].toString(16))}`;
      i += 1;
      continue;
    }
    const code = ch.codePointAt(0);
    if (ESCAPES[ch]) out += ESCAPES[ch];
    else if (code < 0x20 || code === 0x7f || (code >= 0x80 && code < 0xa0)) out += `\\x${pad(code.toString(16))}`;
    else if ((code >= 0x200b && code <= 0x200f) || (code >= 0x202a && code <= 0x202e) || (code >= 0x2066 && code <= 0x2069))
      out += `\\u${code.toString(16).padStart(4, "0")}`;
    else out += ch;
    i += len;
  }
  return out;
}

export function payloadHex(data) {
  return Array.from(data, (b) => pad(b.toString(16))).join(" ");
}

// Pretty JSON, or null when the payload is not JSON.
export function payloadJson(data) {
  try {
    return JSON.stringify(JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data)), null, 2);
  } catch (_) {
    return null;
  }
}
