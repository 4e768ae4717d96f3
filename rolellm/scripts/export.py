"""`rolellm export`: a training checkpoint as a clean model folder, an adapter merged into its base, pushed if asked.

```bash
# merge a LoRA/QLoRA checkpoint into a full model that loads with transformers alone
rolellm export runs/rolellama-lora --merge --output_dir runs/rolellama-merged

# the same, uploaded to the Hub in one commit (token from `hf auth login` or $HF_TOKEN)
rolellm export runs/rolellama-lora/checkpoint-500 --merge --output_dir merged --push_to_hub <user>/rolellama
```

Without `--merge` an adapter stays an adapter; either way the trainer's resume state (optimizer, scheduler, RNG) is
left behind and the tokenizer, `chat_template.jinja`, `role_profiles.jsonl` and the model card are kept.
"""

import sys
from dataclasses import dataclass, field

from rolellm.scripts.exit_codes import EXIT_FAILED
from rolellm.scripts.recipe import make_command_parser, require_hub_token


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


if __name__ == "__main__":
    sys.exit(main())
