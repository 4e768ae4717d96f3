"""Chat clients with one interface, `generate(requests, parse=None) -> list[ChatResult]`. Modules:

- `base`: `ChatClient`, `ChatRequest`, `ChatResult`, `Usage`, `EndpointError`;
- `openai_compatible`: `OpenAIChatClient` for any OpenAI-compatible endpoint;
- `local`: `LocalChatClient` for a `transformers` model in-process (loads torch and transformers), with `loading`;
- `gguf`: a `.gguf` file as a model, dequantized once into a cached model folder (`resolve_model_name_or_path`);
- `llamacpp_backend`: `LlamaCppChatClient`, a `.gguf` file run by llama.cpp in-process (`--backend llamacpp`);
- `config`: `ClientConfig` and `make_client`;
- `cache`, `budget`: the on-disk cache (a re-run costs nothing, a crash loses nothing), rate limits and estimates;
- `chat_session`: `ChatSession` for `rolellm chat`, over `chat_answer` (`stream_answer`: one answer, fitted to the
  context window and streamed) and `chat_files` (the turns on disk).

Import names from their modules (`from rolellm.clients.openai_compatible import OpenAIChatClient`) or from `rolellm`.
"""
