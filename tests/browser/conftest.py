"""Fixtures of the browser tests: a local cluster with users alice and bob, and headless
Chromium trusting the cluster's coordinator certificate (pinned by its public key: the
browser has no way to add a CA without a profile, and the pin is stricter).

Every wait is bounded: subprocesses have timeouts, the browser waits are WebDriverWait's.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("LOCKSTEP_BUILD_DIR", REPO / "build"))
LOCKSTEP = BUILD / "clients" / "lockstep"
WAIT = 60  # seconds, for what takes one or two


@dataclass
class Cluster:
    dir: Path
    url: str  # the dashboard's, https://127.0.0.1:PORT/

    @property
    def credentials(self) -> Path:
        return self.dir / "credentials"

    def token(self, user: str) -> str:
        return (self.credentials / f"{user}.token").read_text().strip()

    def lockstep(self, *args: str, user: str = "admin") -> str:
        """Runs the CLI against this cluster as `user`; its stdout."""
        r = subprocess.run(
            [str(LOCKSTEP), *args, "--dir", str(self.dir),
             "--token-file", str(self.credentials / f"{user}.token")],
            capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"lockstep {' '.join(args)}: {r.stdout}{r.stderr}"
        return r.stdout

    def submit(self, spec: str, user: str) -> str:
        """Queues a job as `user`; its id."""
        path = self.dir / f"spec-{user}-{abs(hash(spec))}.yaml"
        path.write_text(spec)
        # --queue: users may not list workers, which the fit check asks for.
        out = self.lockstep("submit", str(path), "--json", "--queue", user=user)
        return json.loads(out.strip().splitlines()[-1])["id"]

    def get(self, path: str, user: str, method: str = "GET") -> tuple[int, dict]:
        """An API call over HTTPS, the certificate checked against the cluster's CA."""
        context = ssl.create_default_context(cafile=str(self.credentials / "ca.pem"))
        request = urllib.request.Request(
            self.url + path.lstrip("/"), method=method,
            headers={"Authorization": f"Bearer {self.token(user)}"})
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            request: pytest.FixtureRequest) -> Iterator[Cluster]:
    if not LOCKSTEP.is_file():
        pytest.fail(f"{LOCKSTEP} is missing: build first (scripts/build) or set LOCKSTEP_BUILD_DIR")
    d = tmp_path_factory.mktemp("cluster")
    try:
        certs = subprocess.run([str(LOCKSTEP), "certs", "--out", str(d / "credentials"),
                                "--users", "alice,bob"], capture_output=True, text=True,
                               timeout=60)
        assert certs.returncode == 0, f"lockstep certs: {certs.stdout}{certs.stderr}"
        up = subprocess.run([str(LOCKSTEP), "cluster", "up", "--workers", "2", "--threads", "1",
                             "--detach", "--dir", str(d)], capture_output=True, text=True,
                            timeout=120)
        assert up.returncode == 0, f"cluster up failed:\n{up.stdout}{up.stderr}"
        assert "cluster up: dashboard https://127.0.0.1:" in up.stdout, up.stdout
        url = json.loads((d / "cluster.json").read_text())["dashboard"]
        assert url.startswith("https://127.0.0.1:"), url
        yield Cluster(d, url)
    finally:
        if (d / "cluster.json").exists():
            subprocess.run([str(LOCKSTEP), "cluster", "down", "--dir", str(d)], timeout=60,
                           capture_output=True)
        if request.session.testsfailed:
            for log in sorted((d / "logs").glob("*.log")):
                tail = log.read_text(errors="replace").splitlines()[-40:]
                print(f"--- {log.name} (last lines)", *tail, sep="\n", file=sys.stderr)


def spki_pin(cert: Path) -> str:
    """base64(SHA-256(SubjectPublicKeyInfo)) of a PEM certificate, as Chromium pins keys."""
    pub = subprocess.run(["openssl", "x509", "-in", str(cert), "-pubkey", "-noout"],
                         capture_output=True, check=True, timeout=30).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub,
                         capture_output=True, check=True, timeout=30).stdout
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


@pytest.fixture
def browser(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1360,1500", "--no-first-run", "--disable-extensions",
                # Only the coordinator's own key is accepted for this origin's certificate.
                "--ignore-certificate-errors-spki-list="
                + spki_pin(cluster.credentials / "coordinator.pem")):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options,
                              service=Service(executable_path="/usr/bin/chromedriver"))
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        if getattr(request.node, "failed", False):
            for entry in driver.get_log("browser"):
                print("browser console:", entry, file=sys.stderr)
        driver.quit()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    if outcome.get_result().failed:
        item.failed = True


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where screenshots go: $LOCKSTEP_SCREENSHOT_DIR (docs/images to refresh the docs'),
    else the test's own temporary folder."""
    d = os.environ.get("LOCKSTEP_SCREENSHOT_DIR")
    out = Path(d) if d else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    return out
