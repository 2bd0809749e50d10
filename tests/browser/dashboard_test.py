#!/usr/bin/env python3
"""The launcher's dashboard in headless Chromium, driven by Selenium
(Debian's chromium, chromium-driver and python3-selenium).

Starts `geodesic launch` on a two-region job with emulated links, opens the
dashboard the launcher reports in RUN_DIR/http/dashboard and checks: the
page loads with no console error, it lists every worker, shard, link and
regional aggregator of the job (region a has one), a worker's clock, a
link's bytes and an aggregator's forwarded clocks change between two reads
while training, and the staleness histogram has bars. --job runs another job
(e.g. examples/three_regions.yaml) and --screenshot saves a PNG of the page.
Exits 77 (ctest: skipped) when the browser or Selenium is missing. Bounded:
every wait has a deadline; the launch is stopped and the temporary
directory removed however the test ends.

Usage: dashboard_test.py GEODESIC_BINARY [--job JOB] [--screenshot PNG]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

JOB = """
name: dash
seed: 3
regions:
  a: {host: 127.0.0.1, servers: 1, workers: 2, aggregator: true}
  b: {host: 127.0.0.1, servers: 1, workers: 1}
model: {name: mlp, mlp_hidden: [64]}
data: {batch_size: 32}
training: {epochs: 50, staleness_bound: 0}
wan:
  emulation: proxy
  links:
    - {regions: [a, b], rtt_ms: 20, bandwidth_mbit: 200}
membership: {heartbeat_ms: 100, lease_ms: 2000}
"""

SKIP = 77


def wait_for(what, check, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout_s, what))


def browser(tmp):
    """Headless Chromium; its temporary files (the profile's singleton socket
    directory, which it leaves behind when it exits) go under `tmp`."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        print("SKIP: no selenium (apt-get install python3-selenium)")
        sys.exit(SKIP)
    for path in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
        if not os.access(path, os.X_OK):
            print("SKIP: no %s (apt-get install chromium chromium-driver)" % path)
            sys.exit(SKIP)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1500"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    env = dict(os.environ, TMPDIR=tmp)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver", env=env), options=options)


def cells(driver, row_id):
    """A table row's cell texts, read in one go (the page rebuilds its rows every second)."""
    return driver.execute_script(
        "const r = document.getElementById(arguments[0]);"
        "return r ? Array.from(r.cells).map(c => c.textContent) : null;", row_id)


def check_page(driver, url, job):
    from selenium.webdriver.common.by import By
    driver.get(url)
    wait_for("the dashboard to show training", lambda: "training" in driver.find_element(By.ID, "status").text, 90)
    state = json.loads(driver.execute_script(
        "return fetch('/api/state').then(r => r.text())"))
    workers = [w["id"] for w in state["workers"]]
    assert workers, "no worker in the state"
    for w in workers:
        wait_for("worker %d's row" % w, lambda: cells(driver, "worker-%d" % w), 20)
    for s in state["shards"]:
        wait_for("shard %d's row" % s["id"], lambda: cells(driver, "shard-%d" % s["id"]), 20)
    for link in state["links"]:
        assert cells(driver, "link-%s-%s" % (link["from"], link["to"])), "no row for link %s" % link
    clock = lambda: int(cells(driver, "worker-%d" % workers[0])[3])
    link_id = "link-%s-%s" % (state["links"][0]["from"], state["links"][0]["to"])
    bytes_now = lambda: float(cells(driver, link_id)[7])
    first_clock, first_bytes = clock(), bytes_now()
    for a in state.get("aggregators", []):
        row = "aggregator-%d" % a["id"]
        wait_for("%s's row" % row, lambda: cells(driver, row), 20)
        forwarded = lambda: int(cells(driver, row)[3] or 0)
        first_forwarded = forwarded()
        wait_for("%s's forwarded clocks to grow" % row, lambda: forwarded() > first_forwarded, 30)
    wait_for("worker clock to move", lambda: clock() > first_clock, 30)
    wait_for("link bytes to grow", lambda: bytes_now() > first_bytes, 30)
    count = lambda selector: driver.execute_script("return document.querySelectorAll(arguments[0]).length", selector)
    wait_for("staleness bars", lambda: count("rect.stale-bar") > 0, 20)
    wait_for("the accuracy curve", lambda: count("#curve polyline") > 0, 20)
    return workers, state


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--job")
    parser.add_argument("--screenshot")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="gd-dash-")
    try:
        driver = browser(tmp)
    except BaseException:  # a skip (SystemExit) included
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    launch = None
    try:
        job = args.job or os.path.join(tmp, "job.yaml")
        if not args.job:
            with open(job, "w") as f:
                f.write(JOB)
        run = os.path.join(tmp, "run")
        log = open(os.path.join(tmp, "launch.log"), "w")
        launch = subprocess.Popen([args.binary, "launch", job, "--run-dir", run, "--quiet"], stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        address_file = os.path.join(run, "http", "dashboard")
        wait_for("the dashboard's address", lambda: os.path.exists(address_file) and open(address_file).read(), 60)
        url = "http://%s/" % open(address_file).read().strip()
        workers, state = check_page(driver, url, job)
        if not args.job:
            assert len(state.get("aggregators", [])) == 1, "region a's aggregator is not in the state"
        if args.screenshot:
            time.sleep(5)  # a few more points on the curves
            driver.save_screenshot(args.screenshot)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, "console errors: %s" % errors
        print("dashboard OK: %d workers, %d shards, %d aggregators, %d links; %s" %
              (len(workers), len(state["shards"]), len(state.get("aggregators", [])), len(state["links"]), url))
    except Exception as e:  # an assertion, or the browser's own error
        print("FAIL: %s" % e)
        if launch:
            print(open(os.path.join(tmp, "launch.log")).read()[-3000:])
        return 1
    finally:
        driver.quit()
        if launch and launch.poll() is None:
            os.killpg(launch.pid, signal.SIGINT)
            try:
                launch.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(launch.pid, signal.SIGKILL)
                launch.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
