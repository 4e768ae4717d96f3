"""Take the screenshot of `rolellm chat --ui` in docs/img/chat-ui.png with headless Chromium.

The UI is the one `rolellm chat --ui` serves (`build_chat_ui`), talking as Jack Sparrow (a Character Card with a
greeting) to the test chat-completions server of `rolellm.testing`, which replays the RoleGPT answers of the
RoleBench release for the questions typed (`../shared/data/rolebench`). Chromium is driven through the DevTools
protocol (`--remote-debugging-pipe`): it types two questions into the chat, as a user would, waits for the
answers, and takes the screenshot.

    apt-get install -y chromium   # Debian's; any Chromium or Chrome binary works (--chromium PATH)
    python examples/chat_ui_screenshot.py --output docs/img/chat-ui.png
"""

import argparse
import base64
import fcntl
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from rolellm.clients.chat_session import ChatSession
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.roles.resolve import load_profiles
from rolellm.scripts.chat import free_port
from rolellm.scripts.chat_ui import build_chat_ui
from rolellm.testing.data import find_rolebench_data
from rolellm.testing.server import ChatCompletionsServer


QUESTIONS = [
    "Jack Sparrow, how did you manage to escape from the casket?",
    "Jack Sparrow, what was the purpose of your journey upriver in Dead Man's Chest?",
]
CARD = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        "name": "Jack Sparrow",
        "description": "Captain of the Black Pearl: witty, eccentric, always one step ahead, fond of rum.",
        "personality": "cunning, theatrical, charming",
        "first_mes": "Ahoy! Captain Jack Sparrow, at your service. What brings you aboard the Black Pearl, savvy?",
    },
}
# Types each question into the chat, as a user would, once the previous answer has arrived.
TYPE_QUESTIONS = """
async () => {
  const questions = %s;
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  for (const [i, question] of questions.entries()) {
    let box = null;
    while (!(box = document.querySelector("#message textarea"))) await sleep(100);
    box.value = question;
    box.dispatchEvent(new Event("input", { bubbles: true }));
    await sleep(200);
    document.querySelector("#send").click();
    while (document.querySelectorAll(".bot-row").length < i + 2) await sleep(100);
    await sleep(500);
  }
}
"""


class DevTools:
    """The Chrome DevTools protocol over `--remote-debugging-pipe` (JSON messages ending in NUL on fds 3 and 4)."""

    def __init__(self, chromium: str, window_size: str):
        self.commands_read, self.commands = os.pipe()
        self.replies, self.replies_written = os.pipe()
        flags = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
            "--remote-debugging-pipe", f"--user-data-dir={tempfile.mkdtemp()}", f"--window-size={window_size}",
        ]  # fmt: skip

        def use_pipes():  # Chromium reads commands on fd 3 and writes replies on fd 4
            # out of the way first: a pipe end may itself be fd 3 or 4
            read, written = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (self.commands_read, self.replies_written))
            os.dup2(read, 3)
            os.dup2(written, 4)

        self.process = subprocess.Popen(
            [chromium, *flags], preexec_fn=use_pipes, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(self.commands_read)
        os.close(self.replies_written)
        self.next_id, self.buffer = 0, b""

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self.next_id += 1
        message = {
            "id": self.next_id,
            "method": method,
            "params": params,
            **({"sessionId": session} if session else {}),
        }
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self.buffer:
                chunk = os.read(self.replies, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium closed the pipe while {method} was pending")
                self.buffer += chunk
            raw, self.buffer = self.buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def close(self):
        self.process.kill()
        self.process.wait()


def screenshot(browser: DevTools, url: str, window_size: str, questions: list[str]) -> bytes:
    """Open `url`, type `questions` one after the other, wait for the answers, and return the page as PNG."""
    try:
        target = browser.send("Target.createTarget", url="about:blank")["targetId"]
        session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        width, height = (int(n) for n in window_size.split(","))
        browser.send("Emulation.setDeviceMetricsOverride", session, width=width, height=height, deviceScaleFactor=1,
                     mobile=False)  # fmt: skip
        browser.send("Page.navigate", session, url=url)
        expression = f"({TYPE_QUESTIONS % json.dumps(questions)})()"
        browser.send("Runtime.evaluate", session, expression=expression, awaitPromise=True)
        time.sleep(1)  # the last answer's stream settles
        return base64.b64decode(browser.send("Page.captureScreenshot", session, format="png")["data"])
    finally:
        browser.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="docs/img/chat-ui.png")
    parser.add_argument("--chromium", default="chromium")
    parser.add_argument("--window_size", default="1100,1000")
    args = parser.parse_args()
    data = find_rolebench_data()
    if data is None:
        raise SystemExit("the RoleBench files are needed (../shared/data or ROLEBENCH_DATA_DIR)")
    baseline = data / "rolebench/rolebench-eng/instruction-generalization/role_specific/rolegpt_baseline.jsonl"
    rows = [json.loads(line) for line in baseline.read_text(encoding="utf-8").splitlines()]
    answers = {row["question"].strip(): row["generated"][0] for row in rows if row["role"] == "Jack Sparrow"}
    card = Path(tempfile.mkdtemp()) / "jack.json"
    card.write_text(json.dumps(CARD), encoding="utf-8")
    browser = DevTools(args.chromium, args.window_size)  # started before any thread: it forks
    with ChatCompletionsServer(lambda body: answers[body["messages"][-1]["content"]]) as server:
        client = OpenAIChatClient("rolegpt-replay", base_url=server.base_url, progress=False)
        app = build_chat_ui(ChatSession(client, load_profiles(card), "Jack Sparrow"))
        port = free_port()
        app.launch(server_name="127.0.0.1", server_port=port, quiet=True, prevent_thread_lock=True)
        try:
            png = screenshot(browser, f"http://127.0.0.1:{port}/", args.window_size, QUESTIONS)
        finally:
            app.close()
    Path(args.output).write_bytes(png)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
