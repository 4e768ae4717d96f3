"""Prefix sharing inside `RoCITTrainer`: the same training as unpacked samples, in fewer tokens."""

import json
import os
import subprocess

import datasets
import pytest
import torch
from fixtures.prewarmed import TRAINING, prewarmed

from rolellm.roles.resolve import load_profiles
from rolellm.training.config import RoCITConfig
from rolellm.training.trainer import RoCITTrainer


@pytest.fixture(scope="module")
def chinese_rows(rolebench_slice_dir):
    """A fixed sample of the real Chinese RoleBench train rows: 2 general + 1 role-specific rows of 3 roles."""
    from rolellm.data.readers import read_rolebench_jsonl

    root = rolebench_slice_dir / "rolebench-zh"
    rows = read_rolebench_jsonl(root / "general" / "train.jsonl", "general", "zh")
    rows += read_rolebench_jsonl(root / "role_specific" / "train.jsonl", "role_specific", "zh")
    picked, seen = [], {}
    for row in rows:
        key = (row["role"], row["subset"])
        if row["role"] in ("孙悟空", "李白", "华妃") and seen.get(key, 0) < (2 if row["subset"] == "general" else 1):
            seen[key] = seen.get(key, 0) + 1
            picked.append(row)
    return datasets.Dataset.from_list(picked)


@pytest.fixture(scope="module")
def profiles(rolebench_slice_dir):
    return load_profiles(rolebench_slice_dir / "profiles-zh")


def config(tmp_path, **overrides):
    defaults = {
        "output_dir": str(tmp_path / "out"), "use_cpu": True, "bf16": False, "activation_checkpointing": False,
        "optim": "sgd", "learning_rate": 0.5, "max_steps": 3, "logging_steps": 1, "save_strategy": "no",
        "report_to": "none", "disable_tqdm": True, "seed": 0, "dataset_num_proc": None, "max_length": 2048,
    }  # fmt: skip
    return RoCITConfig(**{**defaults, **overrides})


def test_prefix_sharing_trains_like_unpacked_samples(tmp_path, tiny_model_path, chinese_rows, profiles):
    """A few full-batch steps from the same seed reach the same parameters with and without prefix sharing."""
    n = len(chinese_rows)
    plain = RoCITTrainer(
        str(tiny_model_path),
        args=config(
            tmp_path / "plain", prefix_sharing=False, per_device_train_batch_size=n, per_device_eval_batch_size=n
        ),
        train_dataset=chinese_rows,
        profiles=profiles,
    )
    shared_args = config(
        tmp_path / "shared", per_device_train_batch_size=1, gradient_accumulation_steps=2, per_device_eval_batch_size=2
    )
    shared = RoCITTrainer(str(tiny_model_path), args=shared_args, train_dataset=chinese_rows, profiles=profiles)
    rows = shared.train_dataset
    # 9 samples of 3 roles in 2 rows, one of them holding two roles' groups: a step accumulates both rows, as the
    # plain step takes all 9 samples
    assert len(plain.train_dataset) == n == 9 and len(rows) == 2
    assert sorted(len(groups) for groups in rows["prefix_lengths"]) == [1, 2]
    assert sum(len(lengths) for row in rows["sample_lengths"] for lengths in row) == n
    assert sum(map(len, rows["input_ids"])) < sum(map(len, plain.train_dataset["input_ids"])) / 1.4

    plain.train()
    shared.train()
    for (name, a), (_, b) in zip(plain.model.named_parameters(), shared.model.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)
    plain_logs = [h for h in plain.state.log_history if "loss" in h]
    shared_logs = [h for h in shared.state.log_history if "loss" in h]
    for p, s in zip(plain_logs, shared_logs):
        assert s["loss"] == pytest.approx(p["loss"], abs=1e-4)
    # one evaluation batch each: the per-subset losses and the token accuracy agree too (logged train metrics are
    # averages over micro-batches, 2 rows against 1 batch, so they are compared here instead)
    plain_eval = plain.evaluate(chinese_rows)
    shared_eval = shared.evaluate(chinese_rows)
    for key in ("eval_loss", "eval_loss_general", "eval_loss_role_specific", "eval_mean_token_accuracy"):
        assert shared_eval[key] == pytest.approx(plain_eval[key], abs=1e-4), key
    # `num_tokens` counts the real tokens of the rows (TRL would sum the L x L mask entries)
    assert shared_logs[-1]["num_tokens"] == 3 * sum(map(len, rows["input_ids"]))
    assert plain_logs[-1]["num_tokens"] == 3 * sum(map(len, plain.train_dataset["input_ids"]))


@pytest.mark.slow
def test_prefix_sharing_with_lora_eval_and_eager(tmp_path, tiny_model_path, chinese_rows, profiles):
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation="eager")
    rows = chinese_rows.filter(lambda row: row["role"] == "孙悟空")  # two general rows and one role-specific
    args = config(tmp_path, optim="adamw_torch", learning_rate=1e-2, per_device_train_batch_size=2, max_steps=3)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = RoCITTrainer(
        model, args=args, train_dataset=rows, eval_dataset=rows, profiles=profiles, peft_config=lora
    )
    assert trainer._attention_backend == "eager"
    assert "sample_lengths" in trainer.eval_dataset.column_names
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    after = trainer.evaluate()
    assert after["eval_loss"] < before
    assert {"eval_loss_general", "eval_loss_role_specific", "eval_mean_token_accuracy"} <= set(after)


def test_unsupported_attention_falls_back_to_trl_packing(tmp_path, tiny_model_path, chinese_rows, profiles, caplog):
    from transformers import AttentionInterface, AutoModelForCausalLM
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register("rolellm_test_attention", sdpa_attention_forward)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation="rolellm_test_attention")
    with caplog.at_level("WARNING", logger="rolellm.training.attention"):
        trainer = RoCITTrainer(model, args=config(tmp_path), train_dataset=chinese_rows, profiles=profiles)
    assert "falling back to packing=True" in caplog.text
    assert trainer._attention_backend is None and trainer.args.packing
    assert "seq_lengths" in trainer.train_dataset.column_names  # TRL's best-fit packing


DDP_SCRIPT = """
import json, sys, datasets, torch
from rolellm.training.config import RoCITConfig
from rolellm.training.trainer import RoCITTrainer
from rolellm.roles.resolve import load_profiles
model_path, rows_path, profiles_path, out = sys.argv[1:5]
args = RoCITConfig(out, use_cpu=True, bf16=False, activation_checkpointing=False, optim="sgd", learning_rate=0.5,
                   max_steps=3, save_strategy="no", report_to="none", disable_tqdm=True, seed=0, max_length=2048,
                   per_device_train_batch_size=1, average_tokens_across_devices=True, dataset_num_proc=None)
rows = datasets.Dataset.from_list(json.loads(open(rows_path).read()))
trainer = RoCITTrainer(model_path, args=args, train_dataset=rows, profiles=load_profiles(profiles_path))
assert len(trainer.train_dataset) == 2 and trainer.accelerator.num_processes == 2
trainer.train()
if trainer.accelerator.is_main_process:
    torch.save({k: v.detach() for k, v in trainer.model.named_parameters()}, out + "/params.pt")
trainer.end()  # destroys the process group: a rank leaving with it alive can abort the other at exit
"""


@pytest.mark.exhaustive
@pytest.mark.slow
def test_ddp_ranks_take_whole_rows_and_match_one_process(
    tmp_path, tiny_model_path, rolebench_slice_dir, chinese_rows, profiles
):
    """Two CPU processes, one packed row each per step, reach the parameters of one process taking both rows."""
    (tmp_path / "ddp.py").write_text(DDP_SCRIPT)
    (tmp_path / "rows.json").write_text(json.dumps(chinese_rows.to_list(), ensure_ascii=False))
    profiles_path = str(rolebench_slice_dir / "profiles-zh")
    # torchrun and its ranks fork from one process that imported torch and TRL once (tests/fixtures/prewarmed.py)
    with prewarmed(dict(os.environ), tmp_path / "bin", TRAINING) as env:
        command = [str(tmp_path / "bin" / "python"), "-m", "torch.distributed.run", "--nproc_per_node", "2",
                   str(tmp_path / "ddp.py"), str(tiny_model_path), str(tmp_path / "rows.json"), profiles_path,
                   str(tmp_path / "ddp")]  # fmt: skip
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    ddp = torch.load(tmp_path / "ddp" / "params.pt")

    single = RoCITTrainer(
        str(tiny_model_path),
        args=config(tmp_path / "single", per_device_train_batch_size=2),
        train_dataset=chinese_rows,
        profiles=profiles,
    )
    single.train()
    for name, p in single.model.named_parameters():
        torch.testing.assert_close(ddp[name], p.detach(), rtol=1e-4, atol=1e-6, msg=name)


def test_resume_from_checkpoint_with_prefix_sharing(tmp_path, tiny_model_path, chinese_rows, profiles):
    rows = chinese_rows.filter(lambda row: row["role"] != "华妃")  # 6 samples of two roles

    def trainer(folder):
        args = config(
            folder, max_steps=4, save_strategy="steps", save_steps=2, per_device_train_batch_size=1, max_length=1024
        )
        return RoCITTrainer(str(tiny_model_path), args=args, train_dataset=rows, profiles=profiles)

    full = trainer(tmp_path / "full")
    assert len(full.train_dataset) >= 2  # one packed row per step, the data order restored on resume
    full.train()
    resumed = trainer(tmp_path / "resumed")
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "out" / "checkpoint-2"))
    assert resumed.state.global_step == 4
    for (name, a), (_, b) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)


@pytest.mark.slow
def test_qlora_4bit_with_prefix_sharing(tmp_path, tiny_model_path, chinese_rows, profiles):
    import bitsandbytes as bnb
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    quantization = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32
    )
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    rows = chinese_rows.filter(lambda row: row["role"] == "李白")
    args = config(tmp_path, optim="adamw_torch", learning_rate=1e-2, max_steps=2, per_device_train_batch_size=1)
    trainer = RoCITTrainer(
        str(tiny_model_path), args=args, train_dataset=rows, profiles=profiles, peft_config=lora,
        quantization_config=quantization,
    )  # fmt: skip
    assert trainer._attention_backend == "sdpa"
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in trainer.model.modules())
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    assert all(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters() if n in before)
