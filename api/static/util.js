// Shared helpers: DOM shortcuts, number and time formatting, and the page's messages (error, notes, state).

export const $ = (selector, root = document) => root.querySelector(selector);
const TIME_UNITS = [  // largest first: the first unit the longest time reaches twice is used
  { name: "days", short: "days", seconds: 86400 },
  { name: "hours", short: "h", seconds: 3600 },
  { name: "minutes", short: "min", seconds: 60 },
  { name: "seconds", short: "s", seconds: 1 },
];

export function timeUnit(maxSeconds) {
  return TIME_UNITS.find((u) => maxSeconds >= 2 * u.seconds) || TIME_UNITS[TIME_UNITS.length - 1];
}

export function sig3(x) {
  if (x === 0) return "0";
  if (Math.abs(x) >= 100) return Math.round(x).toLocaleString("en-US");
  return Number(x.toPrecision(3)).toString();
}

export function duration(seconds) {
  if (seconds == null) return "—";
  if (seconds < 1) return `${sig3(seconds * 1000)} ms`;
  const unit = timeUnit(seconds);
  return `${sig3(seconds / unit.seconds)} ${unit.short}`;
}

export function money(usd) {
  if (usd == null) return "—";
  if (usd === 0) return "$0";
  if (usd >= 100) return "$" + Math.round(usd).toLocaleString("en-US");
  if (usd >= 0.1) return "$" + usd.toFixed(2);
  return "$" + Number(usd.toPrecision(2)).toString();
}

// Prices per hour keep the cents' fraction under $1 (AWS lists $0.526, not $0.53).
export function hourly(usd) {
  return "$" + usd.toFixed(usd < 1 ? 3 : 2);
}

export function parameters(n) {
  if (n == null) return "";
  if (n >= 1e9) return `${sig3(n / 1e9)} B params`;
  if (n >= 1e6) return `${sig3(n / 1e6)} M params`;
  return `${sig3(n / 1e3)} k params`;
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

// API details name commands in `backticks`: show those as code, everything else as plain text.
export function richText(text) {
  const span = el("span");
  String(text).split(/(`[^`]*`)/).forEach((part) => {
    if (part.startsWith("`") && part.endsWith("`") && part.length > 1) span.append(el("code", { text: part.slice(1, -1) }));
    else span.append(part);
  });
  return span;
}

export function capitalize(text) {
  return text ? text[0].toUpperCase() + text.slice(1) : text;
}

export function showError(title, detail) {
  const box = $("#error");
  box.replaceChildren(el("strong", { text: `${title}: ` }), richText(detail));
  box.hidden = false;
}

export function clearMessages() {
  $("#error").hidden = true;
  $("#error").replaceChildren();
  $("#notes").replaceChildren();
  $("#progress").hidden = true;
}

export function setState(name) {
  document.body.dataset.state = name;
  // A running job may wait long for an agent: a new search stays possible (it stops following the old one).
  $("#search").disabled = name === "submitting";
  $("#cancel").hidden = name !== "running";
}

export function note(content, kind = "info", id = "") {
  const li = el("li", { class: kind }, typeof content === "string" ? richText(content) : content);
  if (id) li.id = id;
  $("#notes").append(li);
  return li;
}

// Large arrays: Math.max(...values) would pass tens of thousands of arguments.
export function extremes(values) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of values) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return [lo, hi];
}

export function joinAnd(names) {
  return names.length < 2 ? names.join("") : `${names.slice(0, -1).join(", ")} and ${names[names.length - 1]}`;
}

export function inOrder(wanted, present) {
  const seen = new Set(present);
  return [...new Set([...wanted.filter((v) => seen.has(v)), ...present])];
}

export function hexToRgba(hex, alpha) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}

// Batch sizes as runs of the requested list: "8, 16, 129–256" instead of a hundred numbers.
export function sizeRuns(sizes, requested) {
  const index = new Map(requested.map((b, i) => [b, i]));
  const runs = [];
  for (const b of sizes) {
    const last = runs[runs.length - 1];
    if (last && index.get(b) === index.get(last[1]) + 1) last[1] = b;
    else runs.push([b, b]);
  }
  return runs.map(([a, b]) => (a === b ? String(a) : index.get(b) - index.get(a) === 1 ? `${a}, ${b}` : `${a}–${b}`)).join(", ");
}

export function listed(names, most = 6) {
  return names.length <= most ? names.join(", ") : `${names.slice(0, most).join(", ")} and ${names.length - most} more`;
}
