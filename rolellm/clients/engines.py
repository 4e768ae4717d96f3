"""The optional inference engines and the versions rolellm supports, checked before a run starts.

`--backend vllm` needs vLLM, `--backend ray` needs Ray Data, `--backend llamacpp` (and `rolellm export --gguf` to a
quantized type) llama-cpp-python; all are optional extras (`pip install "rolellm[vllm]"`, `"rolellm[ray]"`,
`"rolellm[llamacpp]"`). `require_engine` imports the engine only after checking that it is installed at a
supported version (as lm-evaluation-harness and lighteval gate their backends), so a missing or unsupported engine is
one line naming the extra and the versions, exit code 2 in the CLI, instead of an `ImportError` from deep inside a
run.

>>> ENGINES["vllm"].extra, str(ENGINES["vllm"].versions)
('vllm', '<1,>=0.12')
"""

import importlib
import importlib.metadata
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version


@dataclass(frozen=True)
class Engine:
    """One optional engine: its distribution, the module imported, the rolellm extra and the versions supported."""

    distribution: str
    module: str
    extra: str
    versions: SpecifierSet
    why: str  # what sets the lower bound


# The ranges are the ones the code is written against: vLLM 0.12 removed the `guided_*` sampling parameters for
# `StructuredOutputsParams`; Ray 2.60 is the release whose `ray.data.llm.build_processor` and
# `vLLMEngineProcessorConfig` (and streaming generator tasks, for the HTTP mode) the Ray backend was tested with
# (`build_llm_processor` is gone); llama-cpp-python 0.3.36 is the release whose llama.cpp reads the files its own
# source's converter writes (`rolellm.training.gguf_export`). The same ranges
# are the extras' pins in setup.cfg (`tests/test_engines.py` checks they agree).
ENGINES = {
    "vllm": Engine("vllm", "vllm", "vllm", SpecifierSet(">=0.12,<1"), "structured outputs (StructuredOutputsParams)"),
    "ray": Engine("ray", "ray.data.llm", "ray", SpecifierSet(">=2.60,<3"), "ray.data.llm.build_processor"),
    "llamacpp": Engine(
        "llama-cpp-python",
        "llama_cpp",
        "llamacpp",
        SpecifierSet(">=0.3.36,<0.4"),
        "the llama.cpp its converter matches",
    ),
}


class EngineUnavailable(ImportError):
    """An optional engine is missing or at a version rolellm does not support (exit code 2 in the CLI)."""


def engine_version(name: str) -> Version | None:
    """The installed version of engine `name`, or `None` when it is not installed."""
    try:
        return Version(importlib.metadata.version(ENGINES[name].distribution))
    except importlib.metadata.PackageNotFoundError:
        return None


def require_engine(name: str, flag: str | None = None, module: str | None = None):
    """Import engine `name` (`"vllm"`, `"ray"` or `"llamacpp"`) after checking its version; the imported module.

    Args:
        name (`str`): a key of `ENGINES`.
        flag (`str`, *optional*): what asked for it, for the message; defaults to `--backend {name}`.
        module (`str`, *optional*): the module to import; defaults to the engine's (`ENGINES[name].module`). Ray's
            HTTP mode needs only `ray` itself, not Ray Data's LLM processors (1.5 s more to import).

    Raises:
        `EngineUnavailable`: the engine is not installed, or its version is outside `ENGINES[name].versions`; the
            message names the extra to install and the versions supported.
    """
    engine = ENGINES[name]
    flag = flag or f"--backend {name}"
    wanted = f'{engine.distribution}{engine.versions} (pip install "rolellm[{engine.extra}]")'
    version = engine_version(name)
    if version is None:
        raise EngineUnavailable(f"{flag} needs {wanted}; it is not installed")
    if version not in engine.versions:
        raise EngineUnavailable(f"{flag} needs {wanted}; {engine.distribution} {version} is installed")
    try:
        return importlib.import_module(module or engine.module)
    except ImportError as error:  # installed but broken (a missing CUDA library, a wheel for another platform)
        raise EngineUnavailable(
            f"{flag}: {engine.distribution} {version} is installed but fails to import: {error}"
        ) from None


def engine_arguments(config, names) -> tuple[str, dict]:
    """The model and the arguments of an engine backend (`VLLMChatClient`, `RayChatClient`) from a `ClientConfig`: the
    fields `names` as they are, and what is decided beyond them. For a model whose weights are run, the engine is
    checked first (`require_engine`), then the model must be there (`check_model_source`: a GGUF file stands for its
    cached folder), and `keep_think` defaults to what the checkpoint recorded (`resolve_keep_think`)."""
    from rolellm.clients.inference_settings import resolve_keep_think
    from rolellm.clients.loading import check_model_source

    if config.runs_weights:  # an endpoint's client (Ray's HTTP mode) checks what it needs itself
        require_engine(config.backend)
    model = check_model_source(config.model, "--model") if config.runs_weights else config.model
    return model, {"keep_think": resolve_keep_think(config), **{name: getattr(config, name) for name in names}}
