"""Self-contained checkpoints: LoRA, QLoRA and resized-vocabulary adapters load in fresh processes, `rolellm export
--merge` writes a full model with the same greedy tokens, `rolellm evaluate` reads an adapter folder."""

import copy
import json
import logging
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch
from fixtures.folder_hub import FolderHub
from fixtures.mini_release import write_mini_release
from test_trainer import PROFILES, ROWS, config, lora
from transformers import AutoTokenizer

from rolellm import load_profiles
from rolellm.clients.local import LocalChatClient
from rolellm.encoding.chat_template import ROLE_CHAT_TEMPLATE
from rolellm.scripts import cli
from rolellm.training.trainer import RoCITTrainer


GENERATE = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
from rolellm import encode_chat
from rolellm.clients.loading import load_model_and_tokenizer

messages = [{"role": "system", "content": "You are Jack Sparrow."}, {"role": "user", "content": "Who are you?"}]
out = {}
for key, folder in json.loads(sys.argv[1]).items():
    kind = key.rsplit("/", 1)[-1]  # "<group>/<kind>": several groups of folders in one process
    if kind == "merged":  # plain transformers, nothing of rolellm in the loading
        model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
        generator = pipeline("text-generation", model=folder)
    elif kind in ("pipeline", "alone"):  # transformers loads the base named in adapter_config.json, then the adapter
        generator = pipeline("text-generation", model=folder, **({"tokenizer": folder} if kind == "pipeline" else {}))
        model, tokenizer = generator.model, generator.tokenizer
    else:
        model, tokenizer = load_model_and_tokenizer(folder)
        generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    ids = encode_chat(tokenizer, messages, add_generation_prompt=True)["input_ids"]
    tokens = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)[0, len(ids):].tolist()
    text = generator(messages, max_new_tokens=4, do_sample=False)[0]["generated_text"][-1]
    out[key] = {"tokens": tokens, "pipeline_role": text["role"], "template": tokenizer.chat_template}
print(json.dumps(out))
"""


def run_fresh(folders: dict) -> dict:
    """Generate in a new Python process from each folder; returns key -> tokens, pipeline answer, template (a key is
    `adapter`, `merged`, `pipeline` (`pipeline(model=DIR, tokenizer=DIR)`) or `alone` (`pipeline(model=DIR)`), or
    `<group>/` and one of these)."""
    done = subprocess.run([sys.executable, "-c", GENERATE, json.dumps({k: str(v) for k, v in folders.items()})],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def base_without_chatml(folder):
    """A tiny Llama whose tokenizer lacks the ChatML tokens: the role template adds them and resizes the model."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from rolellm.testing.models import build_tiny_llama

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # the vocabulary itself, not added tokens
    backend = Tokenizer(models.BPE(vocab={byte: i for i, byte in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="~", pad_token="!")
    return build_tiny_llama(folder, tokenizer=tokenizer)


def train_adapter(folder, base, **kwargs):
    args = config(folder, max_steps=3, per_device_train_batch_size=2, save_strategy="steps", save_steps=3)
    trainer = RoCITTrainer(str(base), args=args, train_dataset=datasets.Dataset.from_list(ROWS), profiles=PROFILES,
                           peft_config=lora(), **kwargs)  # fmt: skip
    trainer.train()
    trainer.save_model()
    return folder / "out"


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    return write_mini_release(tmp_path_factory.mktemp("mini-release"))


@pytest.fixture(scope="module")
def cli_lora(tmp_path_factory, tiny_model_path, mini):
    """`rolellm train` with LoRA on the tiny model and the mini release's `zh` config, saving checkpoint-2; with
    `--keep_think` (the ChatML template has no think blocks: the same tokens, a recorded setting)."""
    out = tmp_path_factory.mktemp("cli") / "lora"
    code = cli.main([
        "train", "--model_name_or_path", str(tiny_model_path), "--data_dir", str(mini), "--dataset_configs", "zh",
        "--output_dir", str(out), "--use_peft", "--lora_r", "8", "--lora_target_modules", "q_proj", "v_proj",
        "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "2", "--use_cpu", "--bf16", "false",
        "--report_to", "none", "--activation_checkpointing", "false", "--per_device_train_batch_size", "2",
        "--disable_tqdm", "true", "--learning_rate", "0.01", "--keep_think", "true",
    ])  # fmt: skip
    assert code == 0
    return out


@pytest.fixture(scope="module")
def resized_lora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("resized")
    return train_adapter(folder, base_without_chatml(folder / "base"))


@pytest.fixture(scope="module")
def qlora(tmp_path_factory, tiny_model_path):
    from transformers import BitsAndBytesConfig

    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                      bnb_4bit_compute_dtype=torch.float32)  # fmt: skip
    return train_adapter(tmp_path_factory.mktemp("qlora"), tiny_model_path, quantization_config=quantization)


@pytest.mark.parametrize("name", ["lora", "lora/checkpoint-2"])
def test_every_checkpoint_holds_tokenizer_template_profiles_and_card(cli_lora, name):
    folder = cli_lora.parent / name
    assert (folder / "adapter_model.safetensors").is_file()
    assert (folder / "chat_template.jinja").read_text() == ROLE_CHAT_TEMPLATE
    assert AutoTokenizer.from_pretrained(folder).chat_template == ROLE_CHAT_TEMPLATE
    profiles = load_profiles(folder)  # the roles of the `zh` config trained on, not every profile of the release
    assert sorted(profiles) == ["说书人", "铁匠老周"] and profiles["说书人"].dialogue
    assert load_profiles(folder / "role_profiles.jsonl") == profiles
    card = (folder / "README.md").read_text()
    assert "configs `zh` (8 rows)" in card and "optimizer step(s)" in card


def test_a_checkpoint_records_its_inference_settings_and_the_local_client_uses_them(cli_lora, caplog):
    from rolellm.clients.config import ClientConfig, make_client
    from rolellm.clients.inference_settings import resolve_card_extras, resolve_keep_think
    from rolellm.scripts.chat import load_client

    recorded = json.loads((cli_lora / "rolellm_inference.json").read_text())
    assert recorded == {"keep_think": True, "chat_template_family": "rolellm-chatml", "card_extras": False}
    assert json.loads((cli_lora / "checkpoint-2" / "rolellm_inference.json").read_text()) == recorded
    client = make_client(ClientConfig(str(cli_lora), device="cpu", progress=False))  # keep_think not set
    assert client.keep_think is True
    assert load_client(ClientConfig(str(cli_lora), device="cpu")).keep_think is True  # rolellm chat's loading
    with caplog.at_level(logging.INFO, logger="rolellm.clients.config"):
        overridden = make_client(ClientConfig(str(cli_lora), keep_think=False, device="cpu", progress=False))
    assert overridden.keep_think is False
    [line] = [r.getMessage() for r in caplog.records if "overrides" in r.getMessage()]
    assert line == f"keep_think=False overrides the keep_think=True {cli_lora} was trained with"
    caplog.clear()  # a template of another family than the trained one is logged too, once, by every backend
    with caplog.at_level(logging.INFO, logger="rolellm.clients.config"):
        make_client(ClientConfig(str(cli_lora), chat_template="{{ messages }}", device="cpu", progress=False))
        assert resolve_keep_think(ClientConfig(str(cli_lora), chat_template="chatml", backend="vllm")) is True
    [line] = [r.getMessage() for r in caplog.records if "overrides" in r.getMessage()]
    assert line == f"chat_template=custom overrides the rolellm-chatml template {cli_lora} was trained with"
    # a chat with the checkpoint gets the conversation it was trained on; asking for a card's extras says so
    assert resolve_card_extras(ClientConfig(str(cli_lora))) is False
    assert resolve_card_extras(ClientConfig("gpt-4o-mini", base_url="http://127.0.0.1:9/v1")) is True
    with caplog.at_level(logging.INFO, logger="rolellm.clients.config"):
        assert resolve_card_extras(ClientConfig(str(cli_lora), card_extras=True)) is True
    assert f"card_extras=True: {cli_lora} was trained without a card's example dialogue" in caplog.text


def test_resized_adapter_saves_the_new_embedding_rows(resized_lora):
    from safetensors import safe_open

    with safe_open(resized_lora / "adapter_model.safetensors", "pt") as weights:
        names = [key for key in weights.keys() if "lora_" not in key]  # noqa: SIM118
        shapes = {key: weights.get_slice(key).get_shape() for key in names}
    vocab = len(AutoTokenizer.from_pretrained(resized_lora))
    assert any("trainable_tokens_delta" in key and shape[0] == 2 for key, shape in shapes.items())
    assert any("lm_head" in key and shape[0] == vocab for key, shape in shapes.items())
    assert json.loads((resized_lora / "generation_config.json").read_text())["eos_token_id"][-1] == vocab - 1


@pytest.fixture(scope="module")
def merged_exports(resized_lora, qlora, tmp_path_factory):
    """`rolellm export --merge` of the resized adapter and the QLoRA adapter: name -> (adapter, merged folder)."""
    folder = tmp_path_factory.mktemp("merged")
    exports = {}
    for name, adapter in (("resized", resized_lora), ("qlora", qlora)):
        merged = folder / f"{name}-merged"
        assert cli.main(["export", str(adapter), "--merge", "--output_dir", str(merged)]) == 0
        exports[name] = (adapter, merged)
    return exports


@pytest.fixture(scope="module")
def instruct_lora(tmp_path_factory, tiny_tokenizer):
    """An adapter trained on a base whose tokenizer has a chat template already (an instruct model)."""
    from rolellm.testing.models import build_tiny_llama

    folder = tmp_path_factory.mktemp("instruct")
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = ROLE_CHAT_TEMPLATE
    return train_adapter(folder, build_tiny_llama(folder / "instruct", tokenizer=tokenizer))


@pytest.fixture(scope="module")
def fresh(merged_exports, cli_lora, instruct_lora):
    """One new Python process generating from every folder the fresh-process tests read (one start, not three)."""
    (resized, resized_merged), (qlora_adapter, qlora_merged) = merged_exports["resized"], merged_exports["qlora"]
    folders = {"resized": {"adapter": resized, "merged": resized_merged},
               "quantized": {"adapter": qlora_adapter, "merged": qlora_merged, "pipeline": qlora_adapter},
               "cli": {"adapter": cli_lora, "pipeline": cli_lora},
               "instruct": {"alone": instruct_lora}}  # fmt: skip
    flat = run_fresh({f"{group}/{kind}": path for group, kinds in folders.items() for kind, path in kinds.items()})
    return {group: {kind: flat[f"{group}/{kind}"] for kind in kinds} for group, kinds in folders.items()}


@pytest.mark.slow
def test_adapter_folders_and_their_merged_export_agree_in_fresh_processes(merged_exports, fresh, resized_lora):
    for name, (_, merged) in merged_exports.items():
        assert not (merged / "adapter_config.json").exists() and (merged / "model.safetensors").is_file()
        assert load_profiles(merged) == PROFILES and (merged / "chat_template.jinja").is_file()
        card = (merged / "README.md").read_text()
        assert "library_name: transformers" in card and "merged into the base model's weights" in card
        assert "AutoPeftModelForCausalLM" not in card
        if name == "qlora":
            assert "QLoRA, the frozen base weights quantized during training; the merged weights are not" in card
    resized, quantized = fresh["resized"], fresh["quantized"]
    assert quantized["pipeline"]["tokens"] == quantized["adapter"]["tokens"]
    for result in (resized, quantized):
        assert result["adapter"]["tokens"] == result["merged"]["tokens"] and len(result["merged"]["tokens"]) > 0
        assert result["adapter"]["template"] == result["merged"]["template"] == ROLE_CHAT_TEMPLATE
        assert result["merged"]["pipeline_role"] == "assistant"  # pipeline(model=merged folder) alone
    # the added tokens exist only in the adapter's tokenizer: ids past the base vocabulary were generated from
    vocab = len(AutoTokenizer.from_pretrained(resized_lora.parent / "base"))
    assert len(AutoTokenizer.from_pretrained(merged_exports["resized"][1])) == vocab + 2


@pytest.mark.slow
def test_pipeline_loads_an_adapter_folder_with_its_tokenizer(fresh):
    result = fresh["cli"]
    assert result["pipeline"]["tokens"] == result["adapter"]["tokens"] and result["pipeline"]["tokens"]
    assert result["pipeline"]["template"] == ROLE_CHAT_TEMPLATE and result["pipeline"]["pipeline_role"] == "assistant"


def test_local_chat_client_loads_a_resized_adapter_folder(resized_lora):
    client = LocalChatClient(resized_lora, max_new_tokens=4, progress=False)
    [result] = client.generate([[{"role": "user", "content": "Ahoy! <|im_start|>"}]])
    assert result.ok and result.usage["completion_tokens"] <= 4
    assert client.tokenizer.chat_template == ROLE_CHAT_TEMPLATE


@pytest.mark.slow
def test_rolellm_evaluate_reads_an_adapter_folder(cli_lora, mini, tmp_path):
    code = cli.main(
        ["evaluate", "--model_name_or_path", str(cli_lora), "--dataset_name", "zh",
         "--data_dir", str(mini), "--output_dir", str(tmp_path / "eval"), "--max_new_tokens", "6", "--device", "cpu"]
    )  # fmt: skip
    assert code == 0
    records = [json.loads(line) for line in (tmp_path / "eval" / "generations.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(isinstance(r["prediction"], str) for r in records)


def test_export_refuses_what_it_cannot_do_in_one_line(cli_lora, tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    assert cli.main(["export", str(tmp_path), "--merge", "--output_dir", str(tmp_path / "x")]) == 2
    assert cli.main(["export", str(cli_lora), "--merge", "--output_dir", str(tmp_path / "taken")]) == 2
    moved = tmp_path / "moved"
    subprocess.run(["cp", "-r", str(cli_lora), str(moved)], check=True)
    adapter_config = json.loads((moved / "adapter_config.json").read_text())
    adapter_config["base_model_name_or_path"] = "nobody/no-such-model"  # offline in the tests: not loadable
    (moved / "adapter_config.json").write_text(json.dumps(adapter_config))
    assert cli.main(["export", str(moved), "--merge", "--output_dir", str(tmp_path / "y")]) == 3
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(line.startswith("rolellm export: ") for line in errors)
    assert "not a model checkpoint" in errors[0] and "exists and is not empty" in errors[1]
    assert "base_model_name_or_path) nobody/no-such-model" in errors[2] and "not in the Hub cache" in errors[2]
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_export_without_merge_keeps_the_adapter_drops_trainer_state_and_pushes(cli_lora, tmp_path):
    from rolellm.scripts import export

    api = FolderHub(tmp_path / "remote")
    args = export.make_parser().parse_args([str(cli_lora / "checkpoint-2"), "--output_dir", str(tmp_path / "out"),
                                            "--push_to_hub", "me/rolellama-tiny", "--private"])  # fmt: skip
    assert export.main(args, api=api) == 0
    names = sorted(path.name for path in (tmp_path / "remote").iterdir())
    assert "adapter_model.safetensors" in names and "role_profiles.jsonl" in names and "README.md" in names
    assert not {"optimizer.pt", "scheduler.pt", "trainer_state.json", "training_args.bin"} & set(names)
    assert [call[0] for call in api.calls] == ["create_repo", "upload_folder"]
    assert api.calls[0][1] == "me/rolellama-tiny" and api.calls[0][2]["private"] is True
    card = (tmp_path / "remote" / "README.md").read_text()
    assert 'folder = snapshot_download("me/rolellama-tiny")' in card
    assert "from huggingface_hub import snapshot_download" in card


@pytest.mark.slow
def test_pipeline_loads_an_adapter_folder_alone_when_the_base_has_the_template(fresh):
    """A base with a chat template (an instruct model) keeps it: `pipeline(model=DIR)` needs nothing else."""
    assert fresh["instruct"]["alone"]["pipeline_role"] == "assistant"


def test_a_full_checkpoint_exports_without_its_trainer_state(tmp_path, tiny_model_path, capsys):
    from transformers import AutoModelForCausalLM

    args = config(tmp_path, max_steps=1, per_device_train_batch_size=2, save_strategy="steps", save_steps=1)
    trainer = RoCITTrainer(str(tiny_model_path), args=args, train_dataset=datasets.Dataset.from_list(ROWS),
                           profiles=PROFILES)  # fmt: skip
    trainer.train()
    checkpoint = tmp_path / "out" / "checkpoint-1"
    assert (checkpoint / "optimizer.pt").is_file() and load_profiles(checkpoint) == PROFILES
    assert cli.main(["export", str(checkpoint), "--merge", "--output_dir", str(tmp_path / "full")]) == 0
    assert f"to {tmp_path / 'full'} (a model)" in capsys.readouterr().out
    names = {path.name for path in (tmp_path / "full").iterdir()}
    assert {
        "model.safetensors",
        "role_profiles.jsonl",
        "chat_template.jinja",
        "rolellm_inference.json",
        "README.md",
    } <= names
    assert not names & {"optimizer.pt", "scheduler.pt", "trainer_state.json", "training_args.bin"}
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "full")
    for name, parameter in trainer.model.named_parameters():
        torch.testing.assert_close(model.get_parameter(name), parameter.detach(), rtol=0, atol=0)


def test_an_adapter_whose_base_is_gone_names_the_base(cli_lora, mini, tmp_path, capsys):
    adapter = json.loads((cli_lora / "adapter_config.json").read_text())
    assert Path(adapter["base_model_name_or_path"]).is_absolute()  # recorded so that it resolves from anywhere
    moved = tmp_path / "moved"
    subprocess.run(["cp", "-r", str(cli_lora), str(moved)], check=True)
    adapter["base_model_name_or_path"] = "./tiny-llama"  # a relative path, as an older checkpoint may hold
    (moved / "adapter_config.json").write_text(json.dumps(adapter))
    code = cli.main(["evaluate", "--model", str(moved), "--dataset_name", "zh", "--data_dir", str(mini),
                     "--output_dir", str(tmp_path / "eval"), "--device", "cpu"])  # fmt: skip
    err = capsys.readouterr().err
    assert (
        code == 2 and f"the base model of {moved} (adapter_config.json: base_model_name_or_path) ./tiny-llama" in err
    )
    assert "no such folder" in err and not (tmp_path / "eval" / "results.json").exists()
