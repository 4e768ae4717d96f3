"""`rolellm export CKPT --gguf TYPE`: a LoRA checkpoint trained from the embedded SmolLM2-135M-Instruct (one step of
`rolellm train` on the slice's Chinese role rows) goes through llama.cpp's own converter to one GGUF file carrying the
trained chat template, with a SillyTavern card per role whose system prompt is the trained system text; and, where
llama-cpp-python is installed, the file answers in llama.cpp as the merged model does in transformers (teacher-forced
next tokens and log-probabilities, greedy answers; the figures are printed with `pytest -s`). The inputs it refuses
are one line each, exit 2, with nothing written."""

import json
import shutil

import pytest
from fixtures.commands import run_command

from rolellm.clients.engines import engine_version
from rolellm.clients.gguf import GGUFError, embedded_model_file
from rolellm.roles.character_card import read_character_card
from rolellm.roles.resolve import load_profiles
from rolellm.scripts import cli
from rolellm.testing.gguf_roundtrip import (
    ROLE,
    compare_in_llama_cpp,
    format_figures,
    one_step_training_argv,
    role_chats,
    role_rows,
    transformers_reference,
)
from rolellm.training.gguf_export import SOURCE_ENV, find_converter
from rolellm.training.sillytavern import PROMPT_FIELDS


try:
    SMOLLM2 = embedded_model_file()
except GGUFError as error:
    pytest.skip(f"the embedded real model is not installed: {error}", allow_module_level=True)
pytest.importorskip("gguf", reason="reading and writing .gguf files needs the gguf package: pip install gguf")
pytest.importorskip("sentencepiece", reason="llama.cpp's converter imports sentencepiece: pip install sentencepiece")
try:
    find_converter()
except GGUFError as error:
    pytest.skip(f"llama.cpp's converter is not here ({error})", allow_module_level=True)
pytestmark = pytest.mark.slow  # one training step and a conversion of the 135M model (about 30 s)

NO_LLAMA_CPP = 'needs llama-cpp-python (pip install "rolellm[llamacpp]")'
needs_llama_cpp = pytest.mark.skipif(engine_version("llamacpp") is None, reason=NO_LLAMA_CPP)
PROMPTS = 2  # role prompts of the round trip (bench/bench_gguf_export.py: more, and every type)
MAX_NEW_TOKENS = 16


@pytest.fixture(scope="module")
def trained(tmp_path_factory, slice_data_dir):
    """`rolellm train` with LoRA, one step, from the embedded model's GGUF file."""
    out = tmp_path_factory.mktemp("trained") / "rolesmol"
    code, _, err = run_command(one_step_training_argv(SMOLLM2, slice_data_dir / "rolebench", out))
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """The f16 GGUF folder, through the command."""
    out = tmp_path_factory.mktemp("exported") / "rolesmol-gguf"
    code, printed, err = run_command(["export", str(trained), "--gguf", "f16", "--output_dir", str(out)])
    assert code == 0, err
    return {"folder": out, "printed": printed}


@pytest.fixture(scope="module")
def rows(slice_data_dir):
    return role_rows(slice_data_dir / "rolebench", PROMPTS)


def test_the_gguf_carries_the_trained_template_and_each_role_a_card_of_its_trained_prompt(trained, exported, rows):
    from gguf import GGUFReader

    from rolellm.roles.prompts import to_role_messages

    folder = exported["folder"]
    [gguf_file] = folder.glob("*.gguf")
    assert gguf_file.name == "rolesmol.F16.gguf" and f"to {gguf_file} (GGUF f16)" in exported["printed"]
    field = GGUFReader(gguf_file).fields["tokenizer.chat_template"]
    assert bytes(field.parts[field.data[0]]).decode() == (trained / "chat_template.jinja").read_text(encoding="utf-8")
    assert not [path for path in folder.parent.iterdir() if path.name.startswith(".")]  # no staging folder left
    profiles = load_profiles(trained / "role_profiles.jsonl")
    cards = sorted(folder.glob("*.card.png"))
    assert [path.name for path in cards] == sorted(f"{name}.card.png" for name in profiles)
    card = read_character_card(folder / f"{ROLE}.card.png").extra["character_card"]
    assert card["spec"] == "chara_card_v3" and card["data"]["name"] == ROLE
    # the system text of the training samples, exactly, and no other text SillyTavern would add to a prompt
    [sample] = to_role_messages(rows[0], profiles[ROLE])
    assert card["data"]["system_prompt"] == sample[0]["content"] and sample[0]["role"] == "system"
    assert all(card["data"][name] == "" for name in PROMPT_FIELDS)
    assert {"role_profiles.jsonl", "rolellm_inference.json"} <= {path.name for path in folder.iterdir()}


@pytest.fixture(scope="module")
def reference(trained, rows):
    """The merged model in transformers (float32) on the role's chats (system, question, reference answer), once."""
    return transformers_reference(trained, role_chats(trained, rows), MAX_NEW_TOKENS)


@needs_llama_cpp
def test_the_f16_gguf_answers_in_llama_cpp_as_the_merged_model_in_transformers(exported, reference):
    """The quantized types' figures (`q8_0`, `q4_k_m`) are bench/bench_gguf_export.py's, in docs/sillytavern.md."""
    [gguf_file] = exported["folder"].glob("*.gguf")
    figures = compare_in_llama_cpp(gguf_file, reference)
    print("\n" + format_figures("f16", figures))
    assert figures["same"] >= 0.97 * figures["positions"] and figures["positions"] >= 50
    assert figures["top10_gap"] < 0.1  # float16 weights: 0.051 at most over 553 answer positions measured
    assert figures["greedy"] >= figures["prompts"] - 1


# --- what it refuses ------------------------------------------------------------------------------------------------


def assert_refused(argv, message, out_dir, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.splitlines() == [err.strip()] and "Traceback" not in err, err
    assert message in err, err
    assert not out_dir.exists() or not any(out_dir.iterdir())
    assert not [path for path in out_dir.parent.iterdir() if path.name.startswith(f".{out_dir.name}")]


STAND_IN_CONVERTER = """import sys
print("INFO:hf-to-gguf:Loading model: " + sys.argv[1])
print("Traceback (most recent call last):", file=sys.stderr)
print('  File "convert_hf_to_gguf.py", line 1, in <module>', file=sys.stderr)
print("NotImplementedError: Architecture 'FooForCausalLM' not supported!", file=sys.stderr)
print("ERROR:hf-to-gguf:Model FooForCausalLM is not supported", file=sys.stderr)
sys.exit(1)
"""


def test_a_failing_converter_is_its_last_error_line(tiny_model_path, tmp_path, capsys):
    """rolellm's side of a converter that refuses: a stand-in `convert_hf_to_gguf.py` (plain Python, no torch to
    import) that fails as llama.cpp's does on an architecture it does not know: one line, its last error, exit 2,
    nothing written. llama.cpp's own converter refusing is the `exhaustive` test below."""
    source = tmp_path / "llama.cpp"
    source.mkdir()
    (source / "convert_hf_to_gguf.py").write_text(STAND_IN_CONVERTER, encoding="utf-8")
    out = tmp_path / "out"
    assert_refused(["export", str(tiny_model_path), "--gguf", "f16", "--output_dir", str(out), "--llama_cpp_source",
                    str(source)], "llama.cpp's converter (convert_hf_to_gguf.py) cannot convert it: Model "
                   "FooForCausalLM is not supported", out, capsys)  # fmt: skip


@pytest.mark.exhaustive  # make test: the failing stand-in converter above (this one imports torch: 6 s of CPU)
def test_an_architecture_the_converter_does_not_know_is_one_line(tiny_model_path, tmp_path, capsys):
    model = tmp_path / "foo"
    shutil.copytree(tiny_model_path, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "architectures": ["FooForCausalLM"]}))
    out = tmp_path / "out"
    assert_refused(["export", str(model), "--gguf", "f16", "--output_dir", str(out)],
                   "llama.cpp's converter (convert_hf_to_gguf.py) cannot convert it: Model FooForCausalLM is not "
                   "supported", out, capsys)  # fmt: skip


def test_an_output_folder_that_exists_is_refused_before_any_conversion(trained, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code = cli.main(["export", str(trained), "--gguf", "f16", "--output_dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "exists and is not empty; pass a new --output_dir" in err and len(err.splitlines()) == 1
    assert [path.name for path in out.iterdir()] == ["keep.txt"]


def test_no_converter_names_the_archive_to_fetch(trained, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(SOURCE_ENV)
    out = tmp_path / "out"
    assert_refused(["export", str(trained), "--gguf", "q8_0", "--output_dir", str(out)],
                   "--gguf needs llama.cpp's converter (convert_hf_to_gguf.py): pass --llama_cpp_source", out, capsys)  # fmt: skip
    assert_refused(["export", str(trained), "--gguf", "q8_0", "--output_dir", str(out), "--llama_cpp_source",
                    str(tmp_path)], f"--llama_cpp_source {tmp_path}: holds no convert_hf_to_gguf.py", out, capsys)  # fmt: skip


def test_a_quantized_type_without_llama_cpp_python_names_the_extra(trained, tmp_path, monkeypatch, capsys):
    """A llama-cpp-python of another version stands for a missing one (`require_engine` checks the version of the
    first distribution on `sys.path` before importing it)."""
    fake = tmp_path / "site"
    (fake / "llama_cpp_python-0.1.0.dist-info").mkdir(parents=True)
    (fake / "llama_cpp_python-0.1.0.dist-info" / "METADATA").write_text("Name: llama-cpp-python\nVersion: 0.1.0\n")
    monkeypatch.syspath_prepend(str(fake))
    out = tmp_path / "out"
    assert_refused(["export", str(trained), "--gguf", "q4_k_m", "--output_dir", str(out)],
                   'needs llama-cpp-python<0.4,>=0.3.36 (pip install "rolellm[llamacpp]")', out, capsys)  # fmt: skip
    assert not out.exists()
