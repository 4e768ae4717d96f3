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
```

The output folder is a RoleBench release of its own (`rolebench-{lang}/`, `profiles-{lang}/`, `instructions-{lang}/`)
that `rolellm train --data_dir`, `rolellm evaluate --data_dir` and `load_rolebench(..., data_dir=)` read as it is;
runs into the same folder add up (each job's config, stats and failures go to `generation/<job>/`).

Answers are cached in `--cache_path` (default `<output_dir>/cache.sqlite`): a run that stops — even killed — and is
started again sends no answered request twice. API keys come only from `OPENAI_API_KEY`, never from flags or
recipes. Command-line flags override the values of `--config`.
"""

import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from rolellm.clients.config import ClientConfig, check_endpoints, make_client
from rolellm.generation.context_instruct import ContextInstructConfig
from rolellm.generation.job import FAILURES_NAME
from rolellm.generation.profile_description import ProfileDescriptionConfig
from rolellm.generation.rolegpt import RoleGPTConfig
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
        if not self.profiles:
            raise ValueError(f"the following argument is required: --profiles ({PROFILES_HELP})")


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
}


def make_parser(subparsers=None):
    description = "Generate RoleBench-style data from role profiles with an LLM."
    parser, commands = make_command_group("generate", description, subparsers, "generator", "<generator>")
    for name, (dataclass_types, help_text) in SUBCOMMANDS.items():
        make_command_parser(name, dataclass_types, help_text, commands)
    return parser


def read_instructions(args: InstructionArguments, roles: list[str]):
    """The instructions file as a `Dataset`; rows of a `role` column naming another role than `roles` are left out."""
    import datasets

    instructions = datasets.load_dataset("json", data_files=args.instructions, split="train")
    if "role" in instructions.column_names:
        kept = set(roles)
        before = len(instructions)
        instructions = instructions.filter(lambda row: row["role"] in kept)
        print(f"{args.instructions}: {len(instructions)} of {before} instructions are for the roles {sorted(kept)}")
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


if __name__ == "__main__":
    main()
