"""The answers a judged model is compared against: the release's RoleGPT answers, or another run's predictions.

Answers are matched to the rows scored on (subset, role, question) as released, so a baseline run may cover more
rows, in any order, than the run it is compared with.

>>> rows = [{"subset": "general", "role": "李白", "question": "你好"}]
>>> match_answers(rows, [{**rows[0], "prediction": "幸会。"}], "prediction", "demo")
['幸会。']
"""

from pathlib import Path

from rolellm.roles.profile import DataFormatError, parse_json_line, read_json_file, read_text


def _match_key(row: dict) -> tuple:
    # the question as released: stripping it would merge distinct English questions (" Q" and " Q ")
    return row["subset"], row["role"], row["question"]


def match_answers(rows: list[dict], answered, answer_field: str, source: str) -> list[str]:
    """The answer of `answered` (rows with `subset`, `role`, `question` and `answer_field`) to each of `rows`,
    matched on (subset, role, question) as released; a question asked twice of one role is answered in file order.

    Raises:
        `ValueError`: naming `source` and the rows that have no answer there.
    """
    answers = {}
    for row in answered:
        answer = row[answer_field]
        answers.setdefault(_match_key(row), []).append(answer[0] if isinstance(answer, list) else answer)
    predictions, missing = [], []
    for row in rows:
        found = answers.get(_match_key(row))
        if found:
            predictions.append(found.pop(0))
        else:
            missing.append(row)
    if missing:
        first = missing[0]
        raise ValueError(
            f"{len(missing)} of {len(rows)} rows have no answer in {source}, e.g. {first['subset']} row of "
            f"{first['role']!r}: {first['question'][:60]!r}; it must cover the rows scored"
        )
    return predictions


def rolegpt_predictions(rows: list[dict], baseline) -> list[str]:
    """The release's RoleGPT answer to each row (`match_answers` on the `rolegpt_baseline` split)."""
    return match_answers(rows, baseline, "generated", "the rolegpt_baseline split")


def read_predictions_folder(folder: str | Path, rows: list[dict]) -> tuple[list[str], str]:
    """The answers a `rolellm evaluate` run wrote to `<folder>/generations.jsonl` for `rows`, and that run's model
    label (from its `results.json`, else the folder name).

    Raises:
        `FileNotFoundError`: when the folder has no `generations.jsonl`.
        `ValueError`: naming the file and line of a malformed record, or the rows it does not answer.
    """
    path = Path(folder) / "generations.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"baseline={str(folder)!r} has no generations.jsonl: pass the output_dir of a rolellm evaluate run that "
            "generated answers (or baseline='rolegpt' for the release's RoleGPT answers)"
        )
    records = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = parse_json_line(line, path, number)
        except DataFormatError as error:
            raise DataFormatError(f"{error}; was the run cut short?") from None
        missing = [key for key in ("subset", "role", "question", "prediction") if key not in record]
        if missing:
            raise DataFormatError(f"{path}:{number}: not a generation record (no {', '.join(missing)})")
        records.append({key: record[key] for key in ("subset", "role", "question", "prediction")})
    results = Path(folder) / "results.json"
    label = Path(folder).name
    if results.exists() or results.is_symlink():
        run = read_json_file(results, "results.json of the baseline run")
        if not isinstance(run, dict) or not isinstance(run.get("model"), str):
            raise DataFormatError(f"{results}: not the results.json of a rolellm evaluate run (no 'model' name)")
        label = run["model"]
    return match_answers(rows, records, "prediction", str(path)), label
