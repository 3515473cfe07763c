"""The chat page in a real browser: headless Chromium (Debian's `chromium` + `chromium-driver`,
driven by Selenium) opens `syslm serve`'s page, sends a message, sees the reply stream in and the
live server figures, and the test saves a screenshot (printed path)."""
import shutil
import signal

import pytest

from test_serve_openai import init_model, start_server

selenium = pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.mark.skipif(not shutil.which("chromedriver"), reason="chromium-driver not installed")
def test_chat_page_streams_a_reply(syslm_bin, tmp_path, vocab_dir):
    model = tmp_path / "model.gguf"
    init_model(syslm_bin, vocab_dir, model, 2, 64, 4, 512)
    proc, port = start_server(syslm_bin, model, "--ctx-size", "512")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1000,800"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        WebDriverWait(driver, 30).until(
            lambda d: "KV pages" in d.find_element(By.ID, "stats").text)
        driver.find_element(By.ID, "msg").send_keys("Hello, who are you?")
        driver.find_element(By.ID, "send").click()
        WebDriverWait(driver, 60).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, ".assistant")) == 1
            and len(d.find_element(By.CSS_SELECTOR, ".assistant").text) > 10)
        assert "Hello, who are you?" in driver.find_element(By.CSS_SELECTOR, ".user").text
        WebDriverWait(driver, 30).until(
            lambda d: "tok/s" in d.find_element(By.ID, "stats").text)
        shot = tmp_path / "chat_page.png"
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 1000
        print(f"screenshot: {shot}")
    finally:
        driver.quit()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
