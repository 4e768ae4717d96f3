"""The HTML and Markdown reports: numbers equal to the results, charts as SVG with the role names kept as text,
transcripts as a readable page the reports link into."""

import json
import re

from huggingface_hub import ModelCard

from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.evaluation.benchmark.report import update_model_card, write_report
from rolellm.evaluation.multiturn.report import write_dialogue_report
from rolellm.evaluation.multiturn.rubric import DIMENSIONS, judge_transcripts
from rolellm.evaluation.pages import markdown_to_html
from rolellm.evaluation.runlog import write_records
from rolellm.roles.profile import RoleProfile
from rolellm.scripts import cli
from rolellm.testing.server import ChatCompletionsServer


def svg_texts(svg: str) -> list[str]:
    """The strings of the `<text>` elements of an SVG (what a browser draws with its fonts)."""
    return [re.sub(r"<[^>]+>", "", text) for text in re.findall(r"<text[^>]*>(.*?)</text>", svg, re.DOTALL)]


def judged_result(model, win_rate, lc_win_rate, baseline="RoleGPT"):
    return {
        "model": model, "dataset_name": "zh", "split": "test", "mode": "system", "avg_over": ["CUS", "SPE"],
        "metrics": {"CUS": 0.5, "RAW": None, "SPE": 0.25, "avg": 0.375, "win_rate": win_rate},
        "per_role": {"孙悟空": {"CUS": 0.5, "RAW": None, "SPE": 0.25, "avg": 0.375, "n_CUS": 2, "n_RAW": 0, "n_SPE": 2},
                     "华妃": {"CUS": 0.4, "RAW": None, "SPE": 0.2, "avg": 0.3, "n_CUS": 2, "n_RAW": 0, "n_SPE": 2}},
        "per_type": {}, "answer_length": {"chars": 42.5, "answers": 8},
        "win_rate": {"win_rate": win_rate, "ci_low": win_rate - 0.1, "ci_high": win_rate + 0.1, "lc_win_rate": lc_win_rate,
                     "lc_ci_low": lc_win_rate - 0.2, "lc_ci_high": lc_win_rate + 0.2, "average_rank": 1.25,
                     "baseline_length": 30.0, "model_length": 42.5, "wins": 5, "ties": 2, "losses": 1, "failed": 0,
                     "baseline": baseline},
    }  # fmt: skip


def test_benchmark_report_shows_win_rates_lengths_and_role_names_as_text(tmp_path):
    results = [judged_result("rolellama", 0.75, 0.5625), judged_result("qwen", 0.4, 0.45, baseline="rolellama")]
    (tmp_path / "agreement.json").write_text(json.dumps({
        "scores": {}, "choices": {"n": 12, "kappa": 0.61, "kappa_ci": [0.3, 0.9], "confusion": {}},
    }))  # fmt: skip
    files = write_report(results, tmp_path)
    markdown = files["table"].read_text(encoding="utf-8")
    assert (
        "| rolellama | zh | 42.5 | RoleGPT | 75.00 [65.00, 85.00] | 56.25 [36.25, 76.25] | 1.25 | 30.0 | 5 / 2 / 1 / 0 |"
        in markdown
    )
    assert "| qwen | zh | 42.5 | rolellama | 40.00 [30.00, 50.00] | 45.00 [25.00, 65.00] |" in markdown
    assert "| pairwise choice | 12 | Cohen's kappa 0.610 [0.300, 0.900] | |" in markdown
    win_rate_svg = files["win_rate"].read_text(encoding="utf-8")
    assert {"rolellama vs RoleGPT", "qwen vs rolellama", "75.0", "56.2", "40.0", "45.0"} <= set(
        svg_texts(win_rate_svg)
    )
    assert {"孙悟空", "华妃"} <= set(svg_texts(files["per_role"].read_text(encoding="utf-8")))
    page = files["html"].read_text(encoding="utf-8")
    # every chart is inline SVG (4: per role, comparison, lengths, win rate), the names as text the browser draws
    assert page.count("<svg") == 4 and "<img" not in page
    assert {"孙悟空", "华妃", "rolellama vs RoleGPT"} <= set(svg_texts(page))
    assert "<td>75.00 [65.00, 85.00]</td>" in page and "<td>孙悟空</td>" in page
    card = update_model_card(
        tmp_path / "README.md", {**results[1], "metrics": {**results[1]["metrics"], "lc_win_rate": 0.45}}
    )
    entries = {e.metric_name: e.metric_value for e in ModelCard.load(card).data.eval_results}
    assert entries["Win rate vs rolellama [system]"] == 0.4
    assert entries["Length-controlled win rate vs rolellama [system]"] == 0.45


def rubric_judge(offset):
    def answer(body):  # scores follow the role: Jack Sparrow 4, 孙悟空 2 (+ offset for the second judge)
        base = 4 if "Jack Sparrow" in body["messages"][-1]["content"] else 2
        return json.dumps({d: {"score": base + offset, "rationale": f"<b>{d}</b> ok"} for d in DIMENSIONS})

    return answer


def test_dialogue_report_tables_radar_and_transcript_links(tmp_path):
    profiles = {
        "Jack Sparrow": RoleProfile("Jack Sparrow", "en", "A pirate."),
        "孙悟空": RoleProfile("孙悟空", "zh", "齐天大圣。"),
    }
    transcripts = [
        {"id": f"{role}-{n}", "role": role, "lang": profiles[role].lang, "model": "tiny", "user_model": "sim",
         "scenario": {"situation": f"Scene {n} <at sea>", "user_persona": "A sailor"}, "greeting": "",
         "turns": [{"user": "Where is the rum?", "assistant": "Gone & forgotten." if role == "Jack Sparrow" else "俺老孙来也！"}],
         "complete": True, "error": None}
        for role in profiles for n in range(2)
    ]  # fmt: skip
    write_records(transcripts, tmp_path / "transcripts.jsonl")
    with ChatCompletionsServer(rubric_judge(0)) as a, ChatCompletionsServer(rubric_judge(1)) as b:
        judges = [
            OpenAIChatClient(n, base_url=s.base_url, progress=False) for n, s in (("judge-a", a), ("judge-b", b))
        ]
        scores = judge_transcripts(transcripts, profiles, judges)
    (tmp_path / "scores.json").write_text(json.dumps(scores, ensure_ascii=False), encoding="utf-8")
    files = write_dialogue_report(tmp_path)
    markdown = files["report"].read_text(encoding="utf-8")
    assert scores["summary"]["per_role"]["孙悟空"]["knowledge"] == 2.5
    assert "| 孙悟空 | " + " | ".join(["2.50"] * len(DIMENSIONS)) + " | 6.0 |" in markdown
    assert "| Jack Sparrow | " + " | ".join(["4.50"] * len(DIMENSIONS)) + " | 17.0 |" in markdown
    assert "| judge-b | " + " | ".join(["4.00"] * len(DIMENSIONS)) + " |" in markdown
    alpha = scores["agreement"]["memory"]["krippendorff_alpha"]
    assert f"| memory | 3.50 | 4 | {alpha:.3f} |" in markdown
    assert "[孙悟空-1](transcripts.html#孙悟空-1)" in markdown
    radar = files["radar"].read_text(encoding="utf-8")
    assert {"孙悟空", "Jack Sparrow", "6 chars/answer", "character consistency"} <= {
        line for text in svg_texts(radar) for line in text.splitlines()
    }
    page = files["html"].read_text(encoding="utf-8")
    assert page.count("<svg") == 2 and '<a href="transcripts.html#孙悟空-1">孙悟空-1</a>' in page
    conversations = files["transcripts"].read_text(encoding="utf-8")
    assert all(f'<section id="{t["id"]}">' in conversations for t in transcripts)
    # text from the model, the scenario and the judges is escaped, never markup
    assert "Gone &amp; forgotten." in conversations and "Scene 0 &lt;at sea&gt;" in conversations
    assert "&lt;b&gt;memory&lt;/b&gt; ok" in conversations and "<b>memory</b>" not in conversations
    # rolellm judge agreement on the folder writes the report again, now with the agreement with people
    humans = [{"id": t["id"], "scores": {"memory": 5 if t["role"] == "Jack Sparrow" else 1}} for t in transcripts]
    (tmp_path / "human.jsonl").write_text("".join(json.dumps(h, ensure_ascii=False) + "\n" for h in humans), "utf-8")
    assert cli.main(["judge", "agreement", "--human", str(tmp_path / "human.jsonl"), "--results", str(tmp_path)]) == 0
    markdown = files["report"].read_text(encoding="utf-8")
    assert "## Agreement with people" in markdown and "| memory | 4 | 1.000 [1.000, 1.000] |" in markdown
    assert "<h2>Agreement with people</h2>" in files["html"].read_text(encoding="utf-8")


def test_dialogue_report_without_judges_and_markdown_escaping(tmp_path):
    write_records([{"id": "po-0", "role": "Po", "turns": [{"user": "Hi", "assistant": "Skadoosh!"}]}],
                      tmp_path / "transcripts.jsonl")  # fmt: skip
    files = write_dialogue_report(tmp_path)
    assert sorted(files) == ["html", "report", "transcripts"]
    assert "No judge scored these conversations" in files["report"].read_text(encoding="utf-8")
    assert "Skadoosh!" in files["transcripts"].read_text(encoding="utf-8")
    page = markdown_to_html("Text <script>x</script> and [a link](b.html).\n\n![missing](nothing.svg)", tmp_path)
    assert "&lt;script&gt;" in page and '<a href="b.html">a link</a>' in page and '<img alt="missing"' in page


def test_a_radar_draws_missing_scores_as_n_a_not_as_the_minimum():
    from rolellm.evaluation.charts import radar_chart

    per_role = {"孙悟空": {"memory": None, "knowledge": None}, "Po": {"memory": 4.0, "knowledge": None}}
    texts = {line for text in svg_texts(radar_chart(per_role)) for line in text.splitlines()}
    assert {"memory (n/a)", "knowledge (n/a)", "memory", "n/a"} <= texts  # 孙悟空: nothing judged; Po: one dimension
    full = {
        line
        for text in svg_texts(radar_chart({"Po": {"memory": 4.0, "knowledge": 2.0}}))
        for line in text.splitlines()
    }
    assert not any("n/a" in text for text in full)


def bars(svg: str) -> list[tuple[float, float]]:
    """The (x, width) of each bar of a `bar_chart`, top to bottom."""
    return [(float(x), float(w)) for x, w in re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)]


def test_a_bar_chart_is_svg_with_its_text_as_text_and_bars_to_scale():
    import xml.etree.ElementTree as ElementTree

    from rolellm.evaluation.charts import bar_chart

    svg = bar_chart({"孙悟空": 400.0, "Jack Sparrow & co": 100.0, "华妃": None}, "characters <per> answer", "Lengths")
    ElementTree.fromstring(svg)  # well-formed: the labels' & and < escaped
    texts = svg_texts(svg)
    assert {
        "孙悟空",
        "Jack Sparrow &amp; co",
        "华妃",
        "400",
        "100",
        "n/a",
        "Lengths",
        "characters &lt;per&gt; answer",
    } <= set(texts)
    (x0, long), (x1, short), (x2, empty) = bars(svg)
    assert x0 == x1 == x2 and empty == 0 and abs(long - 4 * short) < 0.5
    assert "0" in texts and "400" in texts  # the axis' ticks from 0 up to the longest bar
    wide = bar_chart({"孙悟空" * 6: 1.0}, "x", "t")
    narrow = bar_chart({"Po": 1.0}, "x", "t")
    assert bars(wide)[0][0] > bars(narrow)[0][0] + 100  # a long name pushes the bars right, it is not cut
    assert svg_texts(bar_chart({}, "x", "t"))[0] == "t" and "n/a" in svg_texts(bar_chart({"Po": None}, "x", "t"))


def test_a_win_rate_chart_draws_each_interval_the_tie_line_and_n_a():
    import xml.etree.ElementTree as ElementTree

    from rolellm.evaluation.charts import win_rate_chart

    judged = {"win_rate": 0.75, "ci_low": 0.6, "ci_high": 0.9, "lc_win_rate": 0.5, "lc_ci_low": 0.3, "lc_ci_high": 0.7}
    unjudged = dict.fromkeys(judged)
    svg = win_rate_chart([{"label": "rolellama vs RoleGPT", **judged}, {"label": "qwen vs rolellama", **unjudged}])
    ElementTree.fromstring(svg)
    assert {"rolellama vs RoleGPT", "qwen vs rolellama", "75.0", "50.0", "raw", "length-controlled"} <= set(
        svg_texts(svg)
    ) and svg_texts(svg).count("n/a") == 2
    (_, raw), (_, lc), (_, none_raw), (_, none_lc) = bars(svg)[2:]  # after the legend's two squares
    assert abs(raw / lc - 1.5) < 0.01 and none_raw == none_lc == 0
    intervals = re.findall(r'<path d="M([\d.]+) [\d.]+H([\d.]+)', svg)
    assert len(intervals) == 2  # the judged bars' (an unjudged one has none)
    per_point = raw / 75
    (low, high), _ = ((float(a), float(b)) for a, b in intervals)
    assert abs((high - low) - 30 * per_point) < 0.2  # 60%-90%
    [tie] = re.findall(r'<line x1="([\d.]+)"[^>]*stroke-dasharray', svg)
    assert abs(float(tie) - (bars(svg)[2][0] + 50 * per_point)) < 0.2  # the 50% line
