// The workers page: every registered worker and what it runs (admins only, as in the job
// API; a user is told so). Refreshed every 3 seconds.
import { api } from "./api.js";
import { clear, el, time } from "./format.js";
import { poll } from "./poll.js";

function row(w) {
  const job = w.job_id ? el("a", { href: `#/jobs/${encodeURIComponent(w.job_id)}` }, w.job_id)
                       : el("span", { class: "muted" }, "free");
  return el("tr", { dataset: { workerId: w.id } },
    el("td", { class: "id" }, w.id), el("td", {}, w.name || "–"), el("td", {}, w.address),
    el("td", {}, w.device), el("td", { class: "num" }, w.threads || "–"),
    el("td", {}, w.quarantined ? el("span", { class: "error" }, `quarantined: ${w.quarantined}`)
                 : w.leaving ? el("span", { class: "muted" }, "leaving (SIGTERM) ", job)
                             : job),
    el("td", {}, time(w.last_heartbeat_unix_ms)));
}

export function mountWorkers(main, caller) {
  const body = el("tbody", { id: "workers-list" });
  const status = el("p", { id: "workers-status", class: "muted" });
  clear(main, el("section", { class: "card" }, el("h1", {}, "Workers"),
    el("table", { id: "workers-table" },
      el("thead", {}, el("tr", {}, ["Id", "Name", "Address", "Device", "Threads", "Job",
                                    "Last heartbeat"].map((h) => el("th", {}, h)))),
      body),
    status));
  let stop = () => {};
  stop = poll(3000, async (signal) => {
    try {
      const list = await api("workers", { signal });
      const workers = list.workers || [];
      clear(body, workers.map(row));
      status.textContent = workers.length ? `${workers.length} worker(s)` : "No workers registered.";
      status.classList.remove("error");
    } catch (err) {
      if (err.name === "AbortError") throw err;
      status.textContent = err.status === 403
        ? `Listing workers is for admins (${caller.name} is a user): ${err}`
        : `Cannot list workers: ${err}`;
      status.classList.add("error");
      if (err.status === 403) setTimeout(() => stop(), 0);
    }
  });
  return () => stop();
}
