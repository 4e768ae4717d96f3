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

# descriptions and catchphrases for profiles from their dialogue (`profile` is another name of `describe`)
rolellm generate describe --config examples/recipes/generate_profile.yaml
```

The output folder is a RoleBench release of its own (`rolebench-{lang}/`, `profiles-{lang}/`, `instructions-{lang}/`)
that `rolellm train --data_dir`, `rolellm evaluate --data_dir` and `load_rolebench(..., data_dir=)` read as it is;
runs into the same folder add up (each job's config, stats and failures go to `generation/<job>/`).

Answers are cached in `--cache_path` (default `<output_dir>/cache.sqlite`): a run that stops — even killed — and is
started again sends no answered request twice. API keys come only from `OPENAI_API_KEY`, never from flags or
recipes. Command-line flags override the values of `--config`.
"""

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rolellm.clients.config import ClientConfig, check_endpoints, make_client
from rolellm.generation.context_instruct import ContextInstructConfig
from rolellm.generation.job import FAILURES_NAME
from rolellm.generation.profile_description import ProfileDescriptionConfig
from rolellm.generation.rolegpt import RoleGPTConfig
from rolellm.roles.resolve import PROFILES_HELP, merge_deprecated_sources, profiles_field, profiles_for
from rolellm.scripts.exit_codes import EXIT_PARTIAL
from rolellm.scripts.recipe import dataclasses_from, recipe_parser_class


@dataclass
class GenerateArguments:
    """What every `rolellm generate` command reads, answers with and writes.

    > Parameters that control the input and output

    Args:
        profiles (`list[str]`): one or more profile sources `rolellm.roles.load_profiles` reads (`--profiles`,
            repeatable): a release folder, a `profiles-{lang}/` folder, a screenplay folder (`desc.json` +
            `{script}-{role}.jsonl`), a `desc.json`, a Character Card or a folder of cards, a screenplay file (with
            `roles`).
        profiles_dir (`str`, *optional*): deprecated alias of `profiles`.
        lang (`Literal["en", "zh"]`, *optional*): the profiles' language (default: every language of a release
            folder; guessed from the text of screenplays and cards).
        roles (`list[str]`, *optional*): only these roles, spelled as in the profiles or not (`Dr. Frank N Furter`
            finds `Dr. Frank-N-Furter`); default: every role with dialogue.
        output_dir (`str`): the release folder the data and profiles are added to (`generation_config.json`,
            `generation_stats.json` and `failures.jsonl` go to its `generation/<job>/`).

    > Parameters that control the chat client

    Args:
        backend (`Literal["openai", "local"]`, *optional*, defaults to `"openai"`): an OpenAI-compatible endpoint, or
            a `transformers` model run in-process.
        model (`str`): the endpoint's model name, or the local model's folder / Hub id.
        base_url (`str`, *optional*): the endpoint (`http://localhost:8000/v1`); defaults to `$OPENAI_BASE_URL`.
        max_concurrency (`int`, *optional*, defaults to 16): requests in flight at once (endpoint).
        requests_per_minute (`int`, *optional*): request rate limit (endpoint).
        timeout (`float`, *optional*, defaults to 120.0): seconds before a request is retried (endpoint).
        max_retries (`int`, *optional*, defaults to 6): retries of a request before it counts as failed (endpoint).
        batch_size (`int`, *optional*, defaults to 8): prompts per batch (local).
        chat_template (`str`, *optional*): a chat template for a local model without one (`"chatml"`).
        cache_path (`str`, *optional*): the answer cache, defaults to `<output_dir>/cache.sqlite`.
        allow_partial (`bool`, *optional*, defaults to `False`): exit 0 although some requests failed (they are
            listed in `<output_dir>/generation/<job>/failures.jsonl` either way; without it the exit code is 1).
        dry_run (`bool`, *optional*, defaults to `False`): print how many requests the run would send (and how many
            the cache already answers) with an estimate of their tokens, then stop without sending or writing.
    """

    output_dir: str = field(metadata={"help": "Release folder the data and profiles are added to."})
    model: str = field(metadata={"help": "Endpoint model name, or the local model's folder / Hub id."})
    profiles: list[str] | None = profiles_field()
    profiles_dir: str | None = field(default=None, metadata={"help": "Deprecated: use --profiles."})
    lang: Literal["en", "zh"] | None = field(default=None, metadata={"help": "The profiles' language."})
    roles: list[str] | None = field(default=None, metadata={"help": "Only these roles."})
    backend: Literal["openai", "local"] = field(default="openai", metadata={"help": "Where answers come from."})
    base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint URL."})
    max_concurrency: int = field(default=16, metadata={"help": "Requests in flight at once (endpoint)."})
    requests_per_minute: int | None = field(default=None, metadata={"help": "Request rate limit (endpoint)."})
    timeout: float = field(default=120.0, metadata={"help": "Seconds before a request is retried (endpoint)."})
    max_retries: int = field(default=6, metadata={"help": "Retries of a request before it counts as failed."})
    batch_size: int = field(default=8, metadata={"help": "Prompts per batch (local)."})
    chat_template: str | None = field(default=None, metadata={"help": "Chat template for a local model ('chatml')."})
    cache_path: str | None = field(
        default=None, metadata={"help": "Answer cache (default <output_dir>/cache.sqlite)."}
    )
    allow_partial: bool = field(
        default=False, metadata={"help": "Exit 0 when some requests failed (they are listed in failures.jsonl)."}
    )
    dry_run: bool = field(
        default=False, metadata={"help": "Print the requests and tokens the run would send; send nothing."}
    )

    def __post_init__(self):
        self.profiles = merge_deprecated_sources(self.profiles, profiles_dir=self.profiles_dir)
        self.profiles_dir = None
        if not self.profiles:
            raise ValueError(f"the following argument is required: --profiles ({PROFILES_HELP})")

    def client_config(self) -> ClientConfig:
        """The chat client these arguments describe."""
        return ClientConfig(
            self.model, backend=self.backend, base_url=self.base_url, max_concurrency=self.max_concurrency,
            requests_per_minute=self.requests_per_minute, timeout=self.timeout, max_retries=self.max_retries,
            batch_size=self.batch_size,
            chat_template=self.chat_template, cache_path=self.cache_path or str(Path(self.output_dir) / "cache.sqlite"),
        )  # fmt: skip


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
    "rolegpt": ((GenerateArguments, InstructionArguments, RoleGPTConfig), "RoleGPT answers to general instructions."),
    "context-instruct": ((GenerateArguments, ContextInstructConfig), "Context-Instruct role-specific items."),
    "describe": ((GenerateArguments, ProfileDescriptionConfig), "Role descriptions and catchphrases from dialogue."),
}
ALIASES = {"describe": ["profile"]}


def make_parser(subparsers=None):
    description = "Generate RoleBench-style data from role profiles with an LLM."
    if subparsers is not None:
        parser = subparsers.add_parser("generate", help=description, description=description)
    else:
        parser = argparse.ArgumentParser(prog="rolellm generate", description=description)
    commands = parser.add_subparsers(
        dest="generator", metavar="<generator>", required=True, parser_class=recipe_parser_class()
    )
    for name, (dataclass_types, help_text) in SUBCOMMANDS.items():
        sub = commands.add_parser(
            name, aliases=ALIASES.get(name, []), dataclass_types=dataclass_types, help=help_text, description=help_text
        )
        sub.add_argument("--config", help="YAML recipe of the fields below (flags given here override it).")
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


def describe_folder(folder) -> str:
    """What a release folder now serves: its RoleBench configs with their splits, and how to train on it."""
    from rolellm.data.layout import CONFIG_NAMES, available_splits

    found = {name: available_splits(folder, name) for name in CONFIG_NAMES if not name.startswith("profiles-")}
    configs = ", ".join(f"{name} ({'/'.join(splits)})" for name, splits in found.items() if splits)
    if not configs:
        return f"{folder} holds no RoleBench rows yet (only profiles)"
    return (
        f"{folder} holds the RoleBench configs {configs}: rolellm train --data_dir {folder} --dataset_configs CONFIG"
    )


def main(args=None):
    if args is None:
        args = make_parser().parse_args()
    generator_name = next(name for name in SUBCOMMANDS if args.generator in (name, *ALIASES.get(name, [])))
    dataclass_types, _ = SUBCOMMANDS[generator_name]
    built = dataclasses_from(args, dataclass_types)
    job, config = built[0], built[-1]
    profiles = profiles_for(job.profiles, lang=job.lang, roles=job.roles).values()
    profiles = list(profiles) if job.roles else [p for p in profiles if p.dialogue]  # else every role with dialogue
    client = make_client(job.client_config())
    if generator_name == "rolegpt":
        from rolellm.generation.rolegpt import RoleGPT

        generator = RoleGPT(config)
        inputs = (profiles, read_instructions(built[1], [p.name for p in profiles]))
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
    print(result.dataset)
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
