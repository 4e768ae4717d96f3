"""`rolellm generate`: RoleBench-style data from role profiles with an LLM (RoleGPT, Context-Instruct, descriptions).

```bash
# RoleGPT answers to general instructions, from a vLLM (or any OpenAI-compatible) server
rolellm generate rolegpt --config examples/recipes/generate_rolegpt.yaml --base_url http://localhost:8000/v1

# Context-Instruct role-specific items with a local transformers model (no API key, no server)
rolellm generate context-instruct --profiles ../shared/data/roleglm-screenplay/profile_zhenhuan \
    --roles 华妃 --backend local --model ./my-model --output_dir runs/ci

# a Character Card and a screenplay file at once (any profile source, repeatable)
rolellm generate context-instruct --profiles my_card.png --profiles script.txt --roles "Ada Quill" "Moss" \
    --model gpt-4o-mini --output_dir runs/ci-mine

# descriptions and catchphrases for profiles from their dialogue
rolellm generate describe --config examples/recipes/generate_profile.yaml

# preference pairs for DPO/KTO: 4 answers per question from a RoCIT adapter, ranked by the paper's judge
rolellm generate preferences --model runs/rocit-adapter --judge_model gpt-4o --judge_base_url https://api.openai.com/v1 \
    --data_dir runs/data --dataset_configs en-instruction --output_dir runs/data
# SillyTavern chats as pairs (the kept swipe chosen, the others rejected), no model needed
rolellm generate sillytavern --chats chats/*.jsonl --profiles my_card.png --output_dir runs/data
```

The output folder is a RoleBench release of its own (`rolebench-{lang}/`, `profiles-{lang}/`, `instructions-{lang}/`)
that `rolellm train --data_dir`, `rolellm evaluate --data_dir` and `load_rolebench(..., data_dir=)` read as it is;
runs into the same folder add up (each job's config, stats and failures go to `generation/<job>/`).

Answers are cached in `--cache_path` (default `<output_dir>/cache.sqlite`): a run that stops — even killed — and is
started again sends no answered request twice. API keys come only from environment variables, never from flags or
recipes: `OPENAI_API_KEY` for the main endpoint and its host, the one `--judge_api_key_env` names for a judge
elsewhere. Command-line flags override the values of `--config`.
"""

import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Literal

from rolellm.clients.config import ClientConfig, check_endpoints, derive_client, endpoint_options, make_client
from rolellm.data.preference import read_sillytavern_chat
from rolellm.generation.context_instruct import ContextInstructConfig
from rolellm.generation.job import FAILURES_NAME
from rolellm.generation.profile_description import ProfileDescriptionConfig
from rolellm.generation.rolegpt import RoleGPTConfig
from rolellm.roles.profile import check_output_folder
from rolellm.roles.resolve import PROFILES_HELP, as_sources, profiles_field, profiles_for
from rolellm.scripts.cli import setup_logging
from rolellm.scripts.exit_codes import EXIT_PARTIAL
from rolellm.scripts.recipe import dataclasses_from, make_command_group, make_command_parser


@dataclass
class GenerateArguments:
    """What every `rolellm generate` command reads, answers with and writes.

    > Parameters that control the input and output

    Args:
        profiles (`list[str]`): one or more profile sources `rolellm.load_profiles` reads (`--profiles`,
            repeatable): a release folder, a `profiles-{lang}/` folder, a screenplay folder (`desc.json` +
            `{script}-{role}.jsonl`), a `desc.json`, a Character Card or a folder of cards, a screenplay file (with
            `roles`).
        lang (`Literal["en", "zh"]`, *optional*): the profiles' language (default: every language of a release
            folder; guessed from the text of screenplays and cards).
        roles (`list[str]`, *optional*): only these roles, spelled as in the profiles or not (`Dr. Frank N Furter`
            finds `Dr. Frank-N-Furter`); default: every role with dialogue.
        output_dir (`str`): the release folder the data and profiles are added to (`generation_config.json`,
            `generation_stats.json` and `failures.jsonl` go to its `generation/<job>/`).

    The chat client is `ClientConfig`, whose flags every `rolellm generate` command takes (`--model`, `--backend`,
    `--base_url`, `--max_concurrency`, ...); its answers are cached in `<output_dir>/cache.sqlite` unless
    `--cache_path` is given.

    > Parameters that control the run

        allow_partial (`bool`, *optional*, defaults to `False`): exit 0 although some requests failed (they are
            listed in `<output_dir>/generation/<job>/failures.jsonl` either way; without it the exit code is 1).
        dry_run (`bool`, *optional*, defaults to `False`): print how many requests the run would send (and how many
            the cache already answers) with an estimate of their tokens, then stop without sending or writing.
    """

    output_dir: str = field(metadata={"help": "Release folder the data and profiles are added to."})
    profiles: list[str] | None = profiles_field()
    lang: Literal["en", "zh"] | None = field(default=None, metadata={"help": "The profiles' language."})
    roles: list[str] | None = field(default=None, metadata={"help": "Only these roles."})
    allow_partial: bool = field(
        default=False, metadata={"help": "Exit 0 when some requests failed (they are listed in failures.jsonl)."}
    )
    dry_run: bool = field(
        default=False, metadata={"help": "Print the requests and tokens the run would send; send nothing."}
    )

    def __post_init__(self):
        self.profiles = as_sources(self.profiles)
        if not self.profiles and self.needs_profiles:
            raise ValueError(f"the following argument is required: --profiles ({PROFILES_HELP})")
        check_output_folder(self.output_dir)  # before anything is asked: the answers would have nowhere to go

    needs_profiles: ClassVar[bool] = True  # the generators that read no release folder have no other source


@dataclass
class PreferenceGenerateArguments(GenerateArguments):
    """`GenerateArguments` of `rolellm generate preferences`: the profiles are read as `rolellm train` and `rolellm
    evaluate` read them (`rolellm.roles.resolve.profiles_for`): the `--data_dir` release's `profiles-*/`, then
    `--profiles`, else the model folder's `role_profiles.jsonl`; `--profiles` is needed only where neither has the
    questions' roles."""

    profiles: list[str] | None = profiles_field(
        help=f"Profile sources beside --data_dir's profiles-*/ and the model folder's ({PROFILES_HELP})."
    )
    needs_profiles: ClassVar[bool] = False


def client_config(client: ClientConfig, job: GenerateArguments) -> ClientConfig:
    """`client`, caching its answers in `<output_dir>/cache.sqlite` unless it names its own `cache_path`."""
    if client.cache_path is not None:
        return client
    return replace(client, cache_path=str(Path(job.output_dir) / "cache.sqlite"))


@dataclass
class InstructionArguments:
    """The general instructions RoleGPT answers.

    Args:
        instructions (`str`): a JSON-lines file of instructions: `instruction` (or `question`), optionally `target`
            (the raw reference answer) and `role` (answer only as that role), e.g. the release's
            `instructions-general.jsonl` or a RoleBench `general/*.jsonl` file.
        max_instructions (`int`, *optional*): only the first N instructions of each role (with a `role` column; every
            role keeps its share), else the first N instructions, each asked of every role.
    """

    instructions: str = field(
        metadata={"help": "JSON-lines file of instructions (instruction/question, target, role)."}
    )
    max_instructions: int | None = field(
        default=None, metadata={"help": "Only the first N instructions of each role (of all, without a role column)."}
    )


@dataclass
class PreferenceDataArguments:
    """The questions `rolellm generate preferences` asks, and chats it reads as pairs.

    Args:
        data_dir (`str`, *optional*): a release folder whose rows give the questions (and the references).
        dataset_configs (`list[str]`, *optional*): its RoleBench configs to take questions from.
        dataset_split (`str`, *optional*, defaults to `"train"`): the split of those configs.
        max_questions (`int`, *optional*): only the first N questions.
    """

    data_dir: str = field(metadata={"help": "Release folder whose rows give the questions."})
    dataset_configs: list[str] = field(metadata={"help": "RoleBench configs of the questions."})
    dataset_split: str = field(default="train", metadata={"help": "Split of those configs."})
    max_questions: int | None = field(default=None, metadata={"help": "Only the first N questions."})

    def __post_init__(self):
        if self.max_questions is not None and self.max_questions < 1:
            raise ValueError(f"--max_questions must be at least 1, got {self.max_questions}")


@dataclass
class SillyTavernArguments:
    """SillyTavern chat exports read as preference pairs (`rolellm.data.preference.read_sillytavern_chat`): the kept
    swipe of each answer is chosen, every other swipe rejected; no model is asked.

    Args:
        chats (`list[str]`): the exported chats (`.jsonl`).
        test_fraction (`float`, *optional*, defaults to 0.1), seed (`int`, *optional*, defaults to 0): the share of
            questions written to the `test` split (a stable hash of role and question).
    """

    chats: list[str] = field(metadata={"help": "SillyTavern chat exports (.jsonl)."})
    test_fraction: float = field(default=0.1, metadata={"help": "Share of questions in the test split."})
    seed: int = field(default=0, metadata={"help": "Seed of the split."})


JudgeOptions = endpoint_options("judge", model_help="Judge model ranking the answers (pairwise or rubric).")


def _preference_types():
    from rolellm.evaluation.preference import PreferenceConfig

    return (ClientConfig, PreferenceGenerateArguments, PreferenceDataArguments, JudgeOptions, PreferenceConfig)


SUBCOMMANDS = {
    "rolegpt": (
        (ClientConfig, GenerateArguments, InstructionArguments, RoleGPTConfig),
        "RoleGPT answers to general instructions.",
    ),
    "context-instruct": (
        (ClientConfig, GenerateArguments, ContextInstructConfig),
        "Context-Instruct role-specific items.",
    ),
    "describe": (
        (ClientConfig, GenerateArguments, ProfileDescriptionConfig),
        "Role descriptions and catchphrases from dialogue.",
    ),
    "preferences": (None, "Preference pairs for DPO/KTO: answers of the model ranked by a judge."),
    "sillytavern": ((GenerateArguments, SillyTavernArguments), "SillyTavern chats as preference pairs (swipes)."),
}


def make_parser(subparsers=None):
    description = "Generate RoleBench-style data from role profiles with an LLM."
    parser, commands = make_command_group("generate", description, subparsers, "generator", "<generator>")
    for name, (dataclass_types, help_text) in SUBCOMMANDS.items():
        make_command_parser(name, dataclass_types or _preference_types(), help_text, commands)
    return parser


def read_instructions(args: InstructionArguments, roles: list[str]):
    """The instructions file as a `Dataset`, each line checked (an error names the file, the line and the field); rows
    of a `role` column naming another role than `roles` are left out, and the count kept is printed."""
    import datasets

    from rolellm.roles.profile import DataFormatError, parse_json_line, read_text

    if args.max_instructions is not None and args.max_instructions < 1:
        raise ValueError(f"--max_instructions {args.max_instructions}: keep at least 1 (leave it out to keep all)")
    records, first, repeats = [], {}, []
    for line_no, line in enumerate(read_text(args.instructions).splitlines(), start=1):
        if not line.strip():
            continue
        record = parse_json_line(line, args.instructions, line_no)
        text = record.get("instruction", record.get("question"))
        if not isinstance(text, str) or not text.strip():
            raise DataFormatError(f"{args.instructions}:{line_no}: field 'instruction' (or 'question') must be a "
                                  f"non-empty string, got {text!r}")  # fmt: skip
        for name in ("role", "target"):
            if record.get(name) is not None and not isinstance(record[name], str):
                raise DataFormatError(f"{args.instructions}:{line_no}: field {name!r} must be a string, got "
                                      f"{record[name]!r}")  # fmt: skip
        key = (record.get("role"), text.strip())
        if key in first:
            repeats.append(f"line {line_no} repeats line {first[key]}")
        first.setdefault(key, line_no)
        records.append(record)
    if repeats:  # kept (each line is a row), but a repeated question is usually a mistake of the file
        warnings.warn(
            f"{args.instructions}: {len(repeats)} of {len(records)} instructions repeat an earlier one for the same "
            f"role ({', '.join(repeats[:5])}{', ...' if len(repeats) > 5 else ''}); each is kept",
            stacklevel=2,
        )
    columns = list(dict.fromkeys(name for record in records for name in record))
    instructions = datasets.Dataset.from_list([{name: record.get(name) for name in columns} for record in records])
    if "role" in instructions.column_names:
        kept = set(roles)
        before = len(instructions)
        instructions = instructions.filter(lambda row: row["role"] in kept)
        print(f"{args.instructions}: {len(instructions)} of {before} instructions are for the roles {sorted(kept)}")
        if not len(instructions):
            raise ValueError(
                f"{args.instructions}: no instruction is for the roles {sorted(kept)} (its 'role' column)"
            )
    if args.max_instructions is not None and "role" in instructions.column_names:
        seen, keep = Counter(), []
        for index, role in enumerate(instructions["role"]):
            seen[role] += 1
            if seen[role] <= args.max_instructions:
                keep.append(index)
        instructions = instructions.select(keep)
    elif args.max_instructions is not None:
        instructions = instructions.select(range(min(args.max_instructions, len(instructions))))
    return instructions


def describe_rows(dataset) -> str:
    """What a run made, in words: rows per split (`9 train, 2 test, 11 rolegpt_baseline rows`)."""
    splits = dataset.items() if hasattr(dataset, "items") else [("", dataset)]
    return ", ".join(f"{part.num_rows} {name} rows".replace("  ", " ") for name, part in splits)


def describe_folder(folder) -> str:
    """What a release folder now serves: its RoleBench configs with their splits, and how to train on it."""
    from rolellm.data.layout import CONFIG_NAMES, available_splits, configs_with_split

    found = {name: available_splits(folder, name) for name in CONFIG_NAMES if not name.startswith("profiles-")}
    configs = ", ".join(f"{name} ({'/'.join(splits)})" for name, splits in found.items() if splits)
    if not configs:
        return f"{folder} holds no RoleBench rows yet (only profiles)"
    stages = [stage for stage, kind in (("dpo", "-preference"), ("kto", "-unpaired"))
              if any(name.endswith(kind) and "train" in splits for name, splits in found.items())]  # fmt: skip
    if stages:
        return (
            f"{folder} holds the RoleBench configs {configs}. Train on its preference data: rolellm train --stage "
            f"{stages[0]} --data_dir {folder} --model_name_or_path ROCIT_CHECKPOINT --output_dir OUT"
        )
    trainable = configs_with_split(folder, "train")
    if not trainable:
        return f"{folder} holds the RoleBench configs {configs} (no train split yet)"
    return (
        f"{folder} holds the RoleBench configs {configs}. Train on it: rolellm train --data_dir {folder} "
        f"--dataset_configs {' '.join(trainable)} --model_name_or_path MODEL --output_dir OUT"
    )


def main(args=None):
    if args is None:
        args = make_parser().parse_args()
    setup_logging()
    generator_name = args.generator
    if generator_name == "preferences":
        return generate_preferences(args)
    if generator_name == "sillytavern":
        return read_chats(*dataclasses_from(args, SUBCOMMANDS["sillytavern"][0]))
    dataclass_types, _ = SUBCOMMANDS[generator_name]
    built = dataclasses_from(args, dataclass_types)
    job, config = built[1], built[-1]
    profiles = profiles_for(job.profiles, lang=job.lang, roles=job.roles).values()
    profiles = list(profiles) if job.roles else [p for p in profiles if p.dialogue]  # else every role with dialogue
    client = make_client(client_config(built[0], job))
    if generator_name == "rolegpt":
        from rolellm.generation.rolegpt import RoleGPT

        generator = RoleGPT(config)
        inputs = (profiles, read_instructions(built[2], [p.name for p in profiles]))
    elif generator_name == "context-instruct":
        from rolellm.generation.context_instruct import ContextInstruct

        generator, inputs = ContextInstruct(config), (profiles,)
    else:
        from rolellm.generation.profile_description import ProfileDescriber

        generator, inputs = ProfileDescriber(config), (profiles,)
    if job.dry_run:
        estimate = client.estimate(generator.requests(*inputs))
        print(f"{generator.desc} would send {estimate} (dry run: nothing sent, no data written)")
        return 0
    # a dead endpoint, a refused key or an unknown model stops here, in seconds, before anything is sent
    checked = check_endpoints(client)
    estimate = client.estimate(generator.requests(*inputs))
    print(f"{'; '.join(checked) + '. ' if checked else ''}{generator.desc} will send {estimate}")
    result = generator.generate(client, *inputs, output_dir=job.output_dir)
    print(f"{generator.desc}: {describe_rows(result.dataset)}")
    print(f"Stats: {result.stats}")
    print(f"Added the data to the release folder {job.output_dir} (run files in {generator.run_dir(job.output_dir)})")
    print(describe_folder(job.output_dir))
    if result.failures:
        print(
            f"{len(result.failures)} requests failed; listed in {generator.run_dir(job.output_dir) / FAILURES_NAME}"
            + ("" if job.allow_partial else " (pass --allow_partial to accept a partial run)"),
            file=sys.stderr,
        )
        return 0 if job.allow_partial else EXIT_PARTIAL
    return 0


def generate_preferences(args) -> int:
    """`rolellm generate preferences`: sample, rank and pair answers (`rolellm.evaluation.preference`) into the
    preference configs of `--output_dir`."""
    import datasets

    from rolellm.data.builder import load_rolebench
    from rolellm.evaluation.preference import PreferenceGenerator

    client_args, job, data, judge_options, config = dataclasses_from(args, _preference_types())
    model_dir = client_args.model if client_args.runs_weights else None
    profiles = profiles_for(job.profiles, model_dir, data.data_dir, lang=job.lang, roles=job.roles)
    generator = PreferenceGenerator(config)
    parts = [load_rolebench(name, data_dir=data.data_dir, splits=[data.dataset_split])[data.dataset_split]
             for name in data.dataset_configs]  # fmt: skip
    rows = datasets.concatenate_datasets(parts)
    unprofiled = sorted({role for role in rows["role"] if profiles.find(role) is None})
    if unprofiled:  # every question is asked as its role: a role without a profile has no system text
        raise ValueError(
            f"roles {unprofiled[:5]}{' ...' if len(unprofiled) > 5 else ''} of --data_dir {data.data_dir} have no "
            f"profile in {profiles.where or 'no profile source'}: add its profiles-*/ folder, or pass --profiles"
        )
    if job.roles:
        wanted = {profiles.find(role) for role in job.roles}
        rows = rows.filter(lambda row: profiles.find(row["role"]) in wanted)
    rows = rows.select(range(min(data.max_questions or len(rows), len(rows))))
    client = make_client(client_config(client_args, job))
    judge_cache = str(Path(job.output_dir) / "judge_cache.sqlite")
    judge_config = derive_client(client_args, "judge", judge_options, cache_path=judge_cache)
    judge = make_client(judge_config) if judge_config is not None else None
    if job.dry_run:
        print(f"{generator.desc} would send {client.estimate(generator.requests(rows, profiles))} (dry run)")
        return 0
    checked = check_endpoints(client, *([judge] if judge is not None else []))
    print(f"{'; '.join(checked) + '. ' if checked else ''}{len(rows)} questions, {config.num_samples} answers each, "
          f"ranked by {config.judge}")  # fmt: skip
    result = generator.generate(client, rows, profiles, judge, output_dir=job.output_dir)
    print(
        f"{generator.desc}: {result.stats['pairs']} pairs of {len(rows)} questions; dropped {result.stats['dropped']}"
    )
    print(describe_folder(job.output_dir))
    if result.failures:
        print(
            f"{len(result.failures)} requests failed; listed in {generator.run_dir(job.output_dir) / FAILURES_NAME}"
            + (
                "" if job.allow_partial else " (pass --allow_partial to accept a partial run; run again to retry them)"
            ),
            file=sys.stderr,
        )
        return 0 if job.allow_partial else EXIT_PARTIAL
    return 0


def read_chats(job, chats) -> int:
    """`rolellm generate sillytavern`: the chats' pairs, and each answer labelled (kept: desirable), into the
    preference configs of `--output_dir`; what could not be paired is counted per file."""
    from rolellm.evaluation.preference import PreferenceGenerator
    from rolellm.generation.job import GenerationResult, check_test_fraction, stable_split

    check_test_fraction(chats.test_fraction)
    profiles = profiles_for(job.profiles, lang=job.lang, roles=job.roles)
    pairs, not_paired, seen = [], Counter(), set()
    for path in chats.chats:
        found, skipped = read_sillytavern_chat(path, lang=job.lang or "")
        not_paired.update(skipped)
        for row in found:
            name = profiles.find(row["role"])
            if name is None:
                raise ValueError(
                    f"{path}: the chat's character {row['role']!r} has no profile among {sorted(profiles)}"
                )
            key = (name, row["question"], row["chosen"], row["rejected"])
            if key in seen:  # a chat given twice, or a branch repeating its parent's turns: the pair is kept once
                not_paired["repeated"] += 1
                continue
            seen.add(key)
            split = stable_split(name, row["question"], chats.test_fraction, chats.seed)
            pairs.append({**row, "role": name, "lang": row["lang"] or profiles[name].lang, "split": split})
        print(f"{path}: {len(found)} pairs; not paired: {skipped}")
    if not_paired["repeated"]:
        print(f"{not_paired['repeated']} pairs repeated in the chats (a chat given twice, or branches) were kept once")
    if not pairs:
        raise ValueError(
            f"no preference pair in {len(chats.chats)} chat(s) (not paired: {dict(not_paired)}): a pair is an answer "
            "with another swipe, after a user message; nothing written"
        )
    if job.dry_run:
        print(f"Dry run: {len(pairs)} pairs would be added to {job.output_dir} (nothing written)")
        return 0
    labelled = {(row["role"], row["question"], row["chosen"], True): row for row in pairs}
    labelled.update({(row["role"], row["question"], row["rejected"], False): row for row in pairs})
    unpaired = [{**{k: v for k, v in row.items() if k not in ("chosen", "rejected")}, "completion": text,
                 "label": label} for (_, _, text, label), row in labelled.items()]  # fmt: skip
    made = {"preference": pairs, "unpaired": unpaired}
    PreferenceGenerator().write(Path(job.output_dir), GenerationResult(None, {}, details={"rows": made}))
    print(describe_folder(job.output_dir))
    return 0


if __name__ == "__main__":
    main()
