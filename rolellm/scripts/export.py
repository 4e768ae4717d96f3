"""`rolellm export`: a training checkpoint as a clean model folder, an adapter merged into its base, pushed if asked.

```bash
# merge a LoRA/QLoRA checkpoint into a full model that loads with transformers alone
rolellm export runs/rolellama-lora --merge --output_dir runs/rolellama-merged

# the same, uploaded to the Hub in one commit (token from `hf auth login` or $HF_TOKEN)
rolellm export runs/rolellama-lora/checkpoint-500 --merge --output_dir merged --push_to_hub <user>/rolellama

# a GGUF file for llama.cpp (merged, with the trained chat template) and a SillyTavern card per role beside it
rolellm export runs/rolellama-lora --gguf q8_0 --output_dir runs/rolellama-gguf --llama_cpp_source ~/llama-cpp-source
```

Without `--merge` an adapter stays an adapter; either way the trainer's resume state (optimizer, scheduler, RNG) is
left behind and the tokenizer, `chat_template.jinja`, `role_profiles.jsonl` and the model card are kept. `--gguf`
writes the merged model through llama.cpp's own converter (`rolellm.training.gguf_export`, docs/sillytavern.md).
"""

import sys
from dataclasses import dataclass, field
from typing import Literal

from rolellm.scripts.exit_codes import EXIT_FAILED
from rolellm.scripts.recipe import make_command_parser, require_hub_token
from rolellm.training.gguf_export import GGUF_TYPES


@dataclass
class ExportArguments:
    """`rolellm export`: which checkpoint becomes which model folder, and where it is pushed.

    Args:
        checkpoint (`str`): a folder written by `rolellm train` (its `output_dir` or a `checkpoint-N` folder; the
            positional argument).
        output_dir (`str`): the folder to write; must not exist or be empty.
        merge (`bool`, *optional*, defaults to `False`): merge a LoRA/QLoRA adapter into its base model.
        push_to_hub (`str`, *optional*): upload the folder to this Hub repo.
        private (`bool`, *optional*, defaults to `False`): create the Hub repo as private.
        gguf (`Literal[GGUF_TYPES]`, *optional*): write one GGUF file of this type (`f16`, `q8_0`, `q4_k_m`, ...)
            instead of a model folder, merged, with a SillyTavern card per role beside it.
        llama_cpp_source (`str`, *optional*): with `gguf`, where llama.cpp's converter is: a llama.cpp source folder
            or llama-cpp-python's source archive (or a folder holding it); defaults to `$ROLELLM_LLAMA_CPP_SOURCE`.
    """

    checkpoint: str = field(
        metadata={
            "positional": True,
            "help": "A folder written by rolellm train (output_dir or a checkpoint-N folder).",
        }
    )
    output_dir: str = field(metadata={"help": "The folder to write; must not exist or be empty."})
    merge: bool = field(default=False, metadata={"help": "Merge a LoRA/QLoRA adapter into its base model."})
    push_to_hub: str | None = field(
        default=None, metadata={"help": "Upload the folder to this Hub repo.", "metavar": "REPO"}
    )
    private: bool = field(default=False, metadata={"help": "Create the Hub repo as private."})
    gguf: Literal[GGUF_TYPES] | None = field(
        default=None,
        metadata={"help": "Write a merged GGUF file of this type for llama.cpp, with a SillyTavern card per role."},
    )
    llama_cpp_source: str | None = field(
        default=None,
        metadata={
            "help": "With --gguf: a llama.cpp source folder or llama-cpp-python's source archive (default: "
            "$ROLELLM_LLAMA_CPP_SOURCE).",
            "metavar": "PATH",
        },
    )


def make_parser(subparsers=None):
    description = "Export a training checkpoint: merge an adapter into a full model, keep profiles and card, push."
    return make_command_parser("export", [ExportArguments], description, subparsers)


def main(args=None, api=None):
    """The `rolellm export` entry point; `api` is the Hub client (`huggingface_hub.HfApi()` when `None`)."""
    if args is None:
        args = make_parser().parse_args()
    from rolellm.training.export import BaseModelNotFound, export_checkpoint

    if args.push_to_hub and api is None:
        require_hub_token("--push_to_hub")
    if args.gguf is not None:
        return export_gguf_folder(args, api)
    if args.llama_cpp_source is not None:
        raise ValueError("--llama_cpp_source is read with --gguf only: add --gguf TYPE or drop it")
    try:
        folder = export_checkpoint(
            args.checkpoint, args.output_dir, merge=args.merge, push_to_hub=args.push_to_hub,
            private=args.private or None, api=api,
        )  # fmt: skip
    except BaseModelNotFound as error:
        print(f"rolellm export: {error}", file=sys.stderr)
        return EXIT_FAILED
    from rolellm.clients.loading import is_adapter_checkpoint

    adapter = is_adapter_checkpoint(args.checkpoint)
    what = (
        "an adapter merged into its base model" if adapter and args.merge else "an adapter" if adapter else "a model"
    )
    where = f"; pushed to {args.push_to_hub}" if args.push_to_hub else ""
    print(f"Exported {args.checkpoint} to {folder} ({what}){where}")
    return 0


def export_gguf_folder(args, api) -> int:
    from rolellm.training.gguf_export import export_gguf

    if args.merge:
        raise ValueError("--gguf merges an adapter by itself: drop --merge")
    gguf_file = export_gguf(args.checkpoint, args.output_dir, args.gguf, args.llama_cpp_source)
    if args.push_to_hub:
        from huggingface_hub import HfApi

        api = api or HfApi()
        api.create_repo(args.push_to_hub, private=args.private or None, exist_ok=True)
        api.upload_folder(
            repo_id=args.push_to_hub, folder_path=args.output_dir, commit_message="Upload with rolellm export"
        )
    cards = sorted(path.name for path in gguf_file.parent.glob("*.card.png"))
    beside = f"; SillyTavern cards: {', '.join(cards)}" if cards else ""
    where = f"; pushed to {args.push_to_hub}" if args.push_to_hub else ""
    print(f"Exported {args.checkpoint} to {gguf_file} (GGUF {args.gguf}){beside}{where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
