// Small helpers the views share: building DOM nodes (text only: nothing from the API is
// ever parsed as HTML) and formatting numbers, times and durations.

// el("td", {class: "x", dataset: {id: "7"}}, "text", child, ...)
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "onclick" || key === "oninput" || key === "onchange" || key === "onsubmit") {
      node.addEventListener(key.slice(2), value);
    } else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== undefined && c !== null));
  return node;
}

export const num = (v) => (v === undefined || v === null || v === "" ? 0 : Number(v));

export function fixed(v, digits = 4) {
  const n = num(v);
  return Number.isFinite(n) ? n.toFixed(digits) : "–";
}

export function duration(seconds) {
  const s = Math.max(0, Math.round(num(seconds)));
  if (!Number.isFinite(s)) return "–";
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  if (h > 0) return `${h}h ${String(m).padStart(2, "0")}m`;
  if (m > 0) return `${m}m ${String(r).padStart(2, "0")}s`;
  return `${r}s`;
}

export function time(unixMs) {
  const ms = num(unixMs);
  return ms > 0 ? new Date(ms).toLocaleString() : "–";
}

// A uint64 checksum (a decimal string in protobuf JSON) as 16 hex digits, as the CLI
// prints it (`lockstep status`, `lockstep train`).
export function hex64(decimal) {
  if (!decimal || decimal === "0") return "–";
  return BigInt(decimal).toString(16).padStart(16, "0");
}

// How long ago, short: "45s ago", "12m ago", "3h ago", "2d ago" (a table column that
// fits a narrow window; the full time is its title).
export function ago(unixMs, now = Date.now()) {
  const ms = num(unixMs);
  if (ms <= 0) return "–";
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 120) return `${s}s ago`;
  if (s < 7200) return `${Math.floor(s / 60)}m ago`;
  if (s < 172800) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

// A finished job's run: its duration in seconds and its average samples/s over it (every
// step's batch over the time from start to end: evaluations, recoveries and resizes
// included, as a user waits for them); null before it has both times.
export function runOf(job) {
  const start = num(job.started_unix_ms), end = num(job.finished_unix_ms);
  if (!TERMINAL.has(job.state) || start <= 0 || end < start) return null;
  const seconds = (end - start) / 1000;
  const batch = num(job.spec && job.spec.global_batch_size);
  return { seconds, samplesPerSec: seconds > 0 ? (num(job.step) * batch) / seconds : 0 };
}

export const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);

export function stateBadge(state, id) {
  return el("span", { class: `state state-${String(state).toLowerCase()}`, id }, state);
}

// Seconds left at the job's current rate, or null when it cannot tell.
export function etaSeconds(job) {
  const left = num(job.total_steps) - num(job.step);
  const rate = num(job.samples_per_sec);
  const batch = num(job.spec && job.spec.global_batch_size);
  if (job.state !== "RUNNING" || left <= 0 || rate <= 0 || batch <= 0) return null;
  return (left * batch) / rate;
}

export function progress(job) {
  const total = num(job.total_steps), step = num(job.step);
  const pct = total > 0 ? Math.min(100, (100 * step) / total) : 0;
  const bar = el("div", { class: "progress", title: `${step} / ${total} steps` },
                 el("div", { class: "progress-fill" }));
  bar.firstChild.style.width = `${pct.toFixed(1)}%`;
  return el("div", { class: "progress-cell" }, bar,
            el("span", { class: "muted" }, total > 0 ? `${step}/${total}` : "–"));
}
