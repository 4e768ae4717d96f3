"""Tiny local artefacts for tests, examples and the demo, with no download: `models` (a byte-level BPE tokenizer
trained in seconds, a two-layer Llama saved like a Hub repository, a tokenizer for any real chat template),
`server` (a real chat-completions HTTP server with fault injection) and `data` (where the RoleBench files are)."""
