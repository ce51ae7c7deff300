// The dashboard's entry point: the login (a token pasted, checked with /whoami, kept in
// sessionStorage) and the routes: #/jobs, #/jobs/ID, #/workers. Each view's mount returns
// a function that stops its polling when another view replaces it.
import { api, ApiError, setToken, token } from "./api.js";
import { clear, el } from "./format.js";
import { mountJob } from "./job.js";
import { mountJobs } from "./jobs.js";
import { mountWorkers } from "./workers.js";

const main = document.getElementById("main");
let stopView = () => {};
let caller = null;  // {name, admin} once logged in

function showLogin(message) {
  const input = el("input", { id: "token", type: "password", autocomplete: "off",
                              placeholder: "paste a token, e.g. from credentials/NAME.token",
                              size: 48 });
  const error = el("p", { id: "login-error", class: "error" }, message || "");
  const form = el("form", { id: "login", class: "card" },
    el("h1", {}, "Log in"),
    el("p", { class: "muted" },
       "A bearer token of the job API (the tokens file's; `lockstep cluster up` writes ",
       "them as credentials/NAME.token: paste the contents of admin.token, or a user's). It ",
       "stays in this tab only."),
    el("label", { for: "token" }, "Token "), input, " ",
    el("button", { id: "login-button", type: "submit" }, "Log in"), error,
    trustHelp());
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const value = input.value.trim();
    try {
      caller = await api("whoami", { auth: value });
      setToken(value);
      route();
    } catch (err) {
      error.textContent = `Cannot log in: ${err}`;
    }
  });
  clear(main, form);
  input.focus();
}

// Why the browser warned about this page's certificate, and how to trust it for good: it
// is signed by the cluster's own CA, which no browser knows until it is imported.
function trustHelp() {
  const code = (...text) => el("code", {}, ...text);
  return el("details", { id: "trust-ca", class: "muted" },
    el("summary", {}, "The browser warned about this page's certificate?"),
    el("p", {}, "The dashboard's certificate is signed by your cluster's own certificate ",
       "authority, ", code("credentials/ca.pem"), " in the cluster's folder (",
       code(".lockstep-cluster"), " for ", code("lockstep cluster up"), "), not by a public ",
       "one: the warning says your browser does not know that CA yet. Import it once as an ",
       "authority, and the warning goes:"),
    el("ul", {},
      el("li", {}, "Chrome, Chromium, Edge: Settings → Privacy and security → Security → ",
         "Manage certificates → Authorities → Import ", code("ca.pem"),
         " (trust it for websites)."),
      el("li", {}, "Firefox: Settings → Privacy & Security → Certificates → View ",
         "Certificates → Authorities → Import ", code("ca.pem"), "."),
      el("li", {}, "macOS: ", code("sudo security add-trusted-cert -d -r trustRoot -k ",
         "/Library/Keychains/System.keychain ca.pem"), "."),
      el("li", {}, "Debian, Ubuntu (curl, Python and Chromium's system store): ",
         code("sudo cp ca.pem /usr/local/share/ca-certificates/lockstep.crt && sudo ",
              "update-ca-certificates"), "."),
      el("li", {}, "curl alone: ", code("curl --cacert credentials/ca.pem https://…"), ".")),
    el("p", {}, "Accepting the warning for this site once works too, but only a trusted CA ",
       "proves it is your coordinator answering."));
}

function showCaller() {
  const who = document.getElementById("who");
  const logout = document.getElementById("logout");
  who.textContent = caller ? `${caller.name}${caller.admin ? " (admin)" : ""}` : "";
  logout.hidden = !caller || caller.name === "anonymous";
}

async function route() {
  stopView();
  stopView = () => {};
  if (!caller) {
    try {
      caller = await api("whoami");  // a token from this tab, or none where none is needed
    } catch (err) {
      caller = null;
      showCaller();
      if (err instanceof ApiError && err.status === 401) {
        setToken("");
        showLogin(token() ? "That token is not known: log in again." : "");
      } else {
        showLogin(`The coordinator does not answer: ${err}`);
      }
      return;
    }
  }
  showCaller();
  const hash = location.hash || "#/jobs";
  const job = hash.match(/^#\/jobs\/([^/]+)$/);
  for (const a of document.querySelectorAll("nav a")) a.classList.remove("active");
  if (job) {
    stopView = mountJob(main, decodeURIComponent(job[1]), caller);
  } else if (hash === "#/workers") {
    document.getElementById("nav-workers").classList.add("active");
    stopView = mountWorkers(main, caller);
  } else {
    document.getElementById("nav-jobs").classList.add("active");
    stopView = mountJobs(main, caller);
  }
}

document.getElementById("logout").addEventListener("click", () => {
  setToken("");
  caller = null;
  // One route() shows the login: by the hash's change, or here when it does not change.
  if (location.hash === "#/jobs") route();
  else location.hash = "#/jobs";
});
window.addEventListener("hashchange", route);
route();
