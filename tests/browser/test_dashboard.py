"""The dashboard in headless Chromium against a local cluster (conftest.py): a user logs in
with a token, sees only their own jobs, watches a running job's curves grow (and its
workers' step times) and cancels it; a user cannot open another user's job, neither through
the API nor the page; a job's witness and its recovery survive a coordinator restart; an
elastic job's resize is on its timeline; a finished job's page, opened by a prefix of its
id, says when it ran, how long, its final test accuracy and average samples/s, and its
step times, at 1400 and 800 px; the charts have round ticks, smoothing and a wall-time
axis; the login says how to trust the cluster's CA.

No sleeps: every wait is a WebDriverWait on what the page shows, with a timeout.
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
from pathlib import Path

import pytest
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import WAIT, Cluster

# Long enough to be cancelled while it runs (about 10 steps a second here), one worker each
# so that alice's and bob's jobs run side by side on the cluster's two workers.
LONG = """\
name: {name}
model: {{kind: mlp, hidden: [32]}}
optimizer: {{kind: adam, learning_rate: 0.001}}
global_batch_size: 64
steps: 100000
workers: 1
eval: {{every_steps: 20}}
recovery: {{snapshot_every_steps: 25}}
"""


def log_in(driver: WebDriver, cluster: Cluster, user: str, then: str = "#/jobs") -> None:
    driver.get(cluster.url + then)
    field = WebDriverWait(driver, WAIT).until(EC.element_to_be_clickable((By.ID, "token")))
    field.send_keys(cluster.token(user))
    driver.find_element(By.ID, "login-button").click()
    WebDriverWait(driver, WAIT).until(EC.text_to_be_present_in_element((By.ID, "who"), user))


def points(driver: WebDriver, chart: str) -> int:
    """How many points the chart has."""
    return int(driver.find_element(By.ID, chart).get_attribute("data-points") or 0)


def last_step(driver: WebDriver, chart: str) -> int:
    """The newest step the chart shows."""
    return int(float(driver.find_element(By.ID, chart).get_attribute("data-last-x") or 0))


def fits_without_sideways_scroll(driver: WebDriver) -> bool:
    return driver.execute_script(
        "return document.documentElement.scrollWidth <= document.documentElement.clientWidth")


def one_line(driver: WebDriver, selector: str) -> bool:
    """Whether every element `selector` matches shows its text on one line."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].every((e) => {"
        "  const r = document.createRange(); r.selectNodeContents(e);"
        "  return new Set([...r.getClientRects()].map((c) => Math.round(c.top))).size <= 1; })",
        selector)


def is_round_step(ticks: list[float]) -> bool:
    """Evenly spaced by 1, 2 or 5 times a power of ten (at 0692893: 0.098, 0.730, 1.36...)."""
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    if len(steps) != 1:
        return False
    step = steps.pop()
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(abs(mantissa - m) < 1e-6 for m in (1, 2, 5)) and all(
        abs(t / step - round(t / step)) < 1e-6 for t in ticks)


def worker_time(driver: WebDriver, rank: int, column: str, which: str) -> float:
    """A time the workers table shows: rank's `column` (step_ms, compute_ms, ...), its
    "last" or "mean"; 0 while there is none."""
    cells = driver.find_elements(By.CSS_SELECTOR, f'#workers-body tr[data-rank="{rank}"] td.{column}')
    return float(cells[0].get_attribute(f"data-{which}") or 0) if cells else 0.0


@pytest.fixture(scope="module")
def jobs(cluster: Cluster) -> dict[str, str]:
    """A long job of alice's and one of bob's, both running."""
    ids = {"alice": cluster.submit(LONG.format(name="alice-mlp"), user="alice"),
           "bob": cluster.submit(LONG.format(name="bob-mlp"), user="bob")}
    return ids


def test_a_user_sees_their_jobs_watches_one_and_cancels_it(
        cluster: Cluster, jobs: dict[str, str], browser: WebDriver, screenshots: Path) -> None:
    log_in(browser, cluster, "alice")
    wait = WebDriverWait(browser, WAIT)
    # The list: alice's job, never bob's.
    row = (By.CSS_SELECTOR, f'tr[data-job-id="{jobs["alice"]}"]')
    wait.until(EC.presence_of_element_located(row))
    owners = {td.text for td in browser.find_elements(By.CSS_SELECTOR, "#jobs-body td.owner")}
    assert owners == {"alice"}
    assert not browser.find_elements(By.CSS_SELECTOR, f'tr[data-job-id="{jobs["bob"]}"]')
    wait.until(EC.text_to_be_present_in_element(row, "RUNNING"))
    browser.save_screenshot(str(screenshots / "dashboard-jobs.png"))

    # The job's page: its loss curve grows while it runs.
    browser.find_element(By.CSS_SELECTOR, f'tr[data-job-id="{jobs["alice"]}"] a.job-link').click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "job-state"), "RUNNING"))
    wait.until(lambda d: points(d, "loss-chart") >= 30)
    seen = last_step(browser, "loss-chart")
    wait.until(lambda d: last_step(d, "loss-chart") > seen)
    wait.until(lambda d: points(d, "accuracy-chart") > points(d, "loss-chart") // 2)
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#witness-body code")))
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, '#workers-body tr[data-rank="0"]')))
    # Rank 0's own step times: the latest and the mean, as the job's worker_times say.
    wait.until(lambda d: worker_time(d, 0, "step_ms", "last") > 0)
    assert worker_time(browser, 0, "compute_ms", "mean") > 0
    assert browser.find_element(By.CSS_SELECTOR, '#workers-body tr[data-rank="0"] td.host').text
    wait.until(lambda d: d.find_element(
        By.CSS_SELECTOR, '#workers-body tr[data-rank="0"] td.local-loss').text not in ("", "–"))
    job = cluster.get(f"api/v1/jobs/{jobs['alice']}", "alice")[1]
    assert job["worker_times"][0]["worker"] == job["workers"][0]
    assert int(job["worker_times"][0]["steps"]) > 0
    wait.until(lambda d: "rank 0" in d.find_element(By.ID, "logs").text
               or "step" in d.find_element(By.ID, "logs").text)
    browser.set_window_size(1360, 2300)  # the whole page, witness and log included
    browser.save_screenshot(str(screenshots / "dashboard-job.png"))

    # Cancel: the button is hers, the job ends CANCELLED and the button goes.
    wait.until(EC.element_to_be_clickable((By.ID, "cancel-button"))).click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "job-state"), "CANCELLED"))
    wait.until(EC.invisibility_of_element_located((By.ID, "cancel-button")))
    status, job = cluster.get(f"api/v1/jobs/{jobs['alice']}", "alice")
    assert (status, job["state"]) == (200, "CANCELLED")
    assert any(e["state"]["state"] == "CANCELLED"
               for e in cluster.get(f"api/v1/jobs/{jobs['alice']}/events", "alice")[1]["events"])


def test_a_user_cannot_open_another_users_job(
        cluster: Cluster, jobs: dict[str, str], browser: WebDriver, screenshots: Path) -> None:
    bobs = jobs["bob"]
    # The API: forbidden to alice on every route, and the cancel is refused.
    for route in ("", "/history", "/events", "/logs", "/witness", "/workers"):
        status, body = cluster.get(f"api/v1/jobs/{bobs}{route}", "alice")
        assert (status, body.get("code")) == (403, "PERMISSION_DENIED"), route
    status, _ = cluster.get(f"api/v1/jobs/{bobs}/cancel", "alice", method="POST")
    assert status == 403
    status, _ = cluster.get(f"api/v1/jobs?owner=bob", "alice")
    assert status == 403
    assert cluster.get(f"api/v1/jobs/{bobs}", "bob")[1]["state"] in ("QUEUED", "RUNNING")
    # The page: it says so, and shows nothing of the job.
    log_in(browser, cluster, "alice", then=f"#/jobs/{bobs}")
    wait = WebDriverWait(browser, WAIT)
    wait.until(EC.visibility_of_element_located((By.ID, "error")))
    try:
        wait.until(EC.text_to_be_present_in_element((By.ID, "error"), "belongs to another user"))
    except TimeoutException:
        pytest.fail(f"the page says: {browser.find_element(By.ID, 'error').text!r}")
    assert "403" in browser.find_element(By.ID, "error").text
    assert not browser.find_element(By.ID, "job-content").is_displayed()
    assert not browser.find_element(By.ID, "cancel-button").is_displayed()
    browser.save_screenshot(str(screenshots / "dashboard-forbidden.png"))
    # An admin may: bob's job opens for them.
    status, job = cluster.get(f"api/v1/jobs/{bobs}", "admin")
    assert (status, job["owner"]) == (200, "bob")
    cluster.lockstep("cancel", bobs, user="bob")


def test_an_admin_sees_everyones_jobs_by_owner_and_the_workers(
        cluster: Cluster, jobs: dict[str, str], browser: WebDriver) -> None:
    log_in(browser, cluster, "admin")
    wait = WebDriverWait(browser, WAIT)
    for owner in ("alice", "bob"):
        wait.until(EC.presence_of_element_located(
            (By.CSS_SELECTOR, f'tr[data-job-id="{jobs[owner]}"]')))
    browser.find_element(By.ID, "filter-owner").send_keys("bob")
    wait.until(EC.invisibility_of_element_located(
        (By.CSS_SELECTOR, f'tr[data-job-id="{jobs["alice"]}"]')))
    assert browser.find_element(By.CSS_SELECTOR, f'tr[data-job-id="{jobs["bob"]}"]')
    browser.find_element(By.ID, "nav-workers").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#workers-list tr")) == 2)
    # Log out: the login again; a user is told the workers list is for admins.
    browser.find_element(By.ID, "logout").click()
    wait.until(EC.presence_of_element_located((By.ID, "token")))
    assert browser.find_element(By.ID, "who").text == ""
    log_in(browser, cluster, "alice")  # the same URL: the page stays as it is
    browser.find_element(By.ID, "nav-workers").click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "workers-status"), "for admins"))


def test_the_witness_survives_a_coordinator_restart_and_the_recovery_is_on_the_timeline(
        cluster: Cluster, browser: WebDriver) -> None:
    job_id = cluster.submit(LONG.format(name="restarted"), user="alice")
    # Polls of the API, through the restart too (refused while no coordinator listens).
    wait = WebDriverWait(browser, 4 * WAIT, ignored_exceptions=(OSError,))

    def get(route: str) -> dict:
        status, body = cluster.get(f"api/v1/jobs/{job_id}{route}", "alice")
        return body if status == 200 else {}

    def marks() -> dict[str, str]:
        return {m["step"]: m["param_checksum"] for m in get("/witness").get("snapshots", [])}

    wait.until(lambda _: len(marks()) >= 3)
    before = marks()
    newest = max(before, key=int)
    record = json.loads((cluster.dir / "cluster.json").read_text())
    os.kill(record["pids"][0], signal.SIGKILL)  # the coordinator; its supervisor restarts it
    # Restarted, the job runs again and takes a snapshot past the newest before the kill.
    wait.until(lambda _: int(get("").get("recoveries", 0)) >= 1
               and max(map(int, marks() or {"0": ""})) > int(newest))
    after = marks()
    # Every mark from before the restart is still there (the newest may be lost with a kill
    # between its snapshot and its record), and equal steps have equal checksums.
    assert {s: c for s, c in before.items() if s != newest}.items() <= after.items(), \
        (before, after)
    assert all(after[s] == c for s, c in before.items() if s in after), (before, after)

    log_in(browser, cluster, "alice", then=f"#/jobs/{job_id}")
    page = WebDriverWait(browser, WAIT)
    page.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#timeline .event-recovery")))
    assert "recovery: the coordinator restarted" in browser.find_element(
        By.CSS_SELECTOR, "#timeline .event-recovery").text
    shown = {td.get_attribute("textContent")
             for td in browser.find_elements(By.CSS_SELECTOR, "#witness-body td:first-child")}
    assert {f"snapshot, step {s}" for s in before if s != newest} <= shown, shown
    cluster.lockstep("cancel", job_id, user="alice")


def test_an_elastic_resize_is_on_the_timeline(cluster: Cluster, browser: WebDriver,
                                             screenshots: Path) -> None:
    spec = LONG.replace("workers: 1", "replicas: 2\nworkers: {{min: 1, max: 2}}")
    job_id = cluster.submit(spec.format(name="elastic"), user="alice")
    wait = WebDriverWait(browser, 4 * WAIT, ignored_exceptions=(OSError,))

    def job() -> dict:
        status, body = cluster.get(f"api/v1/jobs/{job_id}", "alice")
        return body if status == 200 else {}

    def reasons() -> list[str]:
        status, body = cluster.get(f"api/v1/jobs/{job_id}/events", "alice")
        return [e["state"]["reason"] for e in body.get("events", [])] if status == 200 else []

    # Stepping on both (a worker lost while preparing is a recovery, not a resize).
    wait.until(lambda _: len(job().get("workers", [])) == 2 and int(job().get("step", 0)) > 0)
    record = json.loads((cluster.dir / "cluster.json").read_text())
    os.kill(record["pids"][1], signal.SIGKILL)  # one of its two workers
    wait.until(lambda _: any(r.startswith("resized 2 -> 1 workers") for r in reasons()))
    assert job()["state"] in ("RUNNING", "SUCCEEDED"), job()  # it goes on, not RECOVERING

    log_in(browser, cluster, "alice", then=f"#/jobs/{job_id}")
    page = WebDriverWait(browser, WAIT)
    page.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, "#timeline .event-resize"),
                                                "resize: resized 2 -> 1 workers"))
    # The workers it runs on now, on the page and in `status` (at 0692893 `status` said the
    # spec's 2 after a resize). The supervisor restarts the killed worker, and the job may
    # grow back onto it meanwhile: each read agrees with the job's record of that moment.
    def runs_on() -> str:
        return str(len(job().get("workers", [])))
    page.until(lambda d: d.find_element(By.ID, "job-workers").text == f"workers {runs_on()}")
    wait.until(lambda _: re.search(r"  (\d+) workers?", cluster.lockstep(
        "status", job_id, user="alice")).group(1) == runs_on())
    page.until(lambda d: d.find_elements(By.CSS_SELECTOR, '#workers-body tr[data-rank="0"] td.id'))
    for width in (1400, 800):
        browser.set_window_size(width, 2300)
        page.until(lambda d: fits_without_sideways_scroll(d))
        assert one_line(browser, "#workers-body td.id"), "worker ids wrap"  # as at 0692893
        browser.save_screenshot(str(screenshots / f"dashboard-elastic-{width}.png"))
    cluster.lockstep("cancel", job_id, user="alice")


SHORT = """\
name: {name}
model: {{kind: mlp, hidden: [32]}}
optimizer: {{kind: adam, learning_rate: 0.001}}
global_batch_size: 64
steps: 300
workers: 1
eval: {{every_steps: 100}}
recovery: {{snapshot_every_steps: 100}}
"""


def test_a_finished_job_opened_by_a_prefix_says_how_it_ran(
        cluster: Cluster, browser: WebDriver, screenshots: Path) -> None:
    job_id = cluster.submit(SHORT.format(name="finished"), user="alice")
    cluster.lockstep("wait", job_id, user="alice")
    status = cluster.lockstep("status", job_id, user="alice")
    checksum = re.search(r"params checksum ([0-9a-f]{16})", status).group(1)
    job = cluster.get(f"api/v1/jobs/{job_id}", "alice")[1]
    prefix = job_id[:len("job-000000")]
    assert prefix != job_id

    # At 0692893 #/jobs/PREFIX was "No job (404)": now it opens the job, as the CLI's prefixes.
    log_in(browser, cluster, "alice", then=f"#/jobs/{prefix}")
    wait = WebDriverWait(browser, WAIT)
    wait.until(lambda d: d.execute_script("return location.hash") == f"#/jobs/{job_id}")
    wait.until(EC.text_to_be_present_in_element((By.ID, "job-state"), "SUCCEEDED"))
    wait.until(EC.presence_of_element_located((By.ID, "job-ended")))
    # When it ran, how long, its final test accuracy and average samples/s (at 0692893 none,
    # and samples/s was the last rate).
    text = lambda sid: browser.find_element(By.ID, sid).text  # noqa: E731
    assert "–" not in text("job-started") and "–" not in text("job-ended")
    seconds = (int(job["finished_unix_ms"]) - int(job["started_unix_ms"])) / 1000
    assert re.search(r"\d+s", text("job-duration")), text("job-duration")
    assert text("job-accuracy").endswith(f"{job['last_eval']['test_accuracy']:.4f}")
    average = float(text("job-avg-rate").split()[-1])
    assert average == pytest.approx(300 * 64 / seconds, rel=0.01, abs=1)
    # Its step times: the means over its run (at 0692893 "compute 0.00 ms" and "no data yet").
    wait.until(EC.presence_of_element_located((By.ID, "step-times-means")))
    compute = re.search(r"compute ([0-9.]+) ms", text("step-times")).group(1)
    assert float(compute) > 0, text("step-times")
    assert "kept while a job runs" in text("step-times")
    assert not browser.find_element(By.ID, "time-chart").is_displayed()
    # The checksum as the CLI prints it (at 0692893 hex here, decimal there).
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#witness-final code")))
    assert browser.find_element(By.CSS_SELECTOR, "#witness-final code").text == checksum

    # The charts, as TensorBoard's: round ticks, smoothing, a wall-time axis.
    wait.until(lambda d: points(d, "loss-chart") >= 300)
    ticks = [float(t.text) for t in browser.find_elements(By.CSS_SELECTOR, "#loss-chart .tick-y")]
    assert len(ticks) >= 3 and is_round_step(ticks), ticks
    path = lambda: browser.find_element(  # noqa: E731
        By.CSS_SELECTOR, "#loss-chart path.line:not(.raw)").get_attribute("d")
    smoothed = path()
    browser.execute_script("const s = document.getElementById('smoothing'); s.value = 0;"
                           "s.dispatchEvent(new Event('input'));")
    assert path() != smoothed
    assert not browser.find_elements(By.CSS_SELECTOR, "#loss-chart path.raw")
    Select(browser.find_element(By.ID, "x-axis")).select_by_value("time")
    wait.until(lambda d: d.find_element(By.ID, "loss-chart").get_attribute("data-axis") == "time")
    labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#loss-chart .tick-x")]
    assert all(re.fullmatch(r"\d+s|\d+:\d\d(:\d\d)?", x) for x in labels), labels
    Select(browser.find_element(By.ID, "x-axis")).select_by_value("step")
    browser.execute_script("const s = document.getElementById('smoothing'); s.value = 0.6;"
                           "s.dispatchEvent(new Event('input'));")

    for width in (1400, 800):
        browser.set_window_size(width, 2300)
        wait.until(lambda d: fits_without_sideways_scroll(d))
        browser.save_screenshot(str(screenshots / f"dashboard-finished-{width}.png"))

    # The jobs table at 800 px: no sideways scroll, the age column on screen, the test
    # accuracy column there (at 0692893 CREATED was off-screen and there was none).
    browser.set_window_size(800, 1000)
    browser.get(cluster.url + "#/jobs")
    row = (By.CSS_SELECTOR, f'tr[data-job-id="{job_id}"]')
    wait.until(EC.presence_of_element_located(row))
    assert fits_without_sideways_scroll(browser)
    created = browser.find_element(By.CSS_SELECTOR, "#jobs-table th.created")
    assert created.is_displayed()
    assert created.rect["x"] + created.rect["width"] <= browser.execute_script(
        "return document.documentElement.clientWidth")
    accuracy = browser.find_element(By.CSS_SELECTOR, f'tr[data-job-id="{job_id}"] td.test-accuracy')
    assert accuracy.text == f"{job['last_eval']['test_accuracy']:.4f}"
    browser.save_screenshot(str(screenshots / "dashboard-jobs-800.png"))


def test_the_login_says_how_to_trust_the_clusters_ca(cluster: Cluster, browser: WebDriver) -> None:
    browser.get(cluster.url)
    wait = WebDriverWait(browser, WAIT)
    wait.until(EC.presence_of_element_located((By.ID, "trust-ca")))
    browser.find_element(By.CSS_SELECTOR, "#trust-ca summary").click()
    help_text = browser.find_element(By.ID, "trust-ca").text
    for said in ("credentials/ca.pem", "Manage certificates", "Authorities", "update-ca-certificates"):
        assert said in help_text, help_text
