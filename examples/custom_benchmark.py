"""A benchmark of your own, in one file: the model is asked to repeat a word, and scored on how often it does.

It follows the interface of rolellm's own evaluations (`rolellm.evaluation.base`): a config holding its clients
(`EvaluationConfig`), `run_echo(config)` returning a typed result (`EvaluationResult`) and `write_echo_report(folder)`;
one line of your own code registers it by name (docs/development.md, "Adding a benchmark"):

    EVALUATIONS["echo"] = ("custom_benchmark", "ECHO")

`python examples/custom_benchmark.py` runs it against the stand-in chat-completions server of `rolellm.testing`,
offline, into a temporary folder (or `--output_dir`).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from rolellm.clients.base import ChatRequest
from rolellm.clients.config import ClientConfig, make_client
from rolellm.evaluation.base import Evaluation, EvaluationConfig, EvaluationResult


@dataclass
class EchoConfig(EvaluationConfig):
    """What `run_echo` asks, whom, and where it writes."""

    output_dir: str = field(metadata={"help": "Where results.json and report.md go."})
    client: ClientConfig = field(metadata={"help": "The evaluated model."})
    words: list[str] = field(default_factory=lambda: ["ahoy", "rum", "parrot"], metadata={"help": "Words to repeat."})
    allow_partial: bool = field(default=False, metadata={"help": "Accept a run where some requests failed."})

    def __post_init__(self):
        self.set_default_caches()  # the model's answers cached in <output_dir>/cache.sqlite


@dataclass
class EchoResult(EvaluationResult):
    """`accuracy`: the share of the answers that repeat their word (`None` when none came back); `answers`: each
    word's answer (`None`: its request failed)."""

    accuracy: float | None
    answers: dict[str, str | None]


def run_echo(config: EchoConfig) -> EchoResult:
    """Ask the model to repeat each word, score the answers, write `results.json` and the report."""
    prompts = [[{"role": "user", "content": f"Repeat the word {word!r}."}] for word in config.words]
    results = make_client(config.client).generate([ChatRequest(p, {"max_tokens": 16}) for p in prompts], desc="Echo")
    answers = {word: r.text if r.error is None else None for word, r in zip(config.words, results)}
    answered = {word: answer for word, answer in answers.items() if answer is not None}
    result = EchoResult(
        accuracy=None, answers=answers, output_dir=config.output_dir, failed={"answers": len(answers) - len(answered)}
    )
    if not answered:  # nothing to score: no results.json, no report
        result.error = f"none of the {len(answers)} words was answered"
        return result
    result.accuracy = sum(word in answer.lower() for word, answer in answered.items()) / len(answered)
    folder = Path(config.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    content = {"accuracy": result.accuracy, "answers": answers, "failed": result.failed}
    (folder / "results.json").write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
    result.report = write_echo_report(folder)
    return result


def write_echo_report(folder) -> dict[str, Path]:
    """`report.md` of an echo run's folder, from its `results.json`."""
    folder = Path(folder)
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    lines = ["# Echo", "", f"Accuracy {results['accuracy']:.2f}", "", "| word | answer |", "|---|---|"]
    lines += [f"| {word} | {'failed' if answer is None else answer} |" for word, answer in results["answers"].items()]
    path = folder / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"report": path}


ECHO = Evaluation(EchoConfig, run_echo, write_echo_report)


if __name__ == "__main__":
    import argparse
    import sys
    import tempfile

    from rolellm.evaluation.base import EVALUATIONS, get_evaluation
    from rolellm.testing.server import ChatCompletionsServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", help="where the run writes (default: a temporary folder)")
    output_dir = parser.parse_args().output_dir or tempfile.mkdtemp()
    EVALUATIONS["echo"] = ("custom_benchmark", "ECHO")  # this file as a module: its folder is on sys.path
    echo = get_evaluation("echo")
    with ChatCompletionsServer(lambda body: "Ahoy, ahoy!") as server:  # a parrot that knows one word
        result = echo.run(
            echo.config_class(output_dir, ClientConfig("parrot", base_url=server.base_url, progress=False))
        )
    print(f"accuracy {result.accuracy:.2f}, {result.failed_count} failed; report: {result.report['report']}")
    sys.exit(0 if result.error is None else 3)
