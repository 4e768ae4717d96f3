"""`rolellm template check`: will a model's chat template train and prompt a role model exactly and safely?

```bash
rolellm template check Qwen/Qwen3-4B            # a Hub id or a local folder; only the tokenizer is loaded
rolellm template check ./my-model --chat_template my_template.jinja --keep_think
```

Prints `rolellm.check_chat_template`'s report: the template renders a role conversation, the system text reaches
every prompt, single- and multi-turn answers and their ends of turn are trained exactly after exactly their
inference prompts, the tokens decode to the template's rendering, registered tokens inside messages stay plain text.
Exit codes: 0 supported, 2 the tokenizer could not be loaded, has no chat template or does not give text back,
3 the template is not supported (the failed check is printed as one line).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

from rolellm.clients.config import client_options
from rolellm.scripts.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from rolellm.scripts.recipe import make_command_group, make_command_parser


DESCRIPTION = "Check a model's chat template: exact assistant masks, system text, injection safety."


@dataclass
class TemplateCheckArguments:
    """`rolellm template check`: the tokenizer whose chat template is checked; `--chat_template` and `--keep_think`
    are `ClientConfig`'s own options (`client_options`), read as a client reads them.

    Args:
        model_or_dir (`str`): a Hub model id or a local folder with tokenizer files (the positional argument).
        trust_remote_code (`bool`, *optional*, defaults to `False`): allow the tokenizer's own code.
    """

    model_or_dir: str = field(
        metadata={
            "positional": True,
            "metavar": "MODEL_OR_DIR",
            "help": "A Hub model id or a local folder with tokenizer files.",
        }
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow the tokenizer's own code."})


TemplateOptions = client_options("chat_template", "keep_think")


def make_parser(subparsers=None):
    parser, commands = make_command_group("template", DESCRIPTION, subparsers, "template_command", "<command>")
    make_command_parser("check", [TemplateCheckArguments, TemplateOptions], DESCRIPTION, commands)
    return parser


# the JSON files of a saved tokenizer, and the files one of which holds its vocabulary
TOKENIZER_JSON = ("tokenizer_config.json", "tokenizer.json", "special_tokens_map.json", "added_tokens.json")
TOKENIZER_VOCAB = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")


def main(args):
    from transformers import AutoTokenizer

    from rolellm.clients.inference_settings import read_inference_settings
    from rolellm.clients.loading import check_model_source
    from rolellm.encoding.chat_template import check_template_syntax, read_chat_template
    from rolellm.encoding.check import check_chat_template
    from rolellm.roles.profile import DataFormatError, read_json_file

    folder = Path(args.model_or_dir).expanduser()
    try:
        if not folder.exists():  # a local path that is not there: said so, not the Hub's
            check_model_source(args.model_or_dir, "the path")  # "Repo id must be in the form ..."
        for name in TOKENIZER_JSON if folder.is_dir() else ():  # a broken file named with its line
            if (folder / name).is_file():
                read_json_file(folder / name)
        tokenizer = AutoTokenizer.from_pretrained(args.model_or_dir, trust_remote_code=args.trust_remote_code)
    except (OSError, ValueError, KeyError) as error:
        cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_VOCAB):
            cause = f"no vocabulary: the folder has none of {', '.join(TOKENIZER_VOCAB)}"
        print(f"rolellm template check: cannot load the tokenizer of {args.model_or_dir!r}: {cause}", file=sys.stderr)
        return EXIT_USAGE
    try:
        chat_template = read_chat_template(args.chat_template)
    except DataFormatError as error:  # the template file's own fault: it names the file (and the line)
        print(f"rolellm template check: --chat_template {error}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as error:
        print(f"rolellm template check: --{error}", file=sys.stderr)
        return EXIT_USAGE
    if chat_template is None and tokenizer.chat_template is None:
        print(
            f"rolellm template check: the tokenizer of {args.model_or_dir!r} has no chat template (a base model): "
            "pass --chat_template chatml or a template file, or train with rolellm's role template "
            "(set_role_chat_template)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if chat_template is None:  # the tokenizer's own template, named by the file it comes from
        saved = Path(args.model_or_dir) / "chat_template.jinja"
        where = saved if saved.is_file() else f"{args.model_or_dir} (its tokenizer's chat_template)"
        try:
            check_template_syntax(tokenizer.chat_template, where)
        except DataFormatError as error:
            print(f"rolellm template check: {error}", file=sys.stderr)
            return EXIT_USAGE
    keep_think = args.keep_think
    if keep_think is None:  # a checkpoint is checked as it was trained
        keep_think = bool(read_inference_settings(args.model_or_dir).get("keep_think", False))
    report = check_chat_template(tokenizer, chat_template, keep_think=keep_think)
    print(report)
    if not report.ok:
        print(f"rolellm template check: {report.cause}", file=sys.stderr)
        return EXIT_USAGE if report.cause.startswith("tokenizer:") else EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(make_parser().parse_args()))
