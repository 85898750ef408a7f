"""The web page in a real headless Chromium (Debian's chromium + chromium-driver, driven by Selenium): start a
simulated incident from the page, watch the taxonomy tree fill in, see the ticket, and keep a screenshot.

The screenshot goes to $AIDAI_ARTIFACTS (default tests/artifacts/, git-ignored); its path is printed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.server.config import ServerConfig
from tests.test_server import (  # noqa: F401 (fixtures)
    ECC,
    FOB_INCIDENT,
    NAN_INCIDENT,
    config_fixture,
    ecc_record_fixture,
    ecc_spec_fixture,
    fob_spec_fixture,
    nan_spec_fixture,
    serving,
)

FAULTY = "GPU.HARDWARE.FAULTY_GPU"

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
ARTIFACTS = Path(os.environ.get("AIDAI_ARTIFACTS") or Path(__file__).parent / "artifacts")

pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian chromium and chromium-driver "
                                                                  "(make chromium)")


@pytest.fixture
def browser():  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # type: ignore[assignment]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1800"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def test_page_runs_an_incident_and_shows_tree_and_ticket(config: ServerConfig, nan_spec: str,
                                                         browser) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    config.targets = [nan_spec]  # a GPU only a load test or its Xid shows faulty: the run asks for the DCGM diag
    with serving(config) as url:
        browser.get(url + "/")
        wait = WebDriverWait(browser, 120)
        wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#hosts input[type=checkbox]")))
        box = browser.find_element(By.CSS_SELECTOR, "#hosts input[type=checkbox]")
        assert box.get_attribute("value") == nan_spec and box.is_selected()
        browser.find_element(By.ID, "incident").send_keys(NAN_INCIDENT)
        Select(browser.find_element(By.ID, "approval")).select_by_value("ask")
        browser.find_element(By.ID, "start").click()

        # the tree fills in live: the ECC leaf history points at shows as running or judged before the run ends
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, f'#tree .node[data-label="{ECC}"]')))
        # the run asks before the DCGM diag, saying what the answer decides; decline it from the page
        wait.until(ec.visibility_of_element_located((By.ID, "approval-box")))
        assert "dcgm_diag" in browser.find_element(By.ID, "approval-checks").text
        assert "did not decide it" in browser.find_element(By.ID, "approval-node").text
        browser.find_element(By.ID, "decline").click()

        leaf = f'#tree .node[data-label="{FAULTY}"]'
        wait.until(ec.visibility_of_element_located((By.ID, "ticket-box")))
        wait.until(ec.text_to_be_present_in_element((By.ID, "ticket"), FAULTY))
        assert "(confirmed, confidence" in browser.find_element(By.ID, "ticket").text
        assert browser.find_element(By.CSS_SELECTOR, leaf).get_attribute("data-status") == "confirmed"
        assert browser.find_element(By.ID, "run-status").text.lower() == "done"
        rejected = browser.find_elements(By.CSS_SELECTOR, '#tree .node[data-status="rejected"]')
        assert rejected, "the rejected hypotheses are in the tree too"
        board = browser.find_element(By.ID, "board").text
        assert FAULTY in board and "confirmed" in board and "rejected" in board
        timeline = browser.find_element(By.ID, "timeline").text
        assert "declined: dcgm_diag (by local)" in timeline and "answered (approval)" not in timeline

        browser.find_element(By.CSS_SELECTOR, leaf).click()  # the evidence behind the verdict
        evidence = browser.find_element(By.ID, "evidence").text
        assert "xid_scan" in evidence and "FAIL" in evidence

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "web-page.png"
        assert browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        print(f"\nscreenshot: {shot}")


# ---- the page respects the operator -------------------------------------------------------------------------------
WAIT_S = 120  # generous: a run on a loaded machine may take a while; every wait below polls for a state


def _start(browser: Any, url: str, incident: str, approval: str = "ask", script: str = "") -> Any:
    """Open the page (run `script` in it), start a run from its form; returns a WebDriverWait."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.get(url + "/")
    wait = WebDriverWait(browser, WAIT_S)
    wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#hosts input[type=checkbox]")))
    if script:
        browser.execute_script(script)
    browser.find_element(By.ID, "incident").send_keys(incident)
    Select(browser.find_element(By.ID, "approval")).select_by_value(approval)
    browser.find_element(By.ID, "start").click()
    wait.until(lambda b: b.find_element(By.ID, "run-id").text.strip())
    return wait


def _run_id(browser: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(browser.find_element(By.ID, "run-id").text.strip())


def _timeline(browser: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#timeline li")]


def _decline_diag(browser: Any, url: str, incident: str, at_approval: Callable[[Any, str], None] | None = None,
                  script: str = "") -> tuple[Any, str]:
    """Start the NaN incident (on the host whose GPU 5 is faulty) from the page, decline the DCGM diag it asks for,
    wait for the ticket."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    wait = _start(browser, url, incident, script=script)
    wait.until(ec.visibility_of_element_located((By.ID, "approval-box")))
    run_id = _run_id(browser)
    if at_approval:
        at_approval(wait, run_id)
    browser.find_element(By.ID, "decline").click()
    wait.until(ec.visibility_of_element_located((By.ID, "ticket-box")))
    wait.until(ec.text_to_be_present_in_element((By.ID, "ticket"), FAULTY))
    return wait, run_id


def _decline_each(browser: Any, wait: Any, each: Callable[[list[Any]], None] | None = None) -> int:
    """Answer every approval the run asks for with Run none (after `each` looked at its checkboxes), until the ticket
    shows; returns how many were answered."""
    from selenium.webdriver.common.by import By

    answered = 0
    while True:
        wait.until(lambda b: b.find_element(By.ID, "approval-box").is_displayed()
                   or b.find_element(By.ID, "ticket-box").is_displayed())
        if browser.find_element(By.ID, "ticket-box").is_displayed():
            return answered
        if each:
            each(browser.find_elements(By.CSS_SELECTOR, "#approval-checks input[type=checkbox]"))
        browser.find_element(By.ID, "decline").click()
        answered += 1
        # the answer is drawn (and the box hidden) before the next question can show
        wait.until(lambda b, n=answered: sum(line.startswith("declined:") for line in _timeline(b)) >= n)


def test_page_does_not_pretick_load_tests_on_a_gpu_that_fell_off_the_bus(config: ServerConfig, fob_spec: str,
                                                                          browser) -> None:  # type: ignore[no-untyped-def]
    """Item 1: the server's advice (suggested, why) decides the ticks; the operator may still tick."""
    from selenium.webdriver.common.by import By

    config.targets = [fob_spec]
    seen: dict[str, str] = {}

    def look(boxes: list[Any]) -> None:
        assert boxes
        for box in boxes:
            check = str(box.get_attribute("value"))
            why = browser.find_element(By.ID, f"why-{check}").text
            seen[check] = why
            assert not box.is_selected() and box.get_attribute("data-suggested") == "false", check
            assert "GPU3" in why and "fallen off the bus" in why, why
            box.click()  # the operator may still tick it
            assert box.is_selected()

    with serving(config) as url:
        wait = _start(browser, url, FOB_INCIDENT)
        assert _decline_each(browser, wait, look) >= 2
        assert {"dcgm_diag", "gpu_exec"} <= set(seen), seen
        wait.until(lambda b: b.find_element(By.ID, "run-status").text.lower() == "done")


def test_run_list_header_and_api_show_one_status(config: ServerConfig, nan_spec: str,
                                                 browser) -> None:  # type: ignore[no-untyped-def]
    """Item 2: while the run waits for the operator, the run list, the header and the API all say waiting."""
    from selenium.webdriver.common.by import By

    def shown(b: Any, run_id: str) -> tuple[str, str]:
        entry = b.find_elements(By.CSS_SELECTOR, f'#runs li[data-run="{run_id}"] .status')
        return (b.find_element(By.ID, "run-status").text.lower(), entry[0].text.lower() if entry else "")

    config.targets = [nan_spec]
    with serving(config) as url:
        def at_approval(wait: Any, run_id: str) -> None:
            wait.until(lambda b: shown(b, run_id) == ("waiting", "waiting"))  # no refresh clicked
            run = httpx.get(f"{url}/api/runs/{run_id}").json()
            assert (run["status"], run["waiting_for"]) == ("waiting", "approval")
            assert shown(browser, run_id) == ("waiting", "waiting")
            title = browser.find_element(By.ID, "run-status").get_attribute("title")
            assert title and "approval" in title

        wait, run_id = _decline_diag(browser, url, NAN_INCIDENT, at_approval)
        wait.until(lambda b: shown(b, run_id) == ("done", "done"))
        assert httpx.get(f"{url}/api/runs/{run_id}").json()["status"] == "done"


# a connection that drops after the `history` event, and a server (or proxy) that then replays from the first event:
# the page must draw each event once, by its id
DROP_AND_REPLAY = """
window.__streams = [];
const realFetch = window.fetch.bind(window);
window.fetch = async (input, init = {}) => {
  let url = String(input);
  if (!url.includes("/events")) return realFetch(input, init);
  window.__streams.push(url);
  if (window.__streams.length > 1) {
    const headers = new Headers(init.headers || {});
    headers.delete("Last-Event-ID");
    return realFetch(url.replace(/after=\\d+/, "after=0"), { ...init, headers });
  }
  const response = await realFetch(url, init);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  const body = new ReadableStream({
    async pull(controller) {
      const { value, done } = await reader.read();
      if (done) { controller.close(); return; }
      controller.enqueue(value);
      text += decoder.decode(value, { stream: true });
      if (text.includes("event: history")) { reader.cancel(); controller.close(); }
    },
  });
  return new Response(body, { status: response.status, headers: response.headers });
};
"""


def test_timeline_draws_each_step_once_after_an_answer_and_a_reconnect(config: ServerConfig, fob_spec: str,
                                                                         browser) -> None:  # type: ignore[no-untyped-def]
    """Item 3: no replayed steps after an approval (the GPU-fallen-off-the-bus run is asked during pipeline 1, whose
    step starts again when the answer comes) nor after a reconnect (the page draws each event id once)."""
    from selenium.webdriver.common.by import By

    config.targets = [fob_spec]
    marks: list[int] = []

    def mark(boxes: list[Any]) -> None:
        marks.append(len(_timeline(browser)))

    with serving(config) as url:
        wait = _start(browser, url, FOB_INCIDENT, script=DROP_AND_REPLAY)
        assert _decline_each(browser, wait, mark) >= 1
        run_id = _run_id(browser)
        streams = browser.execute_script("return window.__streams")
        assert len(streams) >= 2, streams  # the page did reconnect, and was sent the first events again
        live = _timeline(browser)
        assert sum(line.startswith("incident:") for line in live) == 1, live
        assert sum(line.startswith("pipeline 1:") for line in live) == 1, live
        before, after = live[:marks[0]], live[marks[0]:]
        assert after[0].startswith("declined:")
        assert after[1] not in before, after  # the step interrupted by the question is not drawn again
        assert len(set(before)) == len(before)

        # reopening the run replays the stored stream: the same timeline, once; opening it twice at once too
        browser.get(f"{url}/?run={run_id}")
        wait.until(lambda b: b.find_element(By.ID, "ticket-box").is_displayed() and _timeline(b) == live)
        browser.execute_script("openRun(arguments[0]); openRun(arguments[0]);", run_id)
        wait.until(lambda b: b.find_element(By.ID, "ticket-box").is_displayed() and _timeline(b) == live)


def test_a_decline_shows_as_a_decline(config: ServerConfig, nan_spec: str,
                                      browser) -> None:  # type: ignore[no-untyped-def]
    """Item 4: "declined: dcgm_diag" in the timeline, and the run record says declined."""
    config.targets = [nan_spec]
    with serving(config) as url:
        _, run_id = _decline_diag(browser, url, NAN_INCIDENT)
        lines = _timeline(browser)
        assert "declined: dcgm_diag (by local)" in lines
        assert not [line for line in lines if "answered (approval)" in line]
        approvals = httpx.get(f"{url}/api/runs/{run_id}").json()["approvals"]
        assert [(a["decision"], a["declined"], a["by"]) for a in approvals] == [("declined", ["dcgm_diag"], "local")]


def test_ticket_on_the_page_says_what_the_page_user_can_do(config: ServerConfig, nan_spec: str,
                                                           browser) -> None:  # type: ignore[no-untyped-def]
    """Item 5: the page's ticket has no command-line advice (--approve-active)."""
    from selenium.webdriver.common.by import By

    config.targets = [nan_spec]
    with serving(config) as url:
        _decline_diag(browser, url, NAN_INCIDENT)
        ticket = browser.find_element(By.ID, "ticket").text
        assert "dcgm_diag" in ticket and "approval box" in ticket
        assert "--approve-active" not in ticket and "re-run with" not in ticket.lower()
