// A job's page: its state and progress (once it ended: when it started and ended, how
// long it took, its final test accuracy and average samples/s), live loss and accuracy
// curves with the evaluation points (smoothed, by step or wall time, as TensorBoard's),
// the step time split, the events timeline, its workers with their own step times, the
// bitwise witness and a log tail that follows; a cancel button for its owner and admins.
// A unique prefix of an id opens that job, as the CLI takes one. Polls until the job has
// ended (one last refresh of each part after), then stays still.
import { api } from "./api.js";
import { LineChart } from "./chart.js";
import { clear, duration, el, etaSeconds, fixed, num, progress, runOf, stateBadge, TERMINAL,
         time } from "./format.js";
import { renderLogs, renderStepTimes, renderTimeline, renderWitness, renderWorkers,
         WORKER_COLUMNS } from "./job_panels.js";
import { poll } from "./poll.js";

const MAX_STEPS = 4000;

function card(title, ...children) {
  return el("section", { class: "card" }, el("h2", {}, title), ...children);
}

function table(id, headers, body) {
  return el("table", { id }, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
            body);
}

export function mountJob(main, id, caller) {
  const error = el("p", { id: "error", class: "error", hidden: true });
  const title = el("h1", { id: "job-title" }, `Job ${id}`);
  const summary = el("div", { id: "job-summary", class: "summary" });
  const cancel = el("button", { id: "cancel-button", type: "button", class: "danger",
                                hidden: true }, "Cancel job");
  const cancelNote = el("span", { id: "cancel-note", class: "muted" });
  const loss = new LineChart("loss-chart", "Loss", [
    { name: "train loss", color: "c1" }, { name: "test loss (evaluations)", color: "c2", dots: true }]);
  const accuracy = new LineChart("accuracy-chart", "Accuracy", [
    { name: "train accuracy", color: "c1" },
    { name: "test accuracy (evaluations)", color: "c2", dots: true }]);
  const times = new LineChart("time-chart", "Step time, ms (the slowest worker's)", [
    { name: "compute", color: "c1" }, { name: "all-reduce", color: "c2" },
    { name: "update", color: "c3" }, { name: "wall", color: "c4" }], { clip: true });
  const stepTimes = el("div", { id: "step-times", class: "stats" });
  // The curves' view, as TensorBoard's: smoothing of the train lines, x by step or time.
  const smoothing = el("input", { id: "smoothing", type: "range", min: 0, max: 0.99, step: 0.01,
                                  value: 0.6 });
  const smoothingValue = el("span", { id: "smoothing-value", class: "muted" }, "0.60");
  const axis = el("select", { id: "x-axis" }, el("option", { value: "step" }, "step"),
                  el("option", { value: "time" }, "wall time"));
  const controls = el("div", { class: "chart-controls" },
    el("label", { for: "smoothing" }, "Smoothing "), smoothing, smoothingValue,
    el("label", { for: "x-axis" }, "X axis "), axis);
  const timeline = el("ol", { id: "timeline", class: "timeline" });
  const workersBody = el("tbody", { id: "workers-body" });
  const witnessBody = el("tbody", { id: "witness-body" });
  const follow = el("input", { id: "follow", type: "checkbox", checked: true });
  const logs = el("pre", { id: "logs", class: "logs" });
  const content = el("div", { id: "job-content" },
    el("section", { class: "card" }, el("div", { class: "title-row" }, title, cancel, cancelNote),
       summary),
    controls,
    el("div", { class: "charts" }, loss.element, accuracy.element),
    card("Step times", stepTimes, el("div", { class: "charts" }, times.element)),
    card("Events", timeline),
    card("Workers",
         el("p", { class: "muted" }, "Each worker's own step times, milliseconds: its latest ",
            "step's, and the mean over the steps it ran at this rank."),
         el("div", { class: "scroll-x" }, table("job-workers", WORKER_COLUMNS, workersBody))),
    card("Bitwise witness",
         el("p", { class: "muted" }, "The params checksum at each snapshot and at the end: two ",
            "runs of one spec with equal checksums at equal steps computed the same bits."),
         el("div", { class: "scroll" },
            table("witness", ["When", "Params checksum", "Time"], witnessBody))),
    card("Log", el("label", {}, follow, " follow"), logs));
  clear(main, el("p", {}, el("a", { href: "#/jobs" }, "← all jobs")), error, content);

  // By step: a replayed step replaces its first run. Past MAX_STEPS points the steps are
  // thinned as the coordinator thins a finished job's history: every 2nd, 4th, ... and the last.
  const steps = new Map(), evals = new Map();
  let stride = 1;
  const thinSteps = () => {
    while (steps.size > MAX_STEPS) {
      stride *= 2;
      const last = Math.max(...steps.keys());
      for (const s of [...steps.keys()]) if (s % stride !== 0 && s !== last) steps.delete(s);
    }
  };
  let job = null, witness = null, lastStep = null, ended = false, failed = false;
  // The job's workers as last fetched (null before): their rows join the job's
  // worker_times and the last step's local losses, so they are drawn again whenever
  // either of those comes, not only with the workers.
  let workers = null;
  const drawWorkers = () => {
    if (workers !== null) renderWorkers(workersBody, workers, lastStep, job);
  };
  const finished = new Set();  // parts refreshed once after the job ended
  const stops = [];
  const stopAll = () => stops.forEach((s) => s());

  // A prefix of one job's id opens that job (the route changes); false if it names none.
  let resolving = null;
  const openByPrefix = () => {
    resolving = resolving || api(`jobs?name=${encodeURIComponent(id)}`).then((list) => {
      const ids = (list.jobs || []).map((j) => j.id).filter((j) => j.startsWith(id));
      if (ids.length === 1) {
        location.replace(`#/jobs/${encodeURIComponent(ids[0])}`);
        return true;
      }
      if (ids.length > 1) {
        failed = true;
        content.hidden = true;
        error.hidden = false;
        error.textContent = `${id} names ${ids.length} jobs (${ids.join(", ")}): give more of the id`;
        setTimeout(stopAll, 0);
        return true;
      }
      return false;
    }, () => false);
    return resolving;
  };

  const fail = async (err) => {
    if (err.name === "AbortError") throw err;
    if (err.status === 404 && !failed && await openByPrefix()) return;
    // The job is not this user's or is gone: that stays said, whatever the parts still in
    // flight then fail with.
    if (failed) return;
    if (err.status === 403 || err.status === 404 || err.status === 401) {
      failed = true;
      content.hidden = true;
      error.hidden = false;
      error.textContent = err.status === 403 ? `You may not see job ${id}: ${err}`
                                             : `No job ${id}: ${err}`;
      setTimeout(stopAll, 0);
      return;
    }
    error.hidden = false;
    error.textContent = `Refresh failed: ${err}`;
  };
  // A poll of one part, which stops asking once the job ended and it refreshed after.
  const part = (name, every, fetchAndRender) => stops.push(poll(every, async (signal) => {
    if (failed || finished.has(name)) return;
    const wasEnded = ended;
    try {
      await fetchAndRender(signal);
      if (name === "job") error.hidden = true;
    } catch (err) {
      await fail(err);
    }
    if (wasEnded) finished.add(name);
  }));

  const renderSummary = () => {
    const eta = etaSeconds(job);
    const run = runOf(job);
    clear(title, `Job ${job.id}`, job.spec.name ? ` — ${job.spec.name}` : "", " ",
          stateBadge(job.state, "job-state"));
    const stat = (label, value, sid, tip) => el("span", { class: "stat", id: sid, title: tip },
                                                el("span", { class: "muted" }, `${label} `), value);
    const accuracy = job.last_eval ? fixed(job.last_eval.test_accuracy) : "–";
    clear(summary, progress(job),
      stat("owner", job.owner), stat("step", `${num(job.step)}/${num(job.total_steps)}`, "job-step"),
      stat("loss", num(job.step) > 0 ? fixed(job.last_loss) : "–"),
      stat(run ? "final test accuracy" : "test accuracy", accuracy, "job-accuracy"),
      run ? [stat("started", time(job.started_unix_ms), "job-started"),
             stat("ended", time(job.finished_unix_ms), "job-ended"),
             stat("duration", duration(run.seconds), "job-duration"),
             stat("avg samples/s", fixed(run.samplesPerSec, 0), "job-avg-rate",
                  "every step's batch over the time from start to end")]
          : [stat("samples/s", num(job.samples_per_sec) > 0 ? fixed(job.samples_per_sec, 0) : "–"),
             stat("ETA", eta === null ? "–" : duration(eta)),
             stat("created", time(job.created_unix_ms))],
      stat("workers", (job.workers || []).length || (run ? "–" : 0), "job-workers",
           "the workers it runs on now"),
      stat("recoveries", num(job.recoveries)),
      job.waiting_for ? stat("waiting for", job.waiting_for) : "",
      job.failure_reason ? stat("failure", `${job.failure_code}: ${job.failure_reason}`) : "");
    const mayCancel = caller.admin || job.owner === caller.name;
    cancel.hidden = !mayCancel || TERMINAL.has(job.state);
  };
  const renderCharts = () => {
    const s = [...steps.values()].sort((a, b) => num(a.step) - num(b.step));
    const e = [...evals.values()].sort((a, b) => num(a.step) - num(b.step));
    const at = (key) => (p) => ({ x: num(p.step), t: num(p.unix_ms), y: num(p[key]) });
    const view = { x: axis.value, smoothing: Number(smoothing.value) };
    smoothingValue.textContent = Number(smoothing.value).toFixed(2);
    loss.update([s.map(at("loss")), e.map(at("test_loss"))], view);
    accuracy.update([s.map(at("accuracy")), e.map(at("test_accuracy"))], view);
    // A finished job's history keeps its losses, not its step times (docs/dashboard.md):
    // its chart goes, the means over its run stay above it.
    const timed = s.filter((p) => num(p.wall_ms) > 0);
    times.update(["compute_ms", "allreduce_ms", "update_ms", "wall_ms"].map((k) => timed.map(at(k))),
                 { x: axis.value, empty: "no step yet" });
    times.element.hidden = ended && timed.length === 0;
    lastStep = s.length ? s[s.length - 1] : null;
    renderStepTimes(stepTimes, timed.length ? timed[timed.length - 1] : null, job);
    drawWorkers();
  };
  smoothing.addEventListener("input", renderCharts);
  axis.addEventListener("change", renderCharts);

  part("job", 1000, async (signal) => {
    job = await api(`jobs/${encodeURIComponent(id)}`, { signal });
    ended = TERMINAL.has(job.state);
    renderSummary();
    drawWorkers();
  });
  part("history", 1000, async (signal) => {
    const from = Math.max(0, ...steps.keys()) + 1;
    const h = await api(`jobs/${encodeURIComponent(id)}/history?from_step=${from}`, { signal });
    for (const e of h.events || []) {
      if (e.step) steps.set(num(e.step.step), { ...e.step, unix_ms: e.unix_ms });
      if (e.eval) evals.set(num(e.eval.step), { ...e.eval, unix_ms: e.unix_ms });
    }
    thinSteps();
    renderCharts();
  });
  part("events", 2000, async (signal) => {
    const [ev, w] = await Promise.all([
      api(`jobs/${encodeURIComponent(id)}/events`, { signal }),
      api(`jobs/${encodeURIComponent(id)}/witness`, { signal })]);
    witness = w;
    renderTimeline(timeline, ev.events || [], witness);
    renderWitness(witnessBody, witness);
  });
  part("workers", 3000, async (signal) => {
    const w = await api(`jobs/${encodeURIComponent(id)}/workers`, { signal });
    workers = w.workers || [];
    drawWorkers();
  });
  part("logs", 2000, async (signal) => {
    const l = await api(`jobs/${encodeURIComponent(id)}/logs?tail=200`, { signal });
    renderLogs(logs, l.lines || [], follow.checked);
  });

  cancel.addEventListener("click", async () => {
    cancel.disabled = true;
    try {
      const after = await api(`jobs/${encodeURIComponent(id)}/cancel`, { method: "POST" });
      cancelNote.textContent = `cancel requested (${after.state})`;
    } catch (err) {
      cancelNote.textContent = `cannot cancel: ${err}`;
      cancel.disabled = false;
    }
  });
  return stopAll;
}
