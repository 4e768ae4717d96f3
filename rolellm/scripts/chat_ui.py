"""The web UI of `rolellm chat --ui`: a Gradio `ChatInterface` over a `ChatSession`, with a role picker.

The conversation lives in the browser (Gradio's messages format); each answer is streamed by
`ChatSession.reply(history, role)`, so the prompt is assembled exactly as in the terminal. Picking another role
starts a new conversation with that role's greeting. The chat is also an API: `gradio_client.Client(url).predict(
message, role, api_name="/chat")` answers within the client's session, turn after turn.
"""

from rolellm.clients.chat_session import ChatSession
from rolellm.roles.prompts import role_greeting
from rolellm.roles.resolve import select_roles


def greeting_messages(session: ChatSession, role: str) -> list[dict]:
    """The opening of a conversation with `role` in the messages format: its greeting, or nothing."""
    [profile] = select_roles(session.profiles, [role]).values()
    greeting = role_greeting(profile) if session.card_extras else None  # the conversation the model was trained on
    return [{"role": "assistant", "content": greeting}] if greeting else []


def message_text(content) -> str:
    """The text of a Gradio message content: a string, or a list of `{"type": "text", "text"}` parts (Gradio 6)."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else [content]
    return "".join(part if isinstance(part, str) else part.get("text") or "" for part in parts)


def build_chat_ui(session: ChatSession):
    """A `gr.Blocks` app: a role dropdown above a streaming `gr.ChatInterface` (not launched).

    Args:
        session (`ChatSession`): the client, profiles, starting role and sampling of the chat.

    Returns:
        `gradio.Blocks`: call `.launch(server_name="127.0.0.1")` to serve it.
    """
    try:
        import gradio as gr
    except ImportError:
        raise ImportError("rolellm chat --ui needs Gradio: pip install 'rolellm[ui]'") from None

    def known(role: str) -> str:
        """A role typed or sent through the API that the profiles lack: one line to the caller, no traceback."""
        if role not in session.profiles:
            raise gr.Error(
                f"unknown role {role!r}; the roles are {', '.join(session.profiles)}", print_exception=False
            )
        return role

    def respond(message: str, history: list[dict], role: str):
        known(role)
        turns = [{"role": m["role"], "content": message_text(m["content"])} for m in history]
        answer = ""
        for piece in session.reply([*turns, {"role": "user", "content": message}], role=role):
            answer += piece
            yield answer

    title = f"rolellm chat · {session.client.model_name}"
    with gr.Blocks(title=title, analytics_enabled=False, fill_height=True) as app:
        gr.Markdown(f"## {title}")
        picker = gr.Dropdown(
            choices=list(session.profiles), value=session.role, label="Role", interactive=True, allow_custom_value=True
        )
        chatbot = gr.Chatbot(
            value=greeting_messages(session, session.role), label=session.role, height="70vh", render=False
        )
        chat = gr.ChatInterface(
            respond, chatbot=chatbot, additional_inputs=[picker], api_name="chat", analytics_enabled=False,
            fill_height=True,
        )  # fmt: skip

        def start_over(role: str):
            opening = greeting_messages(session, known(role))
            return gr.update(value=opening, label=role), opening

        picker.change(
            start_over,
            [picker],
            [chat.chatbot, chat.chatbot_state],
            api_name="start_over",
            api_visibility="undocumented",
        )
    return app
