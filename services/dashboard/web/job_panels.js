// The job page's panels other than its charts: the events timeline (states with their
// reasons, recoveries, resizes, snapshots), the workers by rank with their step times, the
// bitwise witness and the log.
import { clear, el, fixed, hex64, num, stateBadge, TERMINAL, time } from "./format.js";

const SNAPSHOTS_SHOWN = 5;

// What a state event is on the timeline: a recovery (RECOVERING, with why), a suspension
// (SUSPENDED: preempted by a job of higher priority), an elastic resize (RUNNING again with
// "resized 3 -> 2 workers: ..."), or a plain state change.
function eventKind(s) {
  if (s.state === "RECOVERING") return "recovery";
  if (s.state === "SUSPENDED") return "suspension";
  if (s.state === "RUNNING" && (s.reason || "").startsWith("resized ")) return "resize";
  return "";
}

// State events and snapshot marks, in time order.
export function renderTimeline(list, events, witness) {
  const items = [];
  for (const e of events) {
    const s = e.state;
    const kind = eventKind(s);
    items.push({
      at: num(e.unix_ms),
      node: el("li", { class: `event event-${s.state.toLowerCase()}${kind ? ` event-${kind}` : ""}` },
        el("time", {}, time(e.unix_ms)), " ", stateBadge(s.state), " ",
        kind ? el("strong", {}, `${kind}: `) : "",
        el("span", { class: "reason" }, s.reason || "")),
    });
  }
  // The newest few snapshots, one line for the earlier ones (the witness lists them all).
  const marks = (witness && witness.snapshots) || [];
  const shown = marks.slice(-SNAPSHOTS_SHOWN);
  if (marks.length > shown.length) {
    const first = marks[0], last = marks[marks.length - shown.length - 1];
    items.push({
      at: num(last.unix_ms),
      node: el("li", { class: "event event-snapshot" },
        el("time", {}, `${time(first.unix_ms)} – ${time(last.unix_ms)}`), " ",
        el("span", { class: "state" }, "SNAPSHOTS"),
        ` ${marks.length - shown.length} more, steps ${first.step} to ${last.step}`),
    });
  }
  for (const m of shown) {
    items.push({
      at: num(m.unix_ms),
      node: el("li", { class: "event event-snapshot" },
        el("time", {}, time(m.unix_ms)), " ", el("span", { class: "state" }, "SNAPSHOT"),
        ` step ${m.step}, params checksum `, el("code", {}, hex64(m.param_checksum))),
    });
  }
  items.sort((a, b) => a.at - b.at);
  clear(list, items.length ? items.map((i) => i.node) : el("li", { class: "muted" }, "no events"));
}

export const WORKER_COLUMNS = ["Rank", "Id", "Name", "Host", "Device", "Threads", "Local loss",
  "Step ms", "Compute ms", "All-reduce ms", "Update ms", "Last heartbeat"];

// One time of a worker: its latest step's, and below it the mean over its steps at its rank.
function timeCell(key, times) {
  if (!times) return el("td", { class: `num time ${key}` }, "–");
  const last = num(times.last && times.last[key]), mean = num(times.mean && times.mean[key]);
  return el("td", { class: `num time ${key}`, dataset: { last: String(last), mean: String(mean) } },
    fixed(last, 2), el("br"), el("span", { class: "muted small" }, `mean ${fixed(mean, 2)}`));
}

// The job's workers by rank (Job.workers' order): host, the last step's local loss of each
// rank and each worker's own step times (Job.worker_times: the latest and the mean).
export function renderWorkers(body, workers, lastStep, job) {
  const losses = (lastStep && lastStep.local_losses) || [];
  const times = (job && job.worker_times) || [];
  clear(body, workers.map((w, rank) => {
    const t = rank < times.length && times[rank].worker === w.id ? times[rank] : null;
    return el("tr", { dataset: { rank: String(rank) } },
      el("td", { class: "num" }, rank),
      el("td", { class: "id" }, w.id),
      el("td", { class: "name" }, w.name || "–"),
      el("td", { class: "host" }, w.address || "gone"),
      el("td", {}, w.device || "–"),
      el("td", { class: "num" }, w.threads || "–"),
      el("td", { class: "num local-loss" }, rank < losses.length ? fixed(losses[rank]) : "–"),
      ["step_ms", "compute_ms", "allreduce_ms", "update_ms"].map((k) => timeCell(k, t)),
      el("td", { class: "time" }, w.last_heartbeat_unix_ms ? time(w.last_heartbeat_unix_ms) : "–"));
  }));
  if (workers.length === 0) {
    clear(body, el("tr", {}, el("td", { colspan: WORKER_COLUMNS.length, class: "muted" },
                                "no workers now")));
  }
}

// The last step's time split (the slowest worker's figures, milliseconds); for a job that
// ended, whose history keeps no step times, the slowest worker's means over its run
// (Job.worker_times).
export function renderStepTimes(list, lastStep, job) {
  const stat = ([name, ms]) => el("span", { class: "stat" },
    el("span", { class: "muted" }, `${name} `), `${fixed(ms, 2)} ms`);
  if (lastStep) {
    return clear(list, el("span", { class: "muted" }, "last step:"),
      [["compute", lastStep.compute_ms], ["all-reduce", lastStep.allreduce_ms],
       ["update", lastStep.update_ms], ["worker step", lastStep.worker_step_ms],
       ["wall", lastStep.wall_ms]].map(stat));
  }
  const means = ((job && job.worker_times) || []).map((w) => w.mean || {});
  if (job && TERMINAL.has(job.state) && means.length) {
    const slowest = (key) => Math.max(...means.map((m) => num(m[key])));
    return clear(list, el("span", { class: "muted", id: "step-times-means" },
                          "mean over its run (the slowest worker's; per-step times are kept "
                          + "while a job runs):"),
      [["compute", slowest("compute_ms")], ["all-reduce", slowest("allreduce_ms")],
       ["update", slowest("update_ms")], ["worker step", slowest("step_ms")]].map(stat));
  }
  return clear(list, el("span", { class: "muted" }, "no step yet"));
}

// The params checksum at the end and at each snapshot, newest first: equal at equal
// steps, same bits.
export function renderWitness(body, witness) {
  // Hex as the CLI's text prints it; the decimal of the JSON (param_checksum) below it.
  const checksum = (decimal) => el("td", { class: "checksum" },
    el("code", {}, hex64(decimal)), el("br"),
    el("span", { class: "muted small", title: "param_checksum in the job API's JSON" }, decimal));
  const rows = ((witness && witness.snapshots) || []).map((m) => el("tr", {},
    el("td", {}, `snapshot, step ${m.step}`), checksum(m.param_checksum),
    el("td", {}, time(m.unix_ms)))).reverse();
  if (witness && witness.final_checksum && witness.final_checksum !== "0") {
    rows.unshift(el("tr", { class: "final", id: "witness-final" },
      el("td", {}, `final, step ${witness.final_step}`), checksum(witness.final_checksum),
      el("td", {}, "")));
  }
  clear(body, rows.length ? rows : el("tr", {}, el("td", { colspan: 3, class: "muted" },
                                                   "no snapshot yet")));
}

// The log tail; scrolled to its end when `follow` is on.
export function renderLogs(pre, lines, follow) {
  pre.textContent = lines.map((l) =>
    `${new Date(num(l.unix_ms)).toISOString()} ${l.level || "info"} [${l.source || "?"}` +
    `${l.rank !== undefined ? ` rank ${l.rank}` : ""}] ${l.message}`).join("\n") || "(no lines)";
  if (follow) pre.scrollTop = pre.scrollHeight;
}
