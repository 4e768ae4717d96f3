"""From a screenplay to a trained and evaluated role model through the command line only: `rolellm generate
describe`, `rolegpt` and `context-instruct` write one release folder (against the test chat-completions server),
which `rolellm train --data_dir`, `rolellm evaluate --data_dir` and `load_rolebench(..., data_dir=)` read unchanged."""

import json
import re
import shlex
from pathlib import Path

import pytest

from rolellm.data.builder import load_rolebench
from rolellm.generation.job import save_profiles, stable_split
from rolellm.roles.profile import RoleProfile, Utterance
from rolellm.roles.release import read_release_profiles
from rolellm.scripts.cli import main
from rolellm.testing.server import ChatCompletionsServer, Fault


RECIPES = Path(__file__).resolve().parents[1] / "examples" / "recipes"
SCRIPT = [  # (act, speaker, line): one short scene per act
    (0, "杜甫", "太白兄，今日又去何处饮酒？"), (0, "李白", "天生我材必有用，千金散尽还复来！"),
    (1, "李白", "子美，随我登山看云去。"), (1, "杜甫", "会当凌绝顶，一览众山小。"),
    (2, "杜甫", "长安米贵，居大不易。"), (2, "李白", "且放白鹿青崖间，须行即骑访名山。"),
    (3, "李白", "举杯邀明月，对影成三人。"), (3, "杜甫", "兄之诗，飘然思不群。"),
]  # fmt: skip
QUESTIONS = ["你喜欢喝什么酒？", "介绍一下长安城。", "你怎么看待科举？", "如何写好一首诗？", "你最敬佩的人是谁？",
             "说说你的一次远行。", "你对朋友有什么看法？", "怎样度过一个雨天？"]  # fmt: skip
TOPICS = ["饮酒", "登山", "长安", "写诗", "明月", "朋友"]


def write_screenplay(folder: Path) -> Path:
    """A screenplay-profile folder (`desc.json` + `{script}-{role}.jsonl`) of two poets, barely described."""
    folder.mkdir(parents=True)
    descriptions = {"李白": "诗人。", "杜甫": "诗人。"}
    (folder / "desc.json").write_text(json.dumps(descriptions, ensure_ascii=False), encoding="utf-8")
    lines = "".join(
        json.dumps({"act_id": act, "diag_id": act, "role": speaker, "content": line}, ensure_ascii=False) + "\n"
        for act, speaker, line in SCRIPT
    )
    for role in ("李白", "杜甫"):
        (folder / f"诗坛-{role}.jsonl").write_text(lines, encoding="utf-8")
    return folder


class Responder:
    """Answers like a chat model each request of the three generators; RoleGPT requests whose question holds one
    of the words of `fail` fail (HTTP 422)."""

    def __init__(self):
        self.fail = ()

    def __call__(self, body):
        prompt = body["messages"][-1]["content"]
        if body["messages"][0]["role"] == "system":  # RoleGPT: the role's system text, then the question
            if any(word in prompt for word in self.fail):
                return Fault("server_error", status=422)
            return f"此事不难，第{body['seed']}回便知分晓。"
        role = "李白" if "“李白”" in prompt else "杜甫"
        if "剧本片段" in prompt:  # Context-Instruct
            items = [
                {"question": f"{role}，谈谈你与{topic}的故事吧？", "type": "script_based" if i % 2 else "script_agnostic",
                 "completeness": "High", "confidence": 0.9, "answer": f"{topic}之事，说来话长。"}
                for i, topic in enumerate(TOPICS)
            ]  # fmt: skip
            return json.dumps(items, ensure_ascii=False)
        catchphrase = "天生我材必有用" if role == "李白" else "会当凌绝顶"
        return json.dumps({"description": f"{role}，唐代诗人。", "catchphrases": [catchphrase]}, ensure_ascii=False)


def rolebench_rows(folder: Path, subset: str, split: str) -> list[dict]:
    path = folder / "rolebench-zh" / subset / f"{split}.jsonl"
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


@pytest.mark.slow
def test_generate_train_evaluate_through_one_folder(tmp_path, tiny_model_path, capsys):
    out, screenplay = tmp_path / "data", write_screenplay(tmp_path / "screenplay")
    instructions = tmp_path / "instructions.jsonl"
    instructions.write_text("".join(json.dumps({"instruction": q}, ensure_ascii=False) + "\n" for q in QUESTIONS))
    server_args = ["--output_dir", str(out), "--model", "test-model", "--max_retries", "0"]
    with ChatCompletionsServer(Responder()) as server:
        server_args += ["--base_url", server.base_url]
        # 1. descriptions and catchphrases for the screenplay's roles, written as the release's profiles-zh/
        assert main(["generate", "describe", "--profiles", str(screenplay), *server_args]) == 0
        # 2. RoleGPT general rows and 3. Context-Instruct role-specific rows, from the profiles of step 1
        code = main(["generate", "rolegpt", "--profiles", str(out), "--instructions", str(instructions),
                     "--num_samples", "2", "--test_fraction", "0.3", *server_args])  # fmt: skip
        assert code == 0
        code = main(["generate", "context-instruct", "--profiles", str(out), "--test_fraction", "0.3",
                     *server_args])  # fmt: skip
        assert code == 0
    printed = capsys.readouterr().out
    assert "Added the data to the release folder" in printed
    assert (
        "holds the RoleBench configs zh (train/test), zh-general (train/test/rolegpt_baseline), zh-role_specific"
        in printed
    )
    # the command generate prints to train on the folder is runnable as it is (its placeholders filled in)
    hint = re.findall(r"Train on it: (rolellm train .*)$", printed, re.MULTILINE)[-1]
    assert hint == f"rolellm train --data_dir {out} --dataset_configs zh --model_name_or_path MODEL --output_dir OUT"

    # one release folder: the rows of both generators and the profiles, with each job's run files apart
    profiles = read_release_profiles(out, "zh")
    assert {name: (p.description, p.catchphrases, p.generated) for name, p in profiles.items()} == {
        "李白": ("李白，唐代诗人。", ["天生我材必有用"], True),
        "杜甫": ("杜甫，唐代诗人。", ["会当凌绝顶"], True),
    }
    assert all(len(p.dialogue) == len(SCRIPT) for p in profiles.values())
    assert sorted(p.name for p in (out / "generation").iterdir()) == ["context-instruct", "describe", "rolegpt"]
    general = {split: rolebench_rows(out, "general", split) for split in ("train", "test")}
    specific = {split: rolebench_rows(out, "role_specific", split) for split in ("train", "test")}
    assert sum(map(len, general.values())) == 2 * len(QUESTIONS) and sum(map(len, specific.values())) == 2 * 6
    assert all(rows for rows in [*general.values(), *specific.values()])  # every file non-empty
    for split in ("train", "test"):
        assert all(stable_split(r["role"], r["question"], 0.3) == split for r in general[split] + specific[split])

    # the data layer reads the folder as it is, profiles included
    dataset = load_rolebench("zh", data_dir=out, splits=["train", "test"], with_profile=True)
    for split in ("train", "test"):
        rows = dataset[split]
        assert sorted(zip(rows["role"], rows["question"])) == sorted(
            (r["role"], r["question"]) for r in general[split] + specific[split]
        )
        assert set(rows["description"]) == {"李白，唐代诗人。", "杜甫，唐代诗人。"}

    # 4. train the tiny model on the folder, 5. evaluate the checkpoint on the folder's test rows
    checkpoint, report = tmp_path / "model", tmp_path / "eval"
    # (no --use_cpu, no --bf16: precision follows the hardware; only the tiny run's length is set)
    argv = shlex.split(hint.replace("MODEL", str(tiny_model_path)).replace("OUT", str(checkpoint)))[1:]
    code = main([*argv, "--max_steps", "2", "--max_length", "256", "--logging_steps", "1", "--report_to", "none",
                 "--activation_checkpointing", "false", "--learning_rate", "1e-2"])  # fmt: skip
    assert code == 0
    trained = capsys.readouterr().out
    assert f"Trained on {len(general['train']) + len(specific['train'])} samples" in trained
    assert "of 2 roles" in trained and (checkpoint / "model.safetensors").stat().st_size > 0
    # the plan is said before training, and two steps are too few to teach anything
    assert "rolellm train: 2 optimizer steps (" in trained and "max_steps=2)" in trained
    assert "warning: only 2 optimizer steps, too few for the model to learn much" in trained
    code = main(["evaluate", "--model_name_or_path", str(checkpoint), "--dataset_name", "zh", "--data_dir", str(out),
                 "--max_new_tokens", "4", "--device", "cpu", "--output_dir", str(report)])  # fmt: skip
    assert code == 0
    results = json.loads((report / "results.json").read_text("utf-8"))
    assert results["counts"]["general"] == len(general["test"])
    assert results["counts"]["role_specific"] == len(specific["test"])
    assert results["metrics"]["CUS"] is not None and results["metrics"]["SPE"] is not None
    assert "CUS" in capsys.readouterr().out


def test_a_rerun_that_fills_gaps_moves_no_row_between_splits(tmp_path):
    """A first run where some questions fail, then a run that answers them: every row of the first run stays in
    its split, the new rows are added where their hash puts them, and the folder holds each pair once."""
    out, screenplay = tmp_path / "data", write_screenplay(tmp_path / "screenplay")
    instructions = tmp_path / "instructions.jsonl"
    instructions.write_text("".join(json.dumps({"instruction": q}, ensure_ascii=False) + "\n" for q in QUESTIONS))
    responder = Responder()
    with ChatCompletionsServer(responder) as server:
        argv = ["generate", "rolegpt", "--profiles", str(screenplay), "--instructions", str(instructions),
                "--prompt_mode", "zero_shot", "--num_samples", "2", "--test_fraction", "0.5", "--output_dir", str(out),
                "--model", "test-model", "--max_retries", "0", "--base_url", server.base_url]  # fmt: skip
        responder.fail = ("长安", "远行", "雨天")  # 3 of the 8 questions fail
        assert main(argv) == 1
        first = {split: rolebench_rows(out, "general", split) for split in ("train", "test")}
        failures = (out / "generation" / "rolegpt" / "failures.jsonl").read_text("utf-8").splitlines()
        responder.fail = ()
        assert main(argv) == 0
    assert len(failures) == 2 * 3 * 2  # two roles, three questions, two samples
    second = {split: rolebench_rows(out, "general", split) for split in ("train", "test")}
    assert sum(map(len, first.values())) == 2 * 5 and sum(map(len, second.values())) == 2 * len(QUESTIONS)
    for split in ("train", "test"):
        before = {(r["role"], r["question"]) for r in first[split]}
        after = [(r["role"], r["question"]) for r in second[split]]
        assert before <= set(after) and len(after) == len(set(after))
        assert all(stable_split(*key, 0.5) == split for key in after)
    assert first["train"] and first["test"]  # both splits were there to move from
    assert not (out / "generation" / "rolegpt" / "failures.jsonl").exists()


def test_runs_into_one_folder_add_up(tmp_path):
    """Two RoleGPT runs over different roles and a Context-Instruct run into one folder: every role's rows and
    profile are kept, and the second Context-Instruct run of a role replaces that role's items."""
    out, screenplay = tmp_path / "data", write_screenplay(tmp_path / "screenplay")
    instructions = tmp_path / "instructions.jsonl"
    instructions.write_text("".join(json.dumps({"instruction": q}, ensure_ascii=False) + "\n" for q in QUESTIONS))
    with ChatCompletionsServer(Responder()) as server:
        common = ["--profiles", str(screenplay), "--output_dir", str(out), "--model", "test-model",
                  "--base_url", server.base_url, "--test_fraction", "0.5"]  # fmt: skip
        rolegpt = ["generate", "rolegpt", *common, "--instructions", str(instructions), "--prompt_mode", "zero_shot",
                   "--num_samples", "2"]  # fmt: skip
        assert main([*rolegpt, "--roles", "李白"]) == 0
        assert main([*rolegpt, "--roles", "杜甫"]) == 0
        assert main(["generate", "context-instruct", *common, "--roles", "杜甫"]) == 0
        assert main(["generate", "context-instruct", *common, "--roles", "杜甫"]) == 0  # the same again
    general = [r for split in ("train", "test") for r in rolebench_rows(out, "general", split)]
    specific = [r for split in ("train", "test") for r in rolebench_rows(out, "role_specific", split)]
    assert sorted({r["role"] for r in general}) == ["李白", "杜甫"] and len(general) == 2 * len(QUESTIONS)
    assert {r["role"] for r in specific} == {"杜甫"} and len(specific) == len(TOPICS)
    assert sorted(read_release_profiles(out, "zh")) == ["李白", "杜甫"]
    nums = [json.loads(line) for line in (out / "instructions-zh" / "nums.jsonl").read_text("utf-8").splitlines()]
    assert nums == [{"role": "杜甫", "num": len(TOPICS)}]
    dataset = load_rolebench("zh-general", data_dir=out)  # RoleGPT wrote all three splits of the general subset
    assert dataset["train"].num_rows + dataset["test"].num_rows == dataset["rolegpt_baseline"].num_rows


def test_a_profile_replaced_with_another_description_is_warned_about(tmp_path):
    dialogue = [Utterance(0, 0, "李白", "举杯邀明月。")]
    save_profiles(
        tmp_path, [RoleProfile("李白", "zh", "诗仙。", dialogue=dialogue), RoleProfile("杜甫", "zh", "诗圣。")]
    )
    with pytest.warns(UserWarning, match=r"profiles-zh/desc.json: the description of '李白' is replaced"):
        save_profiles(tmp_path, [RoleProfile("李白", "zh", "诗人。")])
    profiles = read_release_profiles(tmp_path, "zh")
    assert {name: p.description for name, p in profiles.items()} == {"李白": "诗人。", "杜甫": "诗圣。"}
    assert profiles["李白"].dialogue == []  # the earlier dialogue file does not speak for the new profile


def test_a_broken_file_in_the_folder_stops_the_run_before_any_row_is_written(tmp_path, capsys):
    out, screenplay = tmp_path / "data", write_screenplay(tmp_path / "screenplay")
    instructions = tmp_path / "instructions.jsonl"
    instructions.write_text("".join(json.dumps({"instruction": q}, ensure_ascii=False) + "\n" for q in QUESTIONS))
    general = out / "rolebench-zh" / "general"
    general.mkdir(parents=True)
    (general / "train.jsonl").write_text('{"role": "李白", "question": "你好", "generated": ["好"]}\n', "utf-8")
    (general / "test.jsonl").write_text('{"role": "李白", "question": "你好", "gener\n', "utf-8")  # cut short
    before = {path.name: path.read_bytes() for path in general.iterdir()}
    with ChatCompletionsServer(Responder()) as server:
        code = main(["generate", "rolegpt", "--profiles", str(screenplay), "--instructions", str(instructions),
                     "--prompt_mode", "zero_shot", "--num_samples", "2", "--output_dir", str(out),
                     "--model", "test-model", "--base_url", server.base_url])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and f"{general / 'test.jsonl'}:1: not valid JSON" in err and "Traceback" not in err
    assert {path.name: path.read_bytes() for path in general.iterdir()} == before


def test_train_without_dataset_configs_takes_the_folder_s_configs_and_says_which(tmp_path, capsys):
    from argparse import Namespace

    from rolellm.data.selection import default_configs

    for rel in (
        "rolebench-zh/general/train.jsonl",
        "rolebench-eng/instruction-generalization/role_specific/train.jsonl",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}\n")
    args = Namespace(dataset_configs=None, data_dir=str(tmp_path), dataset_train_split="train")
    assert default_configs(args) == ["zh-general", "en-instruction-role_specific"]
    assert f"with a train split in {tmp_path}: zh-general en-instruction-role_specific" in capsys.readouterr().out
    assert default_configs(Namespace(dataset_configs=None, data_dir=None, dataset_train_split="train")) == ["zh"]
    with pytest.raises(FileNotFoundError, match="holds no RoleBench test split"):
        default_configs(Namespace(dataset_configs=None, data_dir=str(tmp_path), dataset_train_split="test"))
