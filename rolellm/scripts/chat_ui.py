"""The web UI of `rolellm chat --ui`: a Gradio page over a `ChatSession`, one conversation per browser tab.

Each tab holds its own `Chat` (a `gr.State`): the role, the turns with their swipes, the answers drawn. Every answer
is streamed by the session's operations (`send`, `regenerate`, `continue_answer`, `edit`), so the prompt is
assembled exactly as in the terminal, fitted to the context window. What goes wrong (an endpoint error, an empty
answer, an unknown role typed into the picker, a message too long for the window) is one line above the message
box; the conversation stays as it was and a message that got no answer is put back into the box.

The chat is also an API: `gradio_client.Client(url).predict(message, role, api_name="/chat")` answers within the
client's session, turn after turn.
"""

import tempfile
from pathlib import Path

from rolellm.clients.base import EndpointError
from rolellm.clients.chat_files import now
from rolellm.clients.chat_session import Chat, ChatSession, EmptyAnswer
from rolellm.clients.openai_compatible import OpenAIChatClient


CUT_MARK = "\n\n*[cut at the token budget: Continue goes on]*"
# ArrowLeft/ArrowRight outside a text field (or in an empty message box) swipe, Escape stops the answer
KEYS_JS = """
() => {
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    const typing = target && (target.tagName === "TEXTAREA" || target.tagName === "INPUT");
    if (typing && !(target.closest("#message") && target.value === "")) return;
    const id = {ArrowLeft: "swipe-left", ArrowRight: "swipe-right", Escape: "stop"}[event.key];
    const button = id && document.querySelector(`#${id}`);
    if (button && !button.disabled) { event.preventDefault(); button.click(); }
  });
}
"""
FAILURES = (EndpointError, EmptyAnswer, ValueError)


def shown_messages(chat: Chat) -> list[dict]:
    """The conversation as the chat shows it (messages format): a cut-off answer carries a mark."""
    return [{"role": turn["role"], "content": turn["content"] + (CUT_MARK if turn.get("cut") else "")}
            for turn in chat.turns]  # fmt: skip


def swipe_label(chat: Chat) -> str:
    turn = chat.turns[-1] if chat.turns and chat.turns[-1]["role"] == "assistant" else {}
    swipes = turn.get("swipes") or ([turn["content"]] if turn else [])
    return f"answer {turn.get('swipe', 0) + 1} of {len(swipes)}" if swipes else ""


def answer_notes(session: ChatSession, info: dict) -> str:
    """What to know about an answer: the turns the window left out, a cut at the token budget."""
    notes = []
    if info.get("dropped"):
        notes.append(
            f"ℹ️ The {info['dropped']} oldest turns are not sent: the conversation is past the "
            f"{info['window']}-token context window (the system text and the greeting always are)."
        )
    if info.get("cut"):
        notes.append("ℹ️ The answer stopped at the token budget (max new tokens): Continue goes on.")
    return "  \n".join(notes)


def build_chat_ui(session: ChatSession):
    """A `gr.Blocks` app: role picker, chat with swipes, edits and continue, settings, save/load (not launched).

    Args:
        session (`ChatSession`): the client, profiles, starting role, sampling and context window of the chat.

    Returns:
        `gradio.Blocks`: call `.launch(server_name="127.0.0.1")` to serve it.
    """
    try:
        import gradio as gr
    except ImportError:
        raise ImportError("rolellm chat --ui needs Gradio: pip install 'rolellm[ui]'") from None

    saved_dir = Path(tempfile.mkdtemp(prefix="rolellm-chat-"))
    estimated = isinstance(session.client, OpenAIChatClient)

    def meter(chat: Chat, settings: dict) -> str:
        start = 1 if chat.turns and chat.turns[0]["role"] == "assistant" else 0
        kept = chat.turns[:start] + chat.turns[start + chat.dropped :]
        tokens = session.count_tokens(session.messages(kept, chat.role, settings.get("user_name")))
        count = f"{'≈' if estimated else ''}{tokens} tokens"
        window = settings.get("context_window") or session.context_window
        if window is None:
            return f"Context: {count} (no window known for this endpoint: set one in the settings)"
        return f"Context: {count} of the {window}-token window (+ up to {settings['max_new_tokens']} for an answer)"

    def view(chat: Chat, settings: dict, note: str = "", streaming: bool = False, extra: dict | None = None) -> dict:
        """The page for `chat`: its messages, the note line, the buttons that apply (and when the answer is done)
        the token count and the system text."""
        last = session.last_message(chat)
        updates = {
            chatbot: gr.update(value=shown_messages(chat), label=chat.role),
            state: chat,
            status: note,
            swipes: swipe_label(chat),
            left: gr.update(interactive=not streaming and session.can_swipe(-1, chat)),
            right: gr.update(interactive=not streaming and (session.can_swipe(1, chat) or last is not None)),
            regenerate: gr.update(interactive=not streaming and last is not None),
            more: gr.update(interactive=not streaming and bool(chat.turns) and chat.turns[-1]["role"] == "assistant"),
            undo: gr.update(interactive=not streaming and last is not None),
            send: gr.update(interactive=not streaming),
        }
        if not streaming:
            updates[tokens] = meter(chat, settings)
            updates[system] = session.messages(chat.turns, chat.role, settings.get("user_name"))[0]["content"]
        return {**updates, **(extra or {})}

    def read_settings(*values) -> dict:
        """The page's settings; those of a closed accordion the page has not drawn yet are the session's."""
        settings = dict(zip(["temperature", "top_p", "max_new_tokens"], values))
        settings = {key: session.sampling[key] if value is None else value for key, value in settings.items()}
        window = int(values[4]) if values[4] else None
        return {**settings, "max_new_tokens": int(settings["max_new_tokens"]), "user_name": values[3].strip() or None,
                "context_window": window}  # fmt: skip

    def streamed(chat: Chat, settings: dict, stream, shown: list[dict], info: dict, message="", answer=""):
        """Stream an answer (going on from `answer`) into the page below the messages `shown`; a failure keeps
        `chat` as it was and puts `message` back into the box."""
        try:
            for number, piece in enumerate(stream):
                answer += piece
                reply = {chatbot: [*shown, {"role": "assistant", "content": answer}]}
                # the buttons turn off once, then only the answer changes
                yield view(chat, settings, streaming=True, extra=reply) if number == 0 else reply
        except FAILURES as error:
            back = " Your message is back in the box." if message else ""
            yield view(chat, settings, f"⚠️ {error}.{back}", extra={box: message} if message else None)
            return
        yield view(chat, settings, answer_notes(session, info))

    def on_send(message, chat, *values):
        settings, info = read_settings(*values), {}
        if not message.strip():
            yield view(chat, settings, "⚠️ Nothing to send: type a message first.")
            return
        shown = [*shown_messages(chat), {"role": "user", "content": message}]
        yield view(chat, settings, streaming=True, extra={box: "", chatbot: shown})
        yield from streamed(chat, settings, session.send(message, chat, settings, info), shown, info, message)

    def on_regenerate(chat, *values):
        settings, info = read_settings(*values), {}
        last = session.last_message(chat)
        if last is None:
            yield view(chat, settings, "⚠️ There is no message to answer yet.")
            return
        shown = shown_messages(chat)[: last + 1]
        yield from streamed(chat, settings, session.regenerate(chat, settings, info), shown, info)

    def on_swipe(step):
        def swipe(chat, *values):
            settings = read_settings(*values)
            if session.browse(step, chat) is not None or step < 0:
                yield view(chat, settings)
                return
            yield from on_regenerate(chat, *values)  # past the last answer: a new one, as in SillyTavern

        return swipe

    def on_continue(chat, *values):
        settings, info = read_settings(*values), {}
        if not chat.turns or chat.turns[-1]["role"] != "assistant":
            yield view(chat, settings, "⚠️ There is no answer to continue.")
            return
        shown, before = shown_messages(chat)[:-1], chat.turns[-1]["content"]
        yield from streamed(chat, settings, session.continue_answer(chat, settings, info), shown, info, answer=before)

    def on_edit(edit: gr.EditData, chat, *values):
        settings = read_settings(*values)
        text = edit.value if isinstance(edit.value, str) else str(edit.value)
        text = text.removesuffix(CUT_MARK)
        try:
            answer_again = session.edit(edit.index, text, chat)
        except ValueError as error:
            yield view(chat, settings, f"⚠️ {error}.")
            return
        if not answer_again:
            yield view(chat, settings, "Answer edited: the conversation goes on from it.")
            return
        yield from on_regenerate(chat, *values)

    def on_undo(chat, *values):
        settings = read_settings(*values)
        try:
            text = session.undo(chat)
        except ValueError as error:
            return view(chat, settings, f"⚠️ {error}.")
        note = "Your last message and its answer are removed (the message is in the box)."
        return view(chat, settings, note, extra={box: text})

    def on_new_chat(chat, *values):
        settings = read_settings(*values)
        fresh = session.new_chat(chat.role, settings["user_name"])
        fresh.draws = chat.draws
        return view(fresh, settings, f"A new chat with {chat.role}.")

    def on_role(role, chat, *values):
        settings = read_settings(*values)
        try:
            fresh = session.new_chat(role, settings["user_name"])
        except ValueError as error:  # typed into the picker: the chat goes on with its role
            return view(chat, settings, f"⚠️ {error}.", extra={picker: chat.role})
        fresh.draws = chat.draws
        return view(fresh, settings, f"Now talking to {fresh.role}.", extra={picker: fresh.role})

    def on_stop(chat, shown, *values):
        """A stopped answer is not kept; the message it answered goes back into the box."""
        settings = read_settings(*values)
        extra = {}
        if len(shown) > len(chat.turns) and shown[len(chat.turns)]["role"] == "user":
            extra[box] = _text(shown[len(chat.turns)]["content"])
        return view(chat, settings, "Stopped: the unfinished answer is not kept.", extra=extra)

    def on_name(chat, *values):
        settings = read_settings(*values)
        if session.last_message(chat) is None:  # only the greeting: greet the user by their name
            fresh = session.new_chat(chat.role, settings["user_name"])
            fresh.draws = chat.draws
            return view(fresh, settings)
        return view(chat, settings)

    def on_save(kind):
        def save(chat, *values):
            file_name = f"{chat.role}-{now().replace(':', '-')}.{kind}".replace(" ", "_")
            return session.save(saved_dir / file_name, chat)

        return save

    def on_load(file, chat, *values):
        settings = read_settings(*values)
        try:
            loaded, extras = session.read(file if isinstance(file, str) else file.name)
        except (ValueError, OSError) as error:
            return view(chat, settings, f"⚠️ {error}.")
        loaded.draws = chat.draws
        skipped = f" ({extras['skipped']} system notes left out)" if extras["skipped"] else ""
        extra = {picker: loaded.role, **({name: extras["user_name"]} if extras["user_name"] else {})}
        return view(loaded, settings, f"Loaded {len(loaded.turns)} messages with {loaded.role}{skipped}.", extra=extra)

    def api_chat(message: str, role: str, chat: Chat | None):
        """The `/chat` API: one answer of `role`, in the conversation of the caller's session."""
        try:
            role = session.resolve_role(role)
            chat = chat if chat is not None and chat.role == role else session.new_chat(role)
            return "".join(session.send(message, chat)), chat
        except FAILURES as error:
            raise gr.Error(str(error), print_exception=False) from None

    title = f"rolellm chat · {session.client.model_name}"
    first = session.new_chat()
    with gr.Blocks(title=title, analytics_enabled=False, fill_height=True) as app:
        gr.Markdown(f"## {title}")
        with gr.Row():
            picker = gr.Dropdown(
                list(session.profiles), value=first.role, label="Role", allow_custom_value=True, elem_id="role"
            )
            name = gr.Textbox(session.user_name or "", label="Your name ({{user}})", placeholder="User")
        chatbot = gr.Chatbot(shown_messages(first), label=first.role, height="60vh", editable="all", elem_id="chat")
        state = gr.State(first)
        status = gr.Markdown(elem_id="status")
        with gr.Row(equal_height=True):
            box = gr.Textbox(show_label=False, placeholder="Message (Enter sends, Shift+Enter a new line)",
                             lines=1, max_lines=8, scale=8, elem_id="message")  # fmt: skip
            send = gr.Button("Send", variant="primary", scale=1, elem_id="send")
            stop = gr.Button("Stop", variant="stop", scale=1, elem_id="stop")
        with gr.Row(equal_height=True):
            left = gr.Button("◀", elem_id="swipe-left", min_width=60, interactive=False)
            swipes = gr.Markdown(swipe_label(first), elem_id="swipes", min_height=0)
            right = gr.Button("▶", elem_id="swipe-right", min_width=60, interactive=session.can_swipe(1, first))
            regenerate = gr.Button("Regenerate", elem_id="regenerate", interactive=False)
            more = gr.Button("Continue", elem_id="continue", interactive=bool(first.turns))
            undo = gr.Button("Undo", elem_id="undo", interactive=False)
            new = gr.Button("New chat", elem_id="new-chat")
        tokens = gr.Markdown(meter(first, {**session.sampling, "user_name": None}), elem_id="tokens")
        with gr.Accordion("Settings", open=False), gr.Row():
            temperature = gr.Slider(0, 2, session.sampling["temperature"], step=0.05, label="Temperature")
            top_p = gr.Slider(0.05, 1, session.sampling["top_p"], step=0.05, label="Top-p")
            max_new_tokens = gr.Number(session.sampling["max_new_tokens"], label="Max new tokens", minimum=1,
                                       precision=0, elem_id="max-new-tokens")  # fmt: skip
            window = gr.Number(session.context_window, label="Context window (tokens)", minimum=1, precision=0,
                               elem_id="context-window")  # fmt: skip
        with gr.Accordion("System text (what the role is told)", open=False):
            system = gr.Textbox(session.messages(first.turns, first.role)[0]["content"], show_label=False, lines=8,
                                max_lines=20, interactive=False, elem_id="system")  # fmt: skip
        with gr.Accordion("Save / load", open=False):
            with gr.Row():
                save_json = gr.Button("Save (.json transcript)")
                save_jsonl = gr.Button("Save (SillyTavern .jsonl)")
                load = gr.UploadButton("Load a chat", file_types=[".json", ".jsonl"], elem_id="load")
            saved = gr.File(label="Saved chat", interactive=False)
        api_inputs = [gr.Textbox(visible=False), gr.Textbox(visible=False)]
        api_state, api_answer = gr.State(None), gr.Textbox(visible=False)
        api_button = gr.Button(visible=False)

        values = [temperature, top_p, max_new_tokens, name, window]
        outputs = [chatbot, state, status, swipes, left, right, regenerate, more, undo, send, tokens, system, box]
        # while an answer is written its progress shows on the conversation alone, not over each of the 13 outputs
        # (whose timers and overlays, redrawn ten times a second, doubled the browser's work); the other events
        # change the page at once
        answering = {"show_progress": "minimal", "show_progress_on": chatbot}
        instant = {"show_progress": "hidden"}
        running = [
            # a message sent while a stopped answer winds down is sent once it has, not dropped
            box.submit(on_send, [box, state, *values], outputs, trigger_mode="always_last", **answering),
            send.click(on_send, [box, state, *values], outputs, trigger_mode="always_last", **answering),
            regenerate.click(on_regenerate, [state, *values], outputs, **answering),
            left.click(on_swipe(-1), [state, *values], outputs, **answering),
            right.click(on_swipe(1), [state, *values], outputs, **answering),
            more.click(on_continue, [state, *values], outputs, **answering),
            chatbot.edit(on_edit, [state, *values], outputs, **answering),
        ]
        stop.click(on_stop, [state, chatbot, *values], outputs, cancels=running, **instant)
        picker.input(on_role, [picker, state, *values], [*outputs, picker], cancels=running, **instant)
        new.click(on_new_chat, [state, *values], outputs, cancels=running, **instant)
        # the chat's bin: a new chat, its greeting kept
        chatbot.clear(on_new_chat, [state, *values], outputs, cancels=running, **instant)
        undo.click(on_undo, [state, *values], outputs, **instant)
        name.blur(on_name, [state, *values], outputs, **instant)
        save_json.click(on_save("json"), [state, *values], saved, **instant)
        save_jsonl.click(on_save("jsonl"), [state, *values], saved, **instant)
        load.upload(on_load, [load, state, *values], [*outputs, picker, name], cancels=running, **instant)
        app.load(None, js=KEYS_JS)
        api_button.click(api_chat, [*api_inputs, api_state], [api_answer, api_state], api_name="chat", **instant)
    return app


def _text(content) -> str:
    """The text of a Gradio message content: a string, or a list of `{"type": "text", "text"}` parts (Gradio 6)."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else [content]
    return "".join(part if isinstance(part, str) else part.get("text") or "" for part in parts)
