// A small line chart in SVG, no library: a few series of points drawn as lines or as dots
// (evaluation points), axes with round tick values (1, 2 or 5 times a power of ten), a
// legend. As TensorBoard's: lines can be smoothed (an exponential moving average,
// debiased, the raw line kept faint behind), and the x axis is the step or the wall time
// since the first point. The chart's element carries data-points (how many points it
// has) and data-last-x (the largest step), which the browser tests read.
import { el } from "./format.js";

const NS = "http://www.w3.org/2000/svg";
const W = 560, H = 220, LEFT = 56, RIGHT = 12, TOP = 12, BOTTOM = 28;

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

// A round step for about `count` ticks over [lo, hi]: 1, 2 or 5 times a power of ten
// (or, for `time`, a round number of seconds, minutes or hours).
function niceStep(lo, hi, count, time) {
  const raw = (hi - lo) / count;
  if (time && raw >= 1) {
    const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200,
                   86400];
    return steps.find((s) => s >= raw) || Math.ceil(raw / 86400) * 86400;
  }
  // The nice step nearest above two thirds of the even one: 4 to 7 ticks for count 4.
  const p = 10 ** Math.floor(Math.log10(raw / 1.5));
  return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw / 1.5);
}

// The multiples of `step` in [lo, hi].
function multiples(lo, hi, step) {
  const out = [];
  for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k += 1) {
    out.push(k === 0 ? 0 : Number((k * step).toPrecision(12)));
  }
  return out;
}

// Round tick values over [lo, hi]: about `count` of them, the multiples of a niceStep.
export function niceTicks(lo, hi, count, time = false) {
  if (!(hi > lo)) return [lo];
  return multiples(lo, hi, niceStep(lo, hi, count, time));
}

// A tick's label: as many decimals as its step needs, no more.
function label(v, step) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e6 || a < 1e-4) return v.toExponential(1);
  const decimals = Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9)));
  return v.toFixed(decimals);
}

// Seconds as the wall-time axis shows them: 45s, 2:30, 1:05:00.
export function clock(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  const pad = (n) => String(n).padStart(2, "0");
  return h > 0 ? `${h}:${pad(m)}:${pad(r)}` : `${m}:${pad(r)}`;
}

// TensorBoard's smoothing: an exponential moving average with weight `w` (0: none),
// debiased so that the first points are not pulled towards 0.
export function smooth(points, w) {
  if (!(w > 0)) return points;
  let last = 0, n = 0;
  return points.map((p) => {
    last = last * w + (1 - w) * p.y;
    n += 1;
    return { ...p, y: last / (1 - w ** n) };
  });
}

// Lines draw at most this many points each: every k-th, and the last.
const MAX_DRAWN = 1200;

function thin(points, max) {
  if (points.length <= max) return points;
  const k = Math.ceil(points.length / max);
  const out = points.filter((_, i) => i % k === 0);
  if (out[out.length - 1] !== points[points.length - 1]) out.push(points[points.length - 1]);
  return out;
}

export class LineChart {
  // series: [{name, color, dots: bool}]. With `clip`, the y axis ends at the 98th
  // percentile (times: a first step's warm-up would flatten every other), higher points
  // drawn at its top.
  constructor(id, title, series, { clip = false } = {}) {
    this.series = series;
    this.clip = clip;
    this.svg = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart-svg", role: "img" });
    this.legend = el("div", { class: "legend" },
      series.map((s) => el("span", { class: "legend-item" },
        el("span", { class: `swatch ${s.color}` }), s.name)));
    this.element = el("figure", { class: "chart", id, dataset: { points: "0" } },
      el("figcaption", {}, title), this.svg, this.legend);
  }

  // data: one array of {x: step, t: unix ms, y} per series (in the constructor's order),
  // ascending x. view: {x: "step" | "time", smoothing: 0..0.99, empty: the text when
  // there is no point}.
  update(data, { x: axis = "step", smoothing = 0, empty = "no data yet" } = {}) {
    const finite = (p) => Number.isFinite(p.x) && Number.isFinite(p.y);
    const all = data.flat().filter(finite);
    this.element.dataset.points = String(all.length);
    this.element.dataset.lastX = String(all.length ? Math.max(...all.map((p) => p.x)) : 0);
    this.element.dataset.axis = axis;
    this.svg.replaceChildren();
    if (all.length === 0) {
      this.svg.append(svg("text", { x: W / 2, y: H / 2, class: "chart-empty" }, empty));
      return;
    }
    // The x of a point: its step, or its seconds since the chart's first point.
    const t0 = Math.min(...all.map((p) => p.t || Infinity));
    const xOf = axis === "time" && Number.isFinite(t0) ? (p) => ((p.t || t0) - t0) / 1000
                                                       : (p) => p.x;
    let [x0, x1] = [Math.min(...all.map(xOf)), Math.max(...all.map(xOf))];
    let [y0, y1] = [Math.min(...all.map((p) => p.y)), Math.max(...all.map((p) => p.y))];
    if (this.clip && all.length >= 20) {
      const ys = all.map((p) => p.y).sort((a, b) => a - b);
      y1 = Math.min(y1, ys[Math.floor(0.98 * (ys.length - 1))] * 1.2);
    }
    if (x1 === x0) x1 = x0 + 1;
    if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
    // The y axis spans whole steps of its ticks: round numbers at its ends too.
    const yStep = niceStep(y0, y1, 4, false);
    y0 = Math.floor(y0 / yStep + 1e-9) * yStep;
    if (!this.clip) y1 = Math.ceil(y1 / yStep - 1e-9) * yStep;
    const px = (x) => LEFT + ((x - x0) / (x1 - x0)) * (W - LEFT - RIGHT);
    const py = (y) => H - BOTTOM - ((Math.min(y, y1) - y0) / (y1 - y0)) * (H - TOP - BOTTOM);
    for (const t of multiples(y0, y1, yStep)) {
      this.svg.append(svg("line", { x1: LEFT, x2: W - RIGHT, y1: py(t), y2: py(t), class: "grid" }));
      this.svg.append(svg("text", { x: LEFT - 6, y: py(t) + 4, class: "tick tick-y" }, label(t, yStep)));
    }
    const xTicks = niceTicks(x0, x1, 5, axis === "time");
    for (const t of xTicks) {
      this.svg.append(svg("text", { x: px(t), y: H - 8, class: "tick tick-x" },
                          axis === "time" ? clock(t) : String(Math.round(t))));
    }
    this.svg.append(svg("line", { x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM, class: "axis" }));
    this.svg.append(svg("line", { x1: LEFT, x2: W - RIGHT, y1: H - BOTTOM, y2: H - BOTTOM,
                                  class: "axis" }));
    const path = (points, cls) => {
      const d = thin(points, MAX_DRAWN)
        .map((p, k) => `${k ? "L" : "M"}${px(xOf(p)).toFixed(1)},${py(p.y).toFixed(1)}`);
      this.svg.append(svg("path", { d: d.join(""), class: cls }));
    };
    this.series.forEach((s, i) => {
      const points = (data[i] || []).filter(finite);
      if (s.dots) {
        for (const p of points) {
          const dot = svg("circle", { cx: px(xOf(p)), cy: py(p.y), r: 4, class: `dot ${s.color}` });
          dot.append(svg("title", {}, `${s.name} at step ${p.x}: ${p.y.toFixed(4)}`));
          this.svg.append(dot);
        }
      } else if (points.length > 0) {
        if (smoothing > 0) path(points, `line raw ${s.color}`);  // the raw line, faint
        path(smooth(points, smoothing), `line ${s.color}`);
      }
    });
  }
}
