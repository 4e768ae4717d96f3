"""One API key per endpoint: every endpoint of a run takes its key from its own environment variable
(`--api_key_env`, `--judge_api_key_env`, ...), the main endpoint's `OPENAI_API_KEY` by default reaches only the main
endpoint's host, and no key is printed or written. `rolellm coser run` with its actor and judge on two servers is in
tests/test_coser.py."""

import dataclasses
import json

import pytest

from rolellm.clients.config import ClientConfig, derive_client, make_client
from rolellm.scripts import coser, dialogue, evaluate, generate, train_grpo
from rolellm.scripts.cli import main
from rolellm.testing.server import ChatCompletionsServer


MAIN_KEY, JUDGE_KEY = "sk-main-host-only", "sk-judge-host-only"


def test_every_endpoint_option_group_takes_its_own_key_variable():
    """Each prefixed group of endpoint options (`endpoint_options`) has its `--{prefix}_api_key_env`."""
    groups = {
        f"{module.__name__}.{name}": {f.name for f in dataclasses.fields(value)}
        for module in (coser, dialogue, evaluate, generate, train_grpo)
        for name, value in vars(module).items()
        if isinstance(value, type) and dataclasses.is_dataclass(value) and name.endswith("Options")
    }
    prefixes = {
        name: {f.removesuffix("_model") for f in names if f.endswith("_model")} for name, names in groups.items()
    }
    assert sorted({p for found in prefixes.values() for p in found}) == ["baseline", "env", "judge", "nsp", "user"]
    missing = {name: sorted(p for p in prefixes[name] if f"{p}_api_key_env" not in names)
               for name, names in groups.items()}  # fmt: skip
    assert {name: found for name, found in missing.items() if found} == {}
    assert "api_key_env" in {f.name for f in dataclasses.fields(ClientConfig)}


def test_a_derived_endpoint_gets_the_main_key_only_on_the_main_host(monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", JUDGE_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    main_config = ClientConfig("m", base_url="http://127.0.0.1:8000/v1")

    def key_env(base, **options):
        return derive_client(base, "judge", {"judge_model": "j", **options}).api_key_env

    assert key_env(main_config) is None  # the main endpoint's own (OPENAI_API_KEY)
    assert key_env(main_config, judge_base_url="http://127.0.0.1:8000/other/v1") is None  # the same host and port
    assert key_env(main_config, judge_base_url="http://127.0.0.1:8001/v1") == ""  # another port: another server
    assert key_env(main_config, judge_base_url="https://127.0.0.1:8000/v1") == ""
    assert key_env(main_config, judge_base_url="http://a/v1", judge_api_key_env="JUDGE_KEY") == "JUDGE_KEY"
    named = ClientConfig("m", base_url="http://127.0.0.1:8000/v1", api_key_env="JUDGE_KEY")
    assert key_env(named) == "JUDGE_KEY"  # the main endpoint's named key goes with it to its host
    local = ClientConfig("./a-local-model")  # the main model runs in-process: OPENAI_API_KEY is OpenAI's
    assert key_env(local) is None and key_env(local, judge_base_url="https://api.openai.com/v1") is None
    assert key_env(local, judge_base_url="http://127.0.0.1:8000/v1") == ""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")  # ... or $OPENAI_BASE_URL's host
    assert key_env(local, judge_base_url="http://127.0.0.1:8000/v1") is None


def test_the_client_sends_the_named_key_or_none(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", MAIN_KEY)
    monkeypatch.setenv("JUDGE_KEY", JUDGE_KEY)
    with ChatCompletionsServer(lambda body: "Aye") as server:
        for api_key_env, sent in [(None, MAIN_KEY), ("JUDGE_KEY", JUDGE_KEY), ("", "EMPTY")]:
            config = ClientConfig("m", base_url=server.base_url, api_key_env=api_key_env, progress=False)
            assert make_client(config).generate([[{"role": "user", "content": "Ahoy?"}]])[0].text == "Aye"
            assert server.requests[-1]["headers"]["authorization"] == f"Bearer {sent}"
        assert MAIN_KEY not in repr(make_client(config))


def test_evaluate_sends_each_endpoint_only_its_own_key(rolebench_slice_dir, tmp_path, capsys, monkeypatch):
    """The answering model, the judge and the baseline on three servers: the model's server sees only
    `OPENAI_API_KEY`, the judge's only the key `--judge_api_key_env` names, the baseline's (another host, no key
    named) none; a judge given no key where its server wants one stops in the pre-flight, saying so."""
    monkeypatch.setenv("OPENAI_API_KEY", MAIN_KEY)
    monkeypatch.setenv("EVAL_JUDGE_KEY", JUDGE_KEY)

    def answer(body):  # the judge ranks the answers as shown; the models answer
        shown = next(
            (line for line in body["messages"][-1]["content"].splitlines() if line.startswith('[{"model"')), ""
        )
        return str([{"model": a["model"], "reason": "", "rank": r} for r, a in enumerate(json.loads(shown), 1)])

    with (
        ChatCompletionsServer(lambda body: "诗酒趁年华。", api_key=MAIN_KEY) as served,
        ChatCompletionsServer(answer, api_key=JUDGE_KEY) as judge,
        ChatCompletionsServer(lambda body: "举杯邀明月。") as baseline,
    ):

        def evaluate(out, *extra):
            return main([
                "evaluate", "--model", "m", "--base_url", served.base_url, "--dataset_name", "zh-role_specific",
                "--data_dir", str(rolebench_slice_dir), "--roles", "李白", "--max_samples_per_role", "2",
                "--output_dir", str(out), "--judge_model", "j", "--judge_base_url", judge.base_url,
                "--baseline_model", "b1", "--baseline_base_url", baseline.base_url, *extra,
            ])  # fmt: skip

        assert evaluate(tmp_path / "run", "--judge_api_key_env", "EVAL_JUDGE_KEY") == 0
        assert set(served.authorizations()) == {f"Bearer {MAIN_KEY}"} and len(served.requests) == 2
        assert set(judge.authorizations()) == {f"Bearer {JUDGE_KEY}"} and len(judge.requests) == 4  # both orders
        assert set(baseline.authorizations()) == {"Bearer EMPTY"} and len(baseline.requests) == 2
        printed = capsys.readouterr()
        asked = len(judge.requests)
        assert evaluate(tmp_path / "unkeyed") == 3  # the judge's server refuses a request without its key
        err = capsys.readouterr().err
        assert len(judge.requests) == asked and MAIN_KEY not in str(judge.authorizations())
    assert "HTTP 401" in err and "no key was sent" in err and "api_key_env" in err and "Traceback" not in err, err
    assert not (tmp_path / "unkeyed" / "results.json").exists()
    written = [p.read_bytes().decode("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file()]
    for text in [printed.out, printed.err, err, *written]:
        assert MAIN_KEY not in text and JUDGE_KEY not in text


@pytest.mark.parametrize(
    ("flags", "where"),
    [
        (["--api_key_env", "ROLELLM_TEST_UNSET_KEY"], "api_key_env"),
        (["--judge_model", "j", "--judge_api_key_env", "ROLELLM_TEST_UNSET_KEY"], "--judge_api_key_env"),
        (["--baseline_model", "b", "--baseline_api_key_env", "ROLELLM_TEST_UNSET_KEY"], "--baseline_api_key_env"),
    ],
)
def test_a_key_variable_that_is_not_set_is_a_usage_error(flags, where, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ROLELLM_TEST_UNSET_KEY", raising=False)
    argv = ["evaluate", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--output_dir", str(tmp_path / "out")]
    assert main([*argv, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and "Traceback" not in "".join(err)
    assert f"{where} names the environment variable ROLELLM_TEST_UNSET_KEY, which is not set" in err[-1]
    assert not (tmp_path / "out").exists()


def test_a_key_given_where_its_variable_s_name_belongs_is_not_repeated(tmp_path, capsys):
    code = main(["coser", "run", "--test_file", "t.json", "--actor_model", "a", "--base_url", "http://127.0.0.1:9/v1",
                 "--nsp_api_key_env", f"{MAIN_KEY}", "--output_dir", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--nsp_api_key_env takes the name of an environment variable" in err and MAIN_KEY not in err
