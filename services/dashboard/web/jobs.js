// The jobs page: the caller's jobs (an admin's: everyone's), filtered by state, owner and
// name, with progress, loss, test accuracy, samples/s, ETA and age; refreshed every 2
// seconds. At a narrow width (800 px) the less needed columns go (class "wide"), so that
// the table fits without scrolling sideways.
import { api } from "./api.js";
import { ago, clear, duration, el, etaSeconds, fixed, num, progress, stateBadge, time }
  from "./format.js";
import { poll } from "./poll.js";

const STATES = ["", "QUEUED", "RUNNING", "RECOVERING", "SUSPENDED", "SUCCEEDED", "FAILED",
                "CANCELLED"];

function row(job) {
  const eta = etaSeconds(job);
  const link = el("a", { href: `#/jobs/${encodeURIComponent(job.id)}`, class: "job-link" }, job.id);
  return el("tr", { dataset: { jobId: job.id } },
    el("td", { class: "id" }, link),
    el("td", { class: "name" }, job.spec.name || ""),
    el("td", { class: "owner" }, job.owner),
    el("td", {}, stateBadge(job.state)),
    el("td", {}, progress(job)),
    el("td", { class: "num wide" }, num(job.step) > 0 ? fixed(job.last_loss) : "–"),
    el("td", { class: "num test-accuracy" },
       job.last_eval ? fixed(job.last_eval.test_accuracy) : "–"),
    el("td", { class: "num wide" },
       num(job.samples_per_sec) > 0 ? fixed(job.samples_per_sec, 0) : "–"),
    el("td", { class: "num wide" }, eta === null ? "–" : duration(eta)),
    el("td", { class: "created", title: time(job.created_unix_ms) }, ago(job.created_unix_ms)));
}

const COLUMNS = [["Job", "id"], ["Name", "name"], ["Owner", "owner"], ["State", ""],
                 ["Progress", ""], ["Loss", "wide"], ["Test acc", "test-accuracy"],
                 ["Samples/s", "wide"], ["ETA", "wide"], ["Created", "created"]];

export function mountJobs(main, caller) {
  const state = el("select", { id: "filter-state" },
    STATES.map((s) => el("option", { value: s }, s || "any state")));
  const owner = el("input", { id: "filter-owner", placeholder: "owner", size: 12,
                              disabled: !caller.admin,
                              title: caller.admin ? "" : "users see their own jobs only" });
  if (!caller.admin) owner.value = caller.name;
  const name = el("input", { id: "filter-name", placeholder: "name or id", size: 16 });
  const body = el("tbody", { id: "jobs-body" });
  const status = el("p", { id: "jobs-status", class: "muted" });
  clear(main,
    el("section", { class: "card" },
      el("h1", {}, "Jobs"),
      el("div", { class: "filters" }, "State ", state, " Owner ", owner, " Name ", name),
      el("table", { id: "jobs-table" },
        el("thead", {}, el("tr", {}, COLUMNS.map(([h, c]) => el("th", { class: c || undefined }, h)))),
        body),
      status));

  const refresh = async (signal) => {
    const q = new URLSearchParams();
    if (state.value) q.set("state", state.value);
    if (caller.admin && owner.value.trim()) q.set("owner", owner.value.trim());
    if (name.value.trim()) q.set("name", name.value.trim());
    try {
      const list = await api(`jobs?${q}`, { signal });
      const jobs = list.jobs || [];
      clear(body, jobs.map(row));
      status.textContent = jobs.length === 0 ? "No jobs match." : `${jobs.length} job(s)`;
      status.classList.remove("error");
    } catch (err) {
      if (err.name === "AbortError") throw err;
      status.textContent = `Cannot list jobs: ${err}`;
      status.classList.add("error");
    }
  };
  let stop = poll(2000, refresh);
  const restart = () => {
    stop();
    stop = poll(2000, refresh);
  };
  for (const input of [state, owner, name]) input.addEventListener("input", restart);
  return () => stop();
}
