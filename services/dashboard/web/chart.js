// A small line chart in SVG, no library: a few series of (x, y) points drawn as lines or
// as dots (evaluation points), linear axes from the data's range, a legend. The chart's
// element carries data-points (how many points it has) and data-last-x (the largest x),
// which the browser tests read.
import { el } from "./format.js";

const NS = "http://www.w3.org/2000/svg";
const W = 560, H = 220, LEFT = 56, RIGHT = 12, TOP = 12, BOTTOM = 28;

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function ticks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const step = (hi - lo) / count;
  return Array.from({ length: count + 1 }, (_, i) => lo + i * step);
}

function label(v, span) {
  const a = Math.abs(v);
  if (a < span * 1e-3) return "0";
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(1);
  return a >= 100 ? v.toFixed(0) : a >= 1 ? v.toFixed(2) : v.toFixed(3);
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

  // data: one array of {x, y} per series (in the constructor's order), ascending x.
  update(data) {
    const all = data.flat().filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y));
    this.element.dataset.points = String(all.length);
    this.element.dataset.lastX = String(all.length ? Math.max(...all.map((p) => p.x)) : 0);
    this.svg.replaceChildren();
    if (all.length === 0) {
      this.svg.append(svg("text", { x: W / 2, y: H / 2, class: "chart-empty" }, "no data yet"));
      return;
    }
    let [x0, x1] = [Math.min(...all.map((p) => p.x)), Math.max(...all.map((p) => p.x))];
    let [y0, y1] = [Math.min(...all.map((p) => p.y)), Math.max(...all.map((p) => p.y))];
    if (this.clip && all.length >= 20) {
      const ys = all.map((p) => p.y).sort((a, b) => a - b);
      y1 = Math.min(y1, ys[Math.floor(0.98 * (ys.length - 1))] * 1.2);
    }
    if (x1 === x0) x1 = x0 + 1;
    if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
    const px = (x) => LEFT + ((x - x0) / (x1 - x0)) * (W - LEFT - RIGHT);
    const py = (y) => H - BOTTOM - ((Math.min(y, y1) - y0) / (y1 - y0)) * (H - TOP - BOTTOM);
    for (const t of ticks(y0, y1, 4)) {
      this.svg.append(svg("line", { x1: LEFT, x2: W - RIGHT, y1: py(t), y2: py(t), class: "grid" }));
      this.svg.append(svg("text", { x: LEFT - 6, y: py(t) + 4, class: "tick tick-y" }, label(t, y1 - y0)));
    }
    for (const t of ticks(x0, x1, 5)) {
      this.svg.append(svg("text", { x: px(t), y: H - 8, class: "tick tick-x" },
                          String(Math.round(t))));
    }
    this.svg.append(svg("line", { x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM, class: "axis" }));
    this.svg.append(svg("line", { x1: LEFT, x2: W - RIGHT, y1: H - BOTTOM, y2: H - BOTTOM,
                                  class: "axis" }));
    this.series.forEach((s, i) => {
      const points = (data[i] || []).filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y));
      if (s.dots) {
        for (const p of points) {
          const dot = svg("circle", { cx: px(p.x), cy: py(p.y), r: 4, class: `dot ${s.color}` });
          dot.append(svg("title", {}, `${s.name} at step ${p.x}: ${label(p.y, 1)}`));
          this.svg.append(dot);
        }
      } else if (points.length > 0) {
        const d = thin(points, MAX_DRAWN).map((p, k) => `${k ? "L" : "M"}${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`);
        this.svg.append(svg("path", { d: d.join(""), class: `line ${s.color}` }));
      }
    });
  }
}
