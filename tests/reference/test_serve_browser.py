"""The chat page in a real browser: headless Chromium (Debian's `chromium` + `chromium-driver`,
driven by Selenium) opens `syslm serve`'s page. It sends messages and sees replies stream in with
their figures and the server's live ones; stops a long reply and regenerates it; keeps
conversations (with their settings) across a reload and switches between them; renders Markdown
and highlighted code from the scripts the binary serves, with an injected script sanitised away;
answers in JSON mode; shows a tool call and sends its result back; picks the model with a LoRA
adapter from the models the server lists. Screenshots are saved (paths printed) to be looked
at."""
import json
import shutil
import signal

import pytest

from lora_files import write_random_adapter
from test_serve_openai import init_model, start_server

selenium = pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

MARKDOWN = ("Here is **bold** and `code`:\n\n```python\ndef f(x):\n    return x + 1\n```\n\n"
            "- one\n- two\n\n<img src=x onerror=\"window.pwned=1\">")


@pytest.fixture(scope="module")
def page(syslm_bin, tmp_path_factory, vocab_dir):
    tmp = tmp_path_factory.mktemp("browser")
    # A long reply (4000 tokens, several seconds at ~1000 tok/s) leaves time to stop it.
    model = init_model(syslm_bin, vocab_dir, tmp / "model.gguf", 4, 256, 4, 4096)
    adapter = write_random_adapter(model, tmp / "style.gguf", 4, 1)
    proc, port = start_server(syslm_bin, model, "--ctx-size", "4096", "--lora", f"style={adapter}")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1200,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.get(f"http://127.0.0.1:{port}/")
    WebDriverWait(driver, 30).until(lambda d: "KV pages" in d.find_element(By.ID, "stats").text)
    yield driver, tmp
    driver.quit()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def shot(driver, tmp, name):
    path = tmp / f"chat_{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 1000
    print(f"screenshot: {path}")


def setting(driver, field, value):
    box = driver.find_element(By.ID, "settings-box")
    if not box.get_attribute("open"):
        box.find_element(By.TAG_NAME, "summary").click()
    el = driver.find_element(By.ID, field)
    if el.get_attribute("type") == "checkbox":
        if el.is_selected() != value:
            el.click()
    else:
        driver.execute_script("arguments[0].value = arguments[1];"
                              "arguments[0].dispatchEvent(new Event('change'))", el, str(value))


def send(driver, text):
    driver.find_element(By.ID, "msg").send_keys(text)
    driver.find_element(By.ID, "send").click()


def idle(driver, timeout=90):
    WebDriverWait(driver, timeout).until(
        lambda d: d.find_element(By.ID, "send").is_displayed()
        and d.find_elements(By.CSS_SELECTOR, ".assistant .figures")
        and d.find_elements(By.CSS_SELECTOR, ".assistant .figures")[-1].text)


skip_no_driver = pytest.mark.skipif(not shutil.which("chromedriver"),
                                    reason="chromium-driver not installed")


@skip_no_driver
def test_replies_stream_stop_regenerate_and_persist(page):
    driver, tmp = page
    setting(driver, "system", "You are terse.")
    setting(driver, "max_tokens", 24)
    setting(driver, "temperature", 0)
    send(driver, "Hello, who are you?")
    idle(driver)
    reply = driver.find_elements(By.CSS_SELECTOR, ".assistant .body")[-1].text
    assert reply and "tok/s" in driver.find_elements(By.CSS_SELECTOR, ".assistant .figures")[-1].text
    assert "Hello, who are you?" in driver.find_element(By.CSS_SELECTOR, ".user").text
    WebDriverWait(driver, 30).until(lambda d: "tok/s" in d.find_element(By.ID, "stats").text)
    shot(driver, tmp, "reply")
    # A long reply, stopped: the button comes back, the figures say so, the text stays.
    setting(driver, "max_tokens", 4000)
    send(driver, "Tell me a long story")
    # Polled often, so that Stop is pressed while the reply is still streaming.
    WebDriverWait(driver, 30, poll_frequency=0.02).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".assistant")) == 2
                                    and d.find_elements(By.CSS_SELECTOR, ".assistant .body")[-1].text)
    driver.find_element(By.ID, "stop").click()
    idle(driver)
    assert "stopped" in driver.find_elements(By.CSS_SELECTOR, ".assistant .figures")[-1].text
    # Regenerate replaces the last answer (greedy: the same text again, to its end this time).
    setting(driver, "max_tokens", 20)
    driver.find_element(By.ID, "regen").click()
    idle(driver)
    assert len(driver.find_elements(By.CSS_SELECTOR, ".assistant")) == 2
    assert "length" in driver.find_elements(By.CSS_SELECTOR, ".assistant .figures")[-1].text
    # Kept across a reload, with the settings; a new chat is empty and the old one comes back.
    driver.refresh()
    WebDriverWait(driver, 30).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg")) == 4)
    assert driver.find_element(By.ID, "system").get_attribute("value") == "You are terse."
    assert driver.find_elements(By.CSS_SELECTOR, ".assistant .body")[0].text == reply
    driver.find_element(By.ID, "new").click()
    assert not driver.find_elements(By.CSS_SELECTOR, ".msg")
    driver.find_elements(By.CSS_SELECTOR, ".chat")[-1].click()
    WebDriverWait(driver, 10).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg")) == 4)
    shot(driver, tmp, "conversations")


@skip_no_driver
def test_markdown_renders_and_is_sanitised(page):
    driver, tmp = page
    driver.execute_script(
        "const s = JSON.parse(localStorage.getItem('syslm.chats'));"
        "s.chats.md = {title: 'Markdown', settings: {}, messages: ["
        "{role: 'user', content: 'Show me code'}, {role: 'assistant', content: arguments[0]}]};"
        "s.current = 'md'; localStorage.setItem('syslm.chats', JSON.stringify(s));", MARKDOWN)
    driver.refresh()
    WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".assistant pre code"))
    body = driver.find_element(By.CSS_SELECTOR, ".assistant .body")
    assert body.find_element(By.TAG_NAME, "strong").text == "bold"
    assert len(body.find_elements(By.TAG_NAME, "li")) == 2
    code = body.find_element(By.CSS_SELECTOR, "pre code")
    assert "hljs" in code.get_attribute("class")
    assert code.find_elements(By.CSS_SELECTOR, "span.hljs-keyword")  # highlighted: `def`, `return`
    assert driver.execute_script("return window.pwned") is None
    assert body.find_element(By.TAG_NAME, "img").get_attribute("onerror") is None
    shot(driver, tmp, "markdown")


@skip_no_driver
def test_json_mode_and_a_visible_tool_call(page):
    driver, tmp = page
    driver.find_element(By.ID, "new").click()
    setting(driver, "temperature", 0)
    setting(driver, "max_tokens", 60)
    setting(driver, "json_mode", True)
    send(driver, "Answer in JSON")
    idle(driver)
    assert driver.find_elements(By.CSS_SELECTOR, ".assistant .body")[-1].text.startswith("{")
    setting(driver, "json_mode", False)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
        "required": ["city"]}}}]
    setting(driver, "tools", json.dumps(tools))
    setting(driver, "tool_choice", "required")
    setting(driver, "parallel", False)
    setting(driver, "max_tokens", 300)
    send(driver, "Weather in Oslo?")
    idle(driver)
    call = driver.find_elements(By.CSS_SELECTOR, ".assistant .tool-call")[-1].text
    assert call.startswith("call get_weather(") and '"city"' in call
    assert "tool_calls" in driver.find_elements(By.CSS_SELECTOR, ".assistant .figures")[-1].text
    assert "Result of get_weather" in driver.find_element(By.ID, "msg").get_attribute("placeholder")
    setting(driver, "tool_choice", "none")
    setting(driver, "max_tokens", 30)
    send(driver, "sunny, 18 C")
    idle(driver)
    assert driver.find_elements(By.CSS_SELECTOR, ".tool .body")[-1].text == "sunny, 18 C"
    assert len(driver.find_elements(By.CSS_SELECTOR, ".assistant")) == 3
    shot(driver, tmp, "tools")


@skip_no_driver
def test_a_lora_adapter_is_picked_from_the_model_list(page):
    driver, tmp = page
    driver.find_element(By.ID, "new").click()
    setting(driver, "temperature", 0)
    setting(driver, "max_tokens", 12)
    setting(driver, "tools", "")
    options = [o.text for o in driver.find_elements(By.CSS_SELECTOR, "#model option")]
    assert len(options) == 2 and options[1] == options[0] + ":style", options
    send(driver, "Hello")
    idle(driver)
    body = lambda: driver.find_elements(By.CSS_SELECTOR, ".assistant .body")[-1].text
    base = body()
    pick = lambda i: driver.execute_script(
        "const s = document.getElementById('model'); s.selectedIndex = arguments[0];"
        "s.dispatchEvent(new Event('change'))", i)
    pick(1)
    driver.find_element(By.ID, "regen").click()
    idle(driver)
    styled = body()
    assert styled != base
    shot(driver, tmp, "lora")
    pick(0)
    driver.find_element(By.ID, "regen").click()
    idle(driver)
    assert body() == base
