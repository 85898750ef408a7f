"""The web page in a real headless Chromium (Debian's chromium + chromium-driver, driven by Selenium): start a
simulated incident from the page, watch the taxonomy tree fill in, see the ticket, and keep a screenshot.

The screenshot goes to $AIDAI_ARTIFACTS (default tests/artifacts/, git-ignored); its path is printed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agent.server.config import ServerConfig
from tests.test_server import (  # noqa: F401 (fixtures)
    ECC,
    config_fixture,
    ecc_record_fixture,
    ecc_spec_fixture,
    serving,
)

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


def test_page_runs_an_incident_and_shows_tree_and_ticket(config: ServerConfig, ecc_record: dict, ecc_spec: str,
                                                         browser) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    with serving(config) as url:
        browser.get(url + "/")
        wait = WebDriverWait(browser, 120)
        wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#hosts input[type=checkbox]")))
        box = browser.find_element(By.CSS_SELECTOR, "#hosts input[type=checkbox]")
        assert box.get_attribute("value") == ecc_spec and box.is_selected()
        browser.find_element(By.ID, "incident").send_keys(ecc_record["description"])
        browser.find_element(By.ID, "environment").send_keys(ecc_record["environment"])
        Select(browser.find_element(By.ID, "approval")).select_by_value("ask")
        browser.find_element(By.ID, "start").click()

        # the tree fills in live: the ECC leaf shows as running or judged before the run ends
        leaf = f'#tree .node[data-label="{ECC}"]'
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, leaf)))
        # the run asks before the DCGM diag: the page shows the approval; decline it from the page
        wait.until(ec.visibility_of_element_located((By.ID, "approval-box")))
        assert "dcgm_diag" in browser.find_element(By.ID, "approval-checks").text
        browser.find_element(By.ID, "decline").click()

        wait.until(ec.visibility_of_element_located((By.ID, "ticket-box")))
        wait.until(ec.text_to_be_present_in_element((By.ID, "ticket"), ECC))
        assert browser.find_element(By.CSS_SELECTOR, leaf).get_attribute("data-status") == "confirmed"
        assert browser.find_element(By.ID, "run-status").text.lower() == "done"
        rejected = browser.find_elements(By.CSS_SELECTOR, '#tree .node[data-status="rejected"]')
        assert rejected, "the rejected hypotheses are in the tree too"
        board = browser.find_element(By.ID, "board").text
        assert ECC in board and "confirmed" in board and "rejected" in board
        assert "answered (approval) by local" in browser.find_element(By.ID, "timeline").text

        browser.find_element(By.CSS_SELECTOR, leaf).click()  # the evidence behind the verdict
        evidence = browser.find_element(By.ID, "evidence").text
        assert "xid_scan" in evidence and "FAIL" in evidence

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "web-page.png"
        assert browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        print(f"\nscreenshot: {shot}")
