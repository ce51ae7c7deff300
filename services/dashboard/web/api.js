// The dashboard's JSON API (docs/dashboard.md), called with the bearer token kept in
// sessionStorage: gone when the tab closes, never sent anywhere but this origin.
const TOKEN_KEY = "lockstep.token";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// An answer other than 200: the HTTP status, and the status code's name and message the
// API gives (v1.ApiError).
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  toString() {
    return `${this.message} (${this.status} ${this.code})`;
  }
}

// GETs (or POSTs) /api/v1/<path> and returns its JSON; throws ApiError. `signal` aborts it.
export async function api(path, { method = "GET", signal, auth = token() } = {}) {
  const headers = { Accept: "application/json" };
  if (auth) headers.Authorization = `Bearer ${auth}`;
  let response;
  try {
    response = await fetch(`/api/v1/${path}`, { method, headers, signal, cache: "no-store" });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, "UNAVAILABLE", `the coordinator does not answer: ${e.message}`);
  }
  let body = {};
  try {
    body = await response.json();
  } catch (e) {
    body = {};
  }
  if (!response.ok) {
    throw new ApiError(response.status, body.code || "UNKNOWN", body.message || response.statusText);
  }
  return body;
}
