"""One answer of a chat: the prompt fitted to the context window (`fit_to_window`), counted in the model's tokens
(`count_prompt_tokens`, `prompt_ids`), and streamed from a local `transformers` model, llama.cpp or an
OpenAI-compatible endpoint (`stream_answer`). `ChatSession` (`rolellm.clients.chat_session`) keeps the conversation
and asks here for each answer.

>>> from rolellm.testing.server import ChatCompletionsServer
>>> with ChatCompletionsServer(lambda body: "Skadoosh!") as server:
...     client = OpenAIChatClient("test-model", base_url=server.base_url, progress=False)
...     "".join(stream_answer(client, [{"role": "user", "content": "Who are you?"}], temperature=0.0))
'Skadoosh!'
"""

import threading
from collections.abc import Callable, Iterator

from rolellm.clients.base import ChatClient, EndpointError
from rolellm.clients.openai_compatible import DIALECT_SETTINGS, OpenAIChatClient, route_hint, server_message
from rolellm.roles.card_prompts import approx_tokens


CHAT_RETRIES = 2  # a turn's retries at most (the client's `max_retries` when lower): a person waits for the answer


class ContextWindowError(ValueError):
    """A message that does not fit the context window even with every earlier turn left out."""


def fit_to_window(
    turns: list[dict], render: Callable[[list[dict]], list[dict]], count: Callable[[list[dict]], int], budget: int,
    window: int | None,
) -> tuple[list[dict], int]:  # fmt: skip
    """The messages `render` makes of `turns` for an answer of up to `budget` tokens within a `window`-token context
    (`None`: no limit), and how many of the oldest turns they leave out: two at a time, a message and its answer;
    never the greeting or the turns being answered (`render` adds the system text). `count` gives a prompt's tokens.

    >>> turns = [{"role": r, "content": "word " * 10} for r in ("user", "assistant", "user")]
    >>> render = lambda kept: [{"role": "system", "content": "Po."}, *kept]
    >>> count = lambda messages: sum(len(m["content"].split()) for m in messages)
    >>> messages, dropped = fit_to_window(turns, render, count, budget=5, window=20)
    >>> dropped, [m["role"] for m in messages]
    (2, ['system', 'user'])

    Raises:
        `ContextWindowError`: even with every earlier turn left out, the prompt and the answer do not fit.
    """
    messages = render(turns)
    if window is None:
        return messages, 0
    start = 1 if turns and turns[0]["role"] == "assistant" else 0  # the greeting stays
    answered = max((i for i, turn in enumerate(turns) if turn["role"] == "user"), default=len(turns))
    dropped = 0
    while (tokens := count(messages)) + budget > window:
        if start + dropped + 2 > answered:
            raise ContextWindowError(
                f"the prompt takes {tokens} tokens and the answer up to {budget} more: over the "
                f"{window}-token context window with every earlier turn left out; shorten the "
                "message, lower max_new_tokens or raise --context_window"
            )
        dropped += 2
        messages = render(turns[:start] + turns[start + dropped :])
    return messages, dropped


def count_prompt_tokens(client: ChatClient, messages: list[dict]) -> int:
    """The prompt length of `messages` in tokens: exact for a local model, estimated for an endpoint."""
    if isinstance(client, OpenAIChatClient):
        return sum(approx_tokens(message["content"]) + 4 for message in messages)  # + the template's markers
    return len(prompt_ids(client, messages))


def model_window(client: ChatClient) -> int | None:
    """A local model's context window (`max_position_embeddings`, llama.cpp's `n_ctx`); `None` for an endpoint,
    which does not say."""
    from rolellm.clients.llamacpp_backend import LlamaCppChatClient

    if isinstance(client, OpenAIChatClient):
        return None
    if isinstance(client, LlamaCppChatClient):
        return client.n_ctx
    return getattr(client.model.config, "max_position_embeddings", None)


def prompt_ids(client, messages: list[dict]) -> list[int]:
    """The token ids a local model answers `messages` from; messages ending with an assistant turn are continued
    (the prompt of that turn, then its text)."""
    if messages[-1]["role"] != "assistant":
        return client.encode_prompt(messages)
    started = client.tokenizer(messages[-1]["content"], add_special_tokens=False)["input_ids"]
    return client.encode_prompt(messages[:-1]) + started


def stream_answer(
    client: ChatClient,
    messages: list[dict],
    max_new_tokens: int = 256,
    temperature: float = 0.7,
    top_p: float = 1.0,
    seed: int = 0,
    finish: dict | None = None,
) -> Iterator[str]:
    """Stream the answer to `messages` as text pieces: from a local model (`TextIteratorStreamer`, generation in a
    thread) or an endpoint (`stream=True`). Nothing is cached: a chat is not a benchmark run. Messages that end with
    an assistant turn ask for its continuation (a local model goes on from its text; an endpoint is sent it last,
    which llama.cpp's server and others take as the start of the answer).

    `finish` (a dict), when given, receives `finish["reason"]` once the stream ends: `"length"` for an answer that
    stopped at `max_new_tokens`, else `"stop"`.

    Raises:
        `EndpointError`: the endpoint cannot be reached or refuses the request (the message says which and why).
    """
    from rolellm.clients.llamacpp_backend import LlamaCppChatClient

    finish = {} if finish is None else finish
    if isinstance(client, OpenAIChatClient):
        yield from _stream_endpoint(client, messages, max_new_tokens, temperature, top_p, seed, finish)
    elif isinstance(client, LlamaCppChatClient):
        yield from client.stream(prompt_ids(client, messages), max_new_tokens, temperature, top_p, seed, finish)
    else:
        yield from _stream_local(client, messages, max_new_tokens, temperature, top_p, seed, finish)


def _stream_endpoint(client, messages, max_new_tokens, temperature, top_p, seed, finish) -> Iterator[str]:
    import openai

    api = openai.OpenAI(api_key=client._api_key, base_url=client.base_url, timeout=client.timeout,
                        max_retries=min(client.max_retries, CHAT_RETRIES))  # fmt: skip
    if client.dialect is None:
        client.dialect = client.learn_dialect()
    try:
        raw = api.chat.completions.with_raw_response.create(
            model=client.model, messages=messages, max_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
            seed=seed, stream=True, extra_body=DIALECT_SETTINGS.get(client.dialect),
        )  # fmt: skip
        if "text/event-stream" not in raw.headers.get("content-type", ""):
            # a server that ignores `stream=True` answers once, as a plain completion
            yield _plain_answer(client, raw.http_response, finish)
            return
        for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].finish_reason:
                finish["reason"] = chunk.choices[0].finish_reason
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content
    except openai.APIConnectionError as error:
        raise EndpointError(f"{client.base_url} cannot be reached ({error.__cause__ or error})") from error
    except openai.APIStatusError as error:  # in the words of the batch client's errors, the server's message
        what = "refused the request for" if error.status_code < 500 else "answered with an error to"
        raise EndpointError(
            f"{client.base_url} {what} model {client.model!r}: HTTP {error.status_code} {server_message(error)}"
            f"{route_hint(client.base_url, error.status_code)}"
        ) from error


def _plain_answer(client, response, finish) -> str:
    response.read()  # the body of a response opened as a stream
    try:
        choice = response.json()["choices"][0]
        finish["reason"] = choice.get("finish_reason")
        return choice["message"]["content"] or ""
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise EndpointError(
            f"{client.base_url} answered a streamed request with neither events nor a completion: "
            f"{response.text[:200]!r}"
        ) from error


def _stream_local(client, messages, max_new_tokens, temperature, top_p, seed, finish) -> Iterator[str]:
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

    model, tokenizer = client.model, client.tokenizer
    input_ids = torch.tensor([prompt_ids(client, messages)], device=model.device)
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    stop = threading.Event()  # set when the reader stops early (Ctrl-C, a closed UI stream): generation stops too
    last = {}

    class StopWhenAsked(StoppingCriteria):
        def __call__(self, ids, scores, **kwargs):
            last.update(length=ids.shape[1], token=int(ids[0, -1]))
            return torch.full((ids.shape[0],), stop.is_set(), dtype=torch.bool, device=ids.device)

    sampling = (
        {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {"do_sample": False}
    )
    failure = []
    devices = [model.device.index or 0] if model.device.type != "cpu" else []

    def generate():
        try:  # seeded in a private random stream: the caller's global RNG state is left as it was
            with torch.no_grad(), torch.random.fork_rng(devices=devices, device_type=model.device.type):
                torch.manual_seed(seed)
                model.generate(
                    input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
                    eos_token_id=client.stop_ids, pad_token_id=client.pad_id, streamer=streamer,
                    stopping_criteria=StoppingCriteriaList([StopWhenAsked()]), **sampling,
                )  # fmt: skip
        except BaseException as error:  # noqa: BLE001 - handed to the reading thread, which raises it
            failure.append(error)
            streamer.end()

    thread = threading.Thread(target=generate, daemon=True)
    thread.start()
    try:
        yield from streamer
    finally:
        stop.set()
        thread.join()
    if failure:
        raise failure[0]
    spent = last.get("length", input_ids.shape[1]) - input_ids.shape[1]
    finish["reason"] = "length" if spent >= max_new_tokens and last.get("token") not in client.stop_ids else "stop"
