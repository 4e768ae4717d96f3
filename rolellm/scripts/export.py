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

import argparse
import sys

from rolellm.scripts.exit_codes import EXIT_FAILED


def make_parser(subparsers=None):
    description = "Export a training checkpoint: merge an adapter into a full model, keep profiles and card, push."
    if subparsers is not None:
        parser = subparsers.add_parser("export", help=description, description=description)
    else:
        parser = argparse.ArgumentParser(prog="rolellm export", description=description)
    parser.add_argument("checkpoint", help="a folder written by rolellm train (output_dir or a checkpoint-N folder)")
    parser.add_argument("--output_dir", required=True, help="the folder to write; must not exist or be empty")
    parser.add_argument("--merge", action="store_true", help="merge a LoRA/QLoRA adapter into its base model")
    parser.add_argument("--push_to_hub", default=None, metavar="REPO", help="upload the folder to this Hub repo")
    parser.add_argument("--private", action="store_true", help="create the Hub repo as private")
    return parser


def main(args=None, api=None):
    """The `rolellm export` entry point; `api` is the Hub client (`huggingface_hub.HfApi()` when `None`)."""
    if args is None:
        args = make_parser().parse_args()
    from rolellm.training.export import BaseModelNotFound, export_checkpoint

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
