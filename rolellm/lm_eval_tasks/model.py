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
"""

from rolellm.clients.config import ClientConfig, make_client


def harness_model(config: ClientConfig, **hflm_kwargs):
    """An `lm_eval.models.huggingface.HFLM` over the local model `config` describes, prompted and stopped exactly as
    `rolellm evaluate` with the same client options.

    Args:
        config (`ClientConfig`): a local model (`backend="local"`): its folder or Hub id, `chat_template`,
            `keep_think`, `device`, `dtype`, ... as `rolellm evaluate` takes them.
        **hflm_kwargs: the other arguments of `HFLM` (`batch_size`, `max_length`, ...).

    Returns:
        `HFLM`, for `lm_eval.simple_evaluate(model=..., apply_chat_template=True)`.
    """
    from lm_eval.models.huggingface import HFLM

    client = make_client(config)
    if client.chat_template is not None:  # a `chat_template` option: lm-eval renders with the tokenizer's template
        client.tokenizer.chat_template = client.chat_template
    client.model.generation_config.eos_token_id = list(client.stop_ids)
    return HFLM(pretrained=client.model, tokenizer=client.tokenizer, **hflm_kwargs)
