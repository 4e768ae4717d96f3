"""The report: the paper-style table, the SVG charts and the model card's `model-index`."""

import copy

from huggingface_hub import ModelCard

from rolellm.evaluation.benchmark.report import format_table, update_model_card, write_report


def _result(model, dataset_name="en-instruction", cus=0.3294, raw=0.3755, spe=0.3814, win_rate=None, mode="system"):
    metrics = {"CUS": cus, "RAW": raw, "SPE": spe}
    available = [m for m, v in metrics.items() if v is not None]
    metrics["avg"] = sum(metrics[m] for m in available) / len(available)
    return {
        "model": model,
        "dataset_name": dataset_name,
        "split": "test",
        "mode": mode,
        "metrics": {**metrics, "win_rate": win_rate},
        "avg_over": available,
        "per_role": {
            "Jack Sparrow": {**metrics, "n_CUS": 3, "n_RAW": 3, "n_SPE": 2},
            "孙悟空": {"CUS": 0.5, "RAW": None, "SPE": 0.25, "avg": 0.375, "n_CUS": 1, "n_RAW": 0, "n_SPE": 1},
        },
        "per_type": {"script_agnostic": {"SPE": 0.4, "n": 2}, "script_based": {"SPE": 0.3, "n": 1}},
    }


def test_table_has_the_papers_layout():
    results = [
        _result("RoleGPT", cus=0.5764, raw=0.5322, spe=0.3229, mode=None),
        _result("RoleLLaMA", win_rate=0.5582),
        _result("RoleGLM", dataset_name="zh-general", raw=None, spe=None),
    ]
    table = format_table(results)
    lines = table.splitlines()
    assert lines[0] == "### English, instruction generalization (paper Table 3)"
    assert "| RoleGPT | – | 0.5764 | 0.5322 | 0.3229 | 0.4772 | n/a |" in lines
    assert "| RoleLLaMA | system | 0.3294 | 0.3755 | 0.3814 | 0.3621 | 55.82 |" in lines
    assert "### Chinese (paper Table 4)" in lines
    assert "| RoleGLM | system | 0.3294 | n/a | n/a | 0.3294* | n/a |" in lines
    assert lines[-1].startswith("\\* mean of the available metrics (CUS)")


def test_write_report_files(tmp_path):
    import xml.etree.ElementTree as ElementTree

    results = [_result("RoleGPT", mode=None), _result("tiny-llama", cus=0.1, raw=None, spe=0.05)]
    files = write_report(results, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "comparison.svg", "lengths.svg", "per_role.svg", "results.html", "results.md",
    ]  # fmt: skip
    text = files["table"].read_text(encoding="utf-8")
    assert "| tiny-llama | system | 0.1000 | n/a | 0.0500 | 0.0750* | n/a |" in text
    assert "### tiny-llama: per role" in text and "| 孙悟空 | 0.5000 | n/a | 0.2500 | 0.3750 | 1 | 1 |" in text
    assert "| script_based | 0.3000 | 1 |" in text
    per_role = ElementTree.fromstring(files["per_role"].read_text(encoding="utf-8"))
    texts = [element.text for element in per_role.iter("{http://www.w3.org/2000/svg}text")]
    # the last run's roles and its available metrics (a legend entry each), RAW not drawn
    assert {"孙悟空", "CUS", "SPE", "0.50", "0.25", "tiny-llama on en-instruction: per role"} <= set(
        texts
    ) and "RAW" not in texts
    comparison = ElementTree.fromstring(files["comparison"].read_text(encoding="utf-8"))
    texts = [element.text for element in comparison.iter("{http://www.w3.org/2000/svg}text")]
    # a row per metric, a bar per run: its value, or n/a where the run has none
    assert {"CUS", "RAW", "SPE", "avg", "RoleGPT", "tiny-llama", "0.1000", "n/a"} <= set(texts)
    bars = [float(rect.get("width")) for rect in comparison.iter("{http://www.w3.org/2000/svg}rect")][1:]
    legend, drawn = bars[:2], bars[2:]  # the legend's two squares, then (CUS, RAW, SPE, avg) x (RoleGPT, tiny-llama)
    assert legend == [9.0, 9.0] and drawn[3] == 0.0  # tiny-llama's RAW: an empty bar
    assert abs(drawn[0] / drawn[1] - _result("RoleGPT")["metrics"]["CUS"] / 0.1) < 0.05


def test_model_card_model_index(tmp_path):
    card_path = tmp_path / "README.md"
    card_path.write_text("---\nlicense: apache-2.0\n---\n# my-role-model\n\nTrained with RoCIT.\n", encoding="utf-8")
    result = _result("my-role-model", raw=None)
    update_model_card(card_path, result)
    card = ModelCard.load(card_path)
    assert card.data.license == "apache-2.0" and "Trained with RoCIT." in card.text
    scores = {e.metric_name: e.metric_value for e in card.data.eval_results}
    assert scores == {
        "CUS (ROUGE-L recall) [system]": 0.3294,
        "SPE (ROUGE-L recall) [system]": 0.3814,
        "Avg. (ROUGE-L recall) [system]": round((0.3294 + 0.3814) / 2, 4),
    }
    assert {(e.dataset_type, e.dataset_config, e.dataset_split) for e in card.data.eval_results} == {
        ("ZenMoore/RoleBench", "en-instruction", "test")
    }
    assert card.data.model_name == "my-role-model"

    # a new run of the same benchmark replaces its entries; another config's are kept
    newer = copy.deepcopy(result)
    newer["metrics"]["SPE"] = 0.4
    update_model_card(card_path, newer)
    update_model_card(card_path, _result("my-role-model", dataset_name="zh", raw=None))
    entries = ModelCard.load(card_path).data.eval_results
    assert len(entries) == 6
    assert [e.metric_value for e in entries if e.dataset_config == "en-instruction" and "SPE" in e.metric_name] == [
        0.4
    ]


def test_model_card_created_when_missing(tmp_path):
    path = update_model_card(tmp_path / "new-model" / "README.md", _result("new-model", raw=None, win_rate=0.5582))
    card = ModelCard.load(path)
    assert card.data.model_name == "new-model"
    assert {e.metric_name: e.metric_value for e in card.data.eval_results}["Win rate vs RoleGPT [system]"] == 0.5582
    assert "model-index:" in path.read_text(encoding="utf-8")
