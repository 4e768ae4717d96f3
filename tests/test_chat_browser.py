"""`rolellm chat --ui` in a real browser: headless Chromium (through chromedriver and selenium) talks to Ada Quill's
Character Card and to Po, played by the embedded SmolLM2-135M-Instruct behind the stand-in chat-completions server
(which can fail on request), as a user would: greeting and its swipe, empty message, two messages, a swipe and back,
an edit, a role switch mid-answer, an endpoint that fails and then recovers, a conversation past the context window.

A screenshot of each step goes to the test's folder (`pytest --basetemp=DIR` keeps them); docs/img/chat-ui.png is
one of them. Needs Debian's `chromium` and `chromium-driver` (`make test` installs them where apt can); without them
the test is skipped, saying so.
"""

import importlib.util
import json
import re
import shutil
import threading

import pytest

from rolellm.clients.chat_answer import stream_answer
from rolellm.clients.chat_session import ChatSession
from rolellm.clients.engines import engine_version
from rolellm.clients.gguf import GGUFError, embedded_model_file
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.roles.resolve import load_profiles
from rolellm.scripts.chat import free_port
from rolellm.testing.models import cpu_model_dtype
from rolellm.testing.server import ChatCompletionsServer, Fault


# what the test needs, found without importing it (gradio takes seconds, and every worker collects this file)
if importlib.util.find_spec("selenium") is None:
    pytest.skip("the browser test needs selenium (the `dev` extra)", allow_module_level=True)
CHROMIUM = next(filter(None, map(shutil.which, ["chromium", "chromium-browser", "google-chrome"])), None)
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip(
        "no headless Chromium: apt-get install chromium chromium-driver (make test does where apt can)",
        allow_module_level=True,
    )
try:
    GGUF = embedded_model_file()
except GGUFError as error:
    pytest.skip(f"the embedded real model is not installed: {error}", allow_module_level=True)
if importlib.util.find_spec("gradio") is None:
    pytest.skip("the chat UI needs gradio (the `ui` extra)", allow_module_level=True)

ADA_GREETING = "*Ada drops a crate of brass parts on the floor.* Right. Where's the patient?"
ADA_OTHER_GREETING = "Hold this."
ADA_CARD = {  # Ada Quill's card of tests/fixtures, short (a short prompt is a quick answer on a CPU)
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        "name": "Ada Quill",
        "description": "An inventor who fixes lighthouses.",
        "first_mes": ADA_GREETING,
        "alternate_greetings": ["*Ada is already halfway up the ladder.* Hold this."],
        "character_book": {"entries": [{"keys": ["lamp"], "content": "The lamp is a first-order Fresnel lens."}]},
    },
}
PO_CARD = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {"name": "Po", "description": "A kung fu panda who loves dumplings.", "first_mes": "Skadoosh!"},
}


class RealModelEndpoint:
    """The stand-in chat-completions server answering with the embedded model (its own sampling and budget, as
    requested): its GGUF file in llama.cpp where llama-cpp-python is installed (a decode step of its 4-bit weights is
    a sixth of one in transformers on a CPU, whose memory bandwidth bounds it), else transformers in the CPU's fastest
    dtype (`cpu_model_dtype`); `gate` holds the answers while it is clear."""

    def __init__(self):
        if engine_version("llamacpp") is not None:
            from rolellm.clients.llamacpp_backend import LlamaCppChatClient

            self.model = LlamaCppChatClient(GGUF, n_threads=1, progress=False)
        else:
            from rolellm.clients.gguf import resolve_model_name_or_path
            from rolellm.clients.local import LocalChatClient

            self.model = LocalChatClient(resolve_model_name_or_path(GGUF), dtype=cpu_model_dtype(), progress=False)
        self.reasons = []  # the finish reason of each answer: "length" when cut at the token budget
        self.answers = []  # the text of each answer
        self.gate = threading.Event()
        self.gate.set()
        self.server = ChatCompletionsServer(self.answer)

    def answer(self, body: dict) -> dict:
        if not self.gate.is_set():
            self.gate.wait(timeout=60)
            return "Too late to be shown."  # the conversation it answers is gone
        finish = {}
        sampling = {key: body[key] for key in ("temperature", "top_p", "seed")}
        text = "".join(stream_answer(self.model, body["messages"], body["max_tokens"], **sampling, finish=finish))
        self.reasons.append(finish["reason"])
        self.answers.append(text)
        message = {"role": "assistant", "content": text}
        return {"id": "real", "object": "chat.completion", "created": 0, "model": body["model"], "usage": {},
                "choices": [{"index": 0, "message": message, "finish_reason": finish["reason"]}]}  # fmt: skip


class Page:
    """The chat page in headless Chromium, with screenshots of each step."""

    def __init__(self, url: str, shots):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1100,1200"):  # fmt: skip
            options.add_argument(flag)
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.shots, self.taken = shots, []
        self.driver.get(url)
        self.wait(lambda: self.bots(), "the greeting")

    def find(self, css: str):
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def texts(self, css: str) -> list[str]:
        """The text of each element `css` selects, read at once (the page redraws elements as answers stream)."""
        script = "return [...document.querySelectorAll(arguments[0])].map((element) => element.innerText.trim())"
        return self.driver.execute_script(script, css)

    def bots(self) -> list[str]:
        return self.texts("#chat [data-testid='bot']")

    def users(self) -> list[str]:
        return self.texts("#chat [data-testid='user']")

    def text(self, element_id: str) -> str:
        return self.texts(f"#{element_id}")[0]

    def enabled(self, element_id: str) -> bool:
        return self.find(f"#{element_id}").is_enabled()

    def wait(self, condition, what: str, timeout: float = 180):  # a slow machine: an answer can take a minute
        from selenium.webdriver.support.ui import WebDriverWait

        # each look at the page is a request or two to chromedriver (a few ms); ten a second keep a step's wait for
        # the page short of a quarter second (the page is at most a poll behind)
        return WebDriverWait(self.driver, timeout, poll_frequency=0.1).until(lambda _: condition(), what)

    def idle(self, bots: int, what: str) -> None:
        """Wait for `bots` answers on the page and the end of the answering (Send enabled again)."""
        self.wait(lambda: len(self.bots()) == bots and self.enabled("send"), what)

    def type(self, text: str, send: bool = True) -> None:
        from selenium.webdriver.common.keys import Keys

        box = self.find("#message textarea")
        box.clear()
        box.send_keys(text, *([Keys.ENTER] if send else []))

    def click(self, element_id: str) -> None:
        self.find(f"#{element_id}").click()

    def shot(self, name: str) -> None:
        path = self.shots / f"{len(self.taken) + 1:02d}-{name}.png"
        self.driver.save_screenshot(str(path))
        self.taken.append(path)


def count(text: str) -> int:
    return int(re.search(r"(\d+) tokens", text)[1])


def test_a_conversation_in_the_browser(tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from rolellm.scripts.chat_ui import build_chat_ui

    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "ada.json").write_text(json.dumps(ADA_CARD), encoding="utf-8")
    (cards / "po.json").write_text(json.dumps(PO_CARD), encoding="utf-8")
    endpoint = RealModelEndpoint()
    with endpoint.server as server:
        client = OpenAIChatClient("smollm2", base_url=server.base_url, progress=False, max_retries=0)
        session = ChatSession(client, load_profiles(str(cards)), "Ada Quill", max_new_tokens=12, temperature=0.8)
        app = build_chat_ui(session)
        # an answer's progress shows on the conversation alone; every other event of the page changes it at once
        [chat_id] = [c["id"] for c in app.config["components"] if c["props"].get("elem_id") == "chat"]
        progress = [(d["show_progress"], d["show_progress_on"]) for d in app.config["dependencies"] if d["outputs"]]
        answering = progress.count(("minimal", [chat_id]))
        assert answering == 7 and progress.count(("hidden", None)) == len(progress) - answering, progress
        app.launch(server_name="127.0.0.1", server_port=free_port(), quiet=True, prevent_thread_lock=True)
        page = None
        try:
            page = Page(app.local_url, tmp_path)
            conversation(page, server, endpoint, session, By, Keys)
        except Exception:
            if page is not None:
                page.shot("failed")  # what the page showed
            raise
        finally:
            if page is not None:
                page.driver.quit()
            app.close()
    assert [path.name for path in page.taken] == [
        "01-greeting.png", "02-two-messages.png", "03-swipe.png", "04-edit.png", "05-role-switch.png",
        "06-endpoint-error.png", "07-recovered-past-the-window.png",
    ]  # fmt: skip
    assert all(path.stat().st_size > 10_000 for path in page.taken)


def conversation(page: Page, server, endpoint: RealModelEndpoint, session, By, Keys):  # noqa: N803 - selenium's
    # the greeting, and the card's other greeting as its swipe (no model asked)
    assert page.bots() == [ADA_GREETING.replace("*", "")]  # the page renders the card's *actions* in italics
    page.click("swipe-right")
    page.wait(lambda: ADA_OTHER_GREETING in page.bots()[0], "the card's other greeting")
    assert page.text("swipes") == "answer 2 of 2" and not page.enabled("regenerate") and not page.enabled("undo")
    page.click("swipe-left")
    page.wait(lambda: "Right. Where's the patient?" in page.bots()[0], "the first greeting back")
    page.shot("greeting")

    # an empty message is not sent
    page.type("   ")
    page.wait(lambda: "Nothing to send" in page.text("status"), "the empty-message note")
    assert server.requests == []

    # two messages, answered by the real model
    page.type("Can you fix the lamp before the storm?")
    page.idle(2, "the first answer")
    page.type("What do you need for it?")
    page.idle(3, "the second answer")
    answers = page.bots()[1:]
    assert all(answer.strip() for answer in answers) and len(server.requests) == 2
    first = server.requests[0]["body"]
    assert [m["role"] for m in first["messages"]] == ["system", "assistant", "user"]
    assert "Fresnel lens" in first["messages"][0]["content"]  # "lamp" called up the card's lorebook entry
    assert count(page.text("tokens")) > 0 and "tokens of the" not in page.text("tokens")  # an endpoint: estimated
    # an answer cut at the token budget is marked
    assert ("cut at the token budget" in page.bots()[-1]) == (endpoint.reasons[-1] == "length")
    page.driver.find_element(By.XPATH, "//button[.//*[starts-with(normalize-space(), 'System text')]]").click()
    shown = page.wait(lambda: page.find("#system textarea").get_attribute("value"), "the system text")
    # what the role is told for its next answer: the lorebook entries the last turns call up, the answer's included
    turns = [*server.requests[-1]["body"]["messages"][1:], {"role": "assistant", "content": endpoint.answers[-1]}]
    assert shown == session.messages(turns, "Ada Quill")[0]["content"]
    page.shot("two-messages")

    # a swipe: another answer drawn with another seed, the first one kept; back and forth (buttons and keys)
    page.click("swipe-right")
    page.wait(lambda: page.text("swipes") == "answer 2 of 2" and page.enabled("send"), "the second swipe")
    seeds = [request["body"]["seed"] for request in server.requests]
    assert seeds == [0, 1, 2] and server.requests[2]["body"]["messages"] == server.requests[1]["body"]["messages"]
    swiped = page.bots()[-1]
    page.click("swipe-left")
    page.wait(lambda: page.text("swipes") == "answer 1 of 2", "back to the first answer")
    assert page.bots()[-1] == answers[1] and len(server.requests) == 3
    page.find("body").send_keys(Keys.ARROW_RIGHT)  # the keyboard: right arrow outside the message box
    page.wait(lambda: page.text("swipes") == "answer 2 of 2", "the right arrow key")
    assert page.bots()[-1] == swiped
    page.shot("swipe")

    # an edit of the first message: the conversation goes on from it
    user_row = page.driver.find_elements(By.CSS_SELECTOR, "#chat .user-row")[0]
    user_row.find_element(By.XPATH, "following-sibling::*[1]//button[@aria-label='Edit']").click()
    editor = page.wait(lambda: page.driver.find_elements(By.CSS_SELECTOR, "#chat textarea"), "the message editor")[0]
    editor.send_keys(Keys.CONTROL, "a")
    editor.send_keys("Is the lamp broken?")
    page.find("#chat button[aria-label='Submit']").click()
    page.idle(2, "the answer to the edited message")
    assert page.users() == ["Is the lamp broken?"]
    assert server.requests[-1]["body"]["messages"][-1]["content"].startswith("Is the lamp broken?")
    page.shot("edit")

    # an unknown role typed into the picker: said so, the conversation goes on
    picker = page.find("#role input")
    picker.click()
    picker.send_keys(Keys.CONTROL, "a")
    picker.send_keys("Oogway", Keys.ENTER)
    page.wait(lambda: "roles ['Oogway'] are not in the profiles" in page.text("status"), "the unknown role's note")
    assert page.users() == ["Is the lamp broken?"] and page.enabled("send")

    # another role picked while an answer is on its way: the old conversation is gone, the new role's history clean
    endpoint.gate.clear()
    asked = len(server.requests)
    page.type("Tell me about your workshop.")
    page.wait(lambda: len(server.requests) > asked or server._handling, "the held request")
    picker = page.find("#role input")
    picker.click()
    picker.send_keys(Keys.CONTROL, "a")
    picker.send_keys("Po", Keys.ENTER)
    page.wait(lambda: page.bots() == ["Skadoosh!"] and page.enabled("send"), "Po's greeting")
    endpoint.gate.set()  # the old answer arrives now, too late to be shown
    page.type("Who are you?")
    page.idle(2, "Po's answer")
    po_request = server.requests[-1]["body"]["messages"]
    assert "Po" in po_request[0]["content"] and not any("Ada" in m["content"] for m in po_request)
    assert page.users() == ["Who are you?"]
    page.shot("role-switch")

    # past the context window, and an endpoint that fails before it answers: a small window set in the page
    page.driver.find_element(By.XPATH, "//button[.//*[normalize-space()='Settings']]").click()
    window = page.wait(lambda: page.find("#context-window input"), "the window setting")
    window.send_keys(Keys.CONTROL, "a")
    window.send_keys(str(count(page.text("tokens")) + 12 + 8), Keys.TAB)  # room for one more short message
    server.add_faults(Fault("server_error", status=400, message="The model is overloaded"))
    page.type("Do you like dumplings?")  # the endpoint's error on the page, the message back in the box
    page.wait(lambda: "HTTP 400 The model is overloaded" in page.text("status"), "the endpoint's error")
    assert page.find("#message textarea").get_attribute("value") == "Do you like dumplings?"
    assert page.users() == ["Who are you?"] and page.enabled("send") and len(page.bots()) == 2
    page.shot("endpoint-error")
    server.add_faults(Fault("null_content"))  # an empty answer: said so, nothing kept, the message back in the box
    page.find("#message textarea").send_keys(Keys.ENTER)
    page.wait(lambda: "smollm2 gave an empty answer" in page.text("status"), "the empty answer's note")
    assert page.find("#message textarea").get_attribute("value") == "Do you like dumplings?"
    assert page.users() == ["Who are you?"] and len(page.bots()) == 2
    page.find("#message textarea").send_keys(Keys.ENTER)  # the endpoint is back
    page.idle(3, "the answer once the endpoint is back")
    assert page.users() == ["Who are you?", "Do you like dumplings?"] and "HTTP 400" not in page.text("status")
    sent = server.requests[-1]["body"]["messages"]
    assert [m["content"] for m in sent[1:2]] == ["Skadoosh!"] and "Who are you?" not in json.dumps(sent)
    assert "The 2 oldest turns are not sent" in page.text("status")
    page.shot("recovered-past-the-window")

    # a new chat opens with the greeting again
    page.click("new-chat")
    page.wait(lambda: page.bots() == ["Skadoosh!"] and not page.users(), "a new chat")
