"""The model side of the RoleBench lm-eval tasks: an lm-eval `HFLM` that answers as `rolellm evaluate` does.

`rolellm evaluate` answers through `rolellm.clients.local.LocalChatClient`: the model and tokenizer loaded by
`make_client` (an adapter checkpoint too, with the settings it recorded), prompts rendered with the chat template,
and generation stopped at the client's `stop_ids` (the generation config's end tokens, the tokenizer's end of text
and the template's end-of-turn token). `harness_model` hands that same model to lm-eval:

- the tokenizer carries the chat template the client uses (a `chat_template` option such as `"chatml"` included), so
  `lm_eval.simple_evaluate(..., apply_chat_template=True)` renders the role's system turn and the question as
  `rolellm evaluate` does;
- the model's generation config ends generation at the client's `stop_ids`: every row of a batch stops at the
  template's end of turn. A task's `until` strings cannot do this: lm-eval cuts them out of the answer decoded without
  special tokens, where an end-of-turn token such as `<|im_end|>` is no longer there, so a row that ended early in a
  batch would keep the next turn the model went on to write.

lm-eval renders a prompt with the tokenizer's `apply_chat_template` and tokenizes the text; `rolellm evaluate` encodes
it with `rolellm.encode_chat`. The two give the same token ids for most templates, but not all: a template that
refuses a system turn (Gemma) makes lm-eval drop the role's instruction, where rolellm folds it into the user turn;
a template that prefills `<think>` (DeepSeek-R1) keeps it in lm-eval's prompt, where rolellm answers without it
unless `keep_think`. `harness_model` renders one probe conversation both ways and refuses a model whose prompts differ,
naming the first difference, since its lm-eval scores would not be `rolellm evaluate`'s.
"""

from rolellm.clients.config import ClientConfig, make_client


PROBE = [
    {"role": "system", "content": "You are Ada, a lighthouse keeper."},
    {"role": "user", "content": "Who are you?"},
]


def harness_model(config: ClientConfig, **hflm_kwargs):
    """An `lm_eval.models.huggingface.HFLM` over the local model `config` describes, prompted and stopped exactly as
    `rolellm evaluate` with the same client options.

    Args:
        config (`ClientConfig`): a local model (`backend="local"`): its folder or Hub id, `chat_template`,
            `keep_think`, `device`, `dtype`, ... as `rolellm evaluate` takes them.
        **hflm_kwargs: the other arguments of `HFLM` (`batch_size`, `max_length`, ...).

    Returns:
        `HFLM`, for `lm_eval.simple_evaluate(model=..., apply_chat_template=True)`.

    Raises:
        `ValueError`: lm-eval would prompt the model with other tokens than `rolellm evaluate` (see above).
    """
    from lm_eval.models.huggingface import HFLM

    client = make_client(config)
    if client.chat_template is not None:  # a `chat_template` option: lm-eval renders with the tokenizer's template
        client.tokenizer.chat_template = client.chat_template
    client.model.generation_config.eos_token_id = list(client.stop_ids)
    lm = HFLM(pretrained=client.model, tokenizer=client.tokenizer, **hflm_kwargs)
    harness_ids = lm.tok_batch_encode([lm.apply_chat_template(PROBE)])[0][0].tolist()
    rolellm_ids = client.encode_prompt(PROBE)
    if harness_ids != rolellm_ids:
        start = next((i for i, (a, b) in enumerate(zip(harness_ids, rolellm_ids)) if a != b), None)
        start = min(len(harness_ids), len(rolellm_ids)) if start is None else start
        raise ValueError(
            f"lm-eval would prompt {config.model} with other tokens than rolellm evaluate (its chat template through "
            f"apply_chat_template): from token {start}, lm-eval sends {lm.tokenizer.decode(harness_ids[start:])!r}, "
            f"rolellm {client.tokenizer.decode(rolellm_ids[start:])!r}; its lm-eval scores would not be rolellm "
            "evaluate's: use rolellm evaluate"
        )
    return lm
