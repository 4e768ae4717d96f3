"""Agreement statistics on hand-computed cases, human-label files, and `rolellm judge agreement` on a synthetic run."""

import json
import re

import numpy as np
import pytest

from rolellm.evaluation.multiturn.agreement import (
    bootstrap_ci,
    cohen_kappa,
    compare_with_humans,
    kendall,
    krippendorff_alpha,
    mean_pairwise_spearman,
    read_human_labels,
    read_judge_results,
    spearman,
)
from rolellm.roles.profile import DataFormatError
from rolellm.scripts import judge as judge_script


def test_spearman_and_kendall_on_known_cases():
    assert spearman([1, 2, 3, 4, 5], [3, 5, 7, 20, 100]) == 1.0  # monotone, not linear
    assert spearman([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == -1.0
    # d = (-1, 1, -1, 1, 0): rho = 1 - 6 * 4 / (5 * 24) = 0.8; 8 concordant and 2 discordant pairs: tau = 0.6
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == 0.8
    assert kendall([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == 0.6
    assert kendall([1, 2, 3], [3, 2, 1]) == -1.0
    # ties share their average rank: ranks (1.5, 1.5, 3) and (1, 2, 3) -> r = 0.866025
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.866025)
    # tau-b with a tie on one side: 2 concordant, 0 discordant, 1 tie in x -> 2 / sqrt(2 * 3)
    assert kendall([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / 6**0.5, abs=1e-6)
    # undefined: a constant rater or fewer than two items -> None, never NaN
    assert spearman([3, 3, 3], [1, 2, 3]) is None and kendall([3, 3], [1, 2]) is None and spearman([1], [2]) is None
    with pytest.raises(ValueError, match="paired"):
        spearman([1, 2], [1])


def test_cohen_kappa_on_a_known_confusion_table():
    # 50 items: both "win" 20, A win / B loss 5, A loss / B win 10, both "loss" 15
    # p_o = 35/50 = 0.7; p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5; kappa = (0.7 - 0.5) / 0.5 = 0.4
    a = ["win"] * 20 + ["win"] * 5 + ["loss"] * 10 + ["loss"] * 15
    b = ["win"] * 20 + ["loss"] * 5 + ["win"] * 10 + ["loss"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4, abs=1e-12)  # statistics are exact, not rounded
    assert cohen_kappa(a, a) == 1.0
    assert cohen_kappa(["tie"] * 3, ["tie"] * 3) is None  # chance agreement is 1
    assert cohen_kappa([], []) is None


def test_krippendorff_alpha_and_pairwise_spearman():
    # units (1,1), (2,2), (3,4): D_o uses 2 ordered pairs of squared difference 1; the pooled values 1,1,2,2,3,4
    # have sum of squared pair differences 82 -> alpha = 1 - (6 - 1) * 2 / 82 = 0.878049
    assert krippendorff_alpha([[1, 2, 3], [1, 2, 4]]) == pytest.approx(0.878049)
    assert krippendorff_alpha([[1, 2, 3], [1, 2, 3], [1, 2, 3]]) == 1.0
    assert krippendorff_alpha([[1, None], [None, 2]]) is None  # no item rated twice
    assert krippendorff_alpha([[3, 3], [3, 3]]) is None  # no variation
    assert krippendorff_alpha([[1, 5], [5, 1]]) < 0  # systematic disagreement
    assert mean_pairwise_spearman([[1, 2, 3], [1, 2, 3], [3, 2, 1]]) == pytest.approx((1 - 1 - 1) / 3, abs=1e-6)


def test_bootstrap_ci_is_deterministic_and_brackets_the_estimate():
    x, y = list(range(20)), [v + (3 if v % 4 == 0 else 0) for v in range(20)]
    low, high = bootstrap_ci(spearman, x, y, num_samples=300, seed=1)
    assert low <= spearman(x, y) <= high <= 1.0
    assert bootstrap_ci(spearman, x, y, num_samples=300, seed=1) == [low, high]
    assert bootstrap_ci(spearman, [1], [1]) == [None, None]


def test_read_human_labels_errors_name_file_line_and_field(tmp_path):
    path = tmp_path / "human.jsonl"
    path.write_text('{"id": "a", "scores": {"memory": 3}}\n{"id": "b", "scores": {"memory": "high"}}\n')
    with pytest.raises(DataFormatError, match=r"human.jsonl:2: field 'scores.memory' must be a number"):
        read_human_labels(path)
    path.write_text('{"id": 1, "choice": "better"}\n')
    with pytest.raises(DataFormatError, match=r"human.jsonl:1: field 'choice' must be one of"):
        read_human_labels(path)
    path.write_text('{"scores": {"memory": 3}}\n')
    with pytest.raises(DataFormatError, match=r"human.jsonl:1: field 'id'"):
        read_human_labels(path)
    path.write_text('{"id": "a", "annotator": "x"}\n')
    with pytest.raises(DataFormatError, match=r"human.jsonl:1: a label needs 'scores'"):
        read_human_labels(path)


def test_annotators_are_averaged_and_choices_take_the_majority():
    labels = [
        {"id": "a", "scores": {"style": 1}, "choice": "win"},
        {"id": "a", "scores": {"style": 3}, "choice": "win"},
        {"id": "a", "scores": {}, "choice": "loss"},
        {"id": "b", "scores": {"style": 4}, "choice": "win"},
        {"id": "b", "scores": {}, "choice": "loss"},  # a split vote is a tie
        {"id": "c", "scores": {"style": 5}, "choice": None},
        {"id": "z", "scores": {"style": 5}, "choice": None},  # no judge verdict
    ]
    result = compare_with_humans(
        labels, {"a": {"style": 1}, "b": {"style": 2}, "c": {"style": 3}}, {"a": "win", "b": "tie"}
    )
    # human means 2, 4, 5 vs judge 1, 2, 3: perfectly monotone
    assert result["scores"]["style"]["n"] == 3 and result["scores"]["style"]["spearman"] == 1.0
    assert result["choices"]["n"] == 2 and result["choices"]["kappa"] == 1.0
    assert result["choices"]["confusion"]["win"]["win"] == 1 and result["choices"]["confusion"]["tie"]["tie"] == 1
    assert result["compared"] == 3 and result["unmatched"] == ["z"]


def write_synthetic_run(folder):
    """A results folder with rubric scores of 6 transcripts and 50 pairwise verdicts."""
    folder.mkdir()
    judge = [1, 2, 3, 4, 5, 3]
    items = [
        {"id": f"t{i}", "role": "Po", "scores": {"memory": s, "knowledge": s, "engagement": s}}
        for i, s in enumerate(judge)
    ]
    (folder / "scores.json").write_text(json.dumps({"items": items}))
    outcomes = ["win"] * 25 + ["loss"] * 25
    (folder / "results.json").write_text(json.dumps({"win_rate": {"outcomes": outcomes + ["failed"]}}))


def write_synthetic_humans(path):
    """Humans who agree exactly on memory (rho 1), exactly oppose on knowledge (rho -1), and on engagement give the
    ranks (2, 1, 4, 3, 5) to the judge's (1, 2, 3, 4, 5) (rho 0.8); their pairwise choices make the 20/5/10/15
    confusion table (kappa 0.4)."""
    lines = []
    for i, (memory, knowledge, engagement) in enumerate(zip([1, 2, 3, 4, 5], [5, 4, 3, 2, 1], [2, 1, 4, 3, 5])):
        scores = {"memory": memory, "knowledge": knowledge, "engagement": engagement}
        lines.append({"id": f"t{i}", "annotator": "ann1", "scores": scores})
    humans = ["win"] * 20 + ["loss"] * 5 + ["win"] * 10 + ["loss"] * 15  # judge: win x25, loss x25
    lines += [{"id": index, "annotator": "ann1", "choice": choice} for index, choice in enumerate(humans)]
    lines.append({"id": "never-judged", "scores": {"memory": 3}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def run_cli(argv):
    return judge_script.main(judge_script.make_parser().parse_args(argv))


def test_judge_agreement_cli_reproduces_known_correlations(tmp_path, capsys):
    write_synthetic_run(tmp_path / "run")
    write_synthetic_humans(tmp_path / "human.jsonl")
    code = run_cli(["agreement", "--human", str(tmp_path / "human.jsonl"), "--results", str(tmp_path / "run")])
    assert code == 0
    result = json.loads((tmp_path / "run" / "agreement.json").read_text())
    scores = result["scores"]
    assert (scores["memory"]["spearman"], scores["memory"]["kendall"], scores["memory"]["n"]) == (1.0, 1.0, 5)
    assert scores["memory"]["spearman_ci"] == [1.0, 1.0]
    assert (scores["knowledge"]["spearman"], scores["knowledge"]["kendall"]) == (-1.0, -1.0)
    assert (scores["engagement"]["spearman"], scores["engagement"]["kendall"]) == pytest.approx((0.8, 0.6), abs=1e-12)
    low, high = scores["engagement"]["spearman_ci"]
    assert low <= 0.8 <= high
    assert result["choices"]["n"] == 50 and result["choices"]["kappa"] == pytest.approx(0.4, abs=1e-12)
    assert result["choices"]["confusion"]["loss"]["win"] == 5  # human loss, judge win
    low, high = result["choices"]["kappa_ci"]
    assert low < 0.4 < high
    assert result["unmatched"] == ["never-judged"]
    printed = capsys.readouterr().out
    assert "| engagement | 5 | 0.800 [" in printed and "Cohen's kappa 0.400" in printed


def test_judge_agreement_cli_exit_codes(tmp_path, capsys):
    write_synthetic_run(tmp_path / "run")
    human = tmp_path / "human.jsonl"
    assert run_cli(["agreement", "--human", str(tmp_path / "missing.jsonl"), "--results", str(tmp_path / "run")]) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err
    human.write_text('{"id": "t1", "scores": {"memory": 3}}\nnot json\n')
    assert run_cli(["agreement", "--human", str(human), "--results", str(tmp_path / "run")]) == 2
    assert "human.jsonl:2: not valid JSON" in capsys.readouterr().err
    human.write_text('{"id": "t1", "scores": {"memory": 3}}\n')
    assert run_cli(["agreement", "--human", str(human), "--results", str(tmp_path / "nowhere")]) == 2
    (tmp_path / "empty").mkdir()
    assert run_cli(["agreement", "--human", str(human), "--results", str(tmp_path / "empty")]) == 2
    assert "neither scores.json" in capsys.readouterr().err
    human.write_text('{"id": "other", "scores": {"memory": 3}}\n')
    assert run_cli(["agreement", "--human", str(human), "--results", str(tmp_path / "run")]) == 2
    assert "nothing to compare" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # argparse: a missing required flag
        run_cli(["agreement", "--human", str(human)])
    assert exit_info.value.code == 2


def _kendall_by_pairs(x, y):
    """Kendall's tau-b by its definition, pair by pair (the reference for the vectorised one)."""
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = (x[i] > x[j]) - (x[i] < x[j]), (y[i] > y[j]) - (y[i] < y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif dx == dy:
                concordant += 1
            else:
                discordant += 1
    return (concordant - discordant) / ((concordant + discordant + ties_x) * (concordant + discordant + ties_y)) ** 0.5


def test_kendall_equals_the_pairwise_definition_with_ties_unrounded():
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.integers(1, 6, 40).tolist(), rng.integers(1, 6, 40).tolist()
        assert kendall(x, y) == pytest.approx(_kendall_by_pairs(x, y), abs=1e-12)
    assert kendall([1, 2, 3], [1, 3, 2]) == 1 / 3  # exact, not 0.333333


def test_a_nan_judge_score_is_a_failed_verdict_not_the_highest(tmp_path):
    items = [{"id": "a", "scores": {"memory": 2}}, {"id": "b", "scores": {"memory": float("nan")}}]
    (tmp_path / "scores.json").write_text(json.dumps({"items": items}))  # json writes NaN, and reads it back
    scores, _ = read_judge_results(tmp_path)
    assert scores == {"a": {"memory": 2}}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"items": [{"id": "a", "scores": {"memory": 3}}', "scores.json: not valid JSON (line 1"),
        ('[{"id": "a"}]', "scores.json: expected a JSON object, got list"),
        ('{"items": {"a": 3}}', "scores.json: field 'items' must be a list"),
        ('{"items": [{"scores": {"memory": 3}}]}', "scores.json: items[0] must be an object with 'id'"),
        ('{"items": [{"id": "a", "scores": {"memory": "high"}}]}', "items[0]: field 'scores.memory' must be a number"),
    ],
)
def test_a_malformed_scores_file_names_the_file_and_field(tmp_path, content, message):
    (tmp_path / "scores.json").write_text(content)
    with pytest.raises(DataFormatError, match=re.escape(message)):
        read_judge_results(tmp_path)


def test_a_misspelt_dimension_is_named_with_the_judged_ones():
    labels = [{"id": "a", "scores": {"memroy": 3}, "choice": None}]
    with pytest.raises(ValueError, match=r"dimensions \['memroy'\] that the judge did not score; .*\['memory'\]"):
        compare_with_humans(labels, {"a": {"memory": 2}}, {})


@pytest.mark.parametrize("score", [0, 6, 2.5])
def test_human_scores_off_the_scale_name_the_line(tmp_path, score):
    path = tmp_path / "human.jsonl"
    path.write_text(
        json.dumps({"id": "a", "scores": {"memory": 3}})
        + "\n"
        + json.dumps({"id": "b", "scores": {"memory": score}})
        + "\n"
    )
    with pytest.raises(
        DataFormatError, match=r"human.jsonl:2: field 'scores.memory' must be a whole number from 1 to 5"
    ):
        read_human_labels(path)


def test_another_scale_admits_its_own_scores(tmp_path):
    path = tmp_path / "human.jsonl"
    path.write_text(
        json.dumps({"id": "a", "scores": {"memory": 0}}) + "\n" + json.dumps({"id": "b", "scores": {"memory": 10}})
    )
    assert [label["scores"]["memory"] for label in read_human_labels(path, scale=(0, 10))] == [0, 10]
