"""`rolellm push-metric`: publish one of rolellm's `evaluate` modules as a Hugging Face Space.

The Space holds the module script, its metric card (`README.md`, whose YAML header configures the Space), a Gradio
`app.py` (`evaluate`'s widget) and a `requirements.txt` that installs rolellm, which the script imports. Then
`evaluate.load("<user>/rolebench_rouge")` works anywhere. The Hub token comes from `huggingface-cli login` or
`$HF_TOKEN`, never from the command line.

    rolellm push-metric --repo_id <user>/rolebench_rouge
    rolellm push-metric --output_dir space/  # build the Space folder only, push nothing

>>> folder = build_space("rolebench_rouge", tempfile.mkdtemp(), requirement="rolellm")
>>> sorted(path.name for path in folder.iterdir())
['README.md', 'app.py', 'requirements.txt', 'rolebench_rouge.py']
"""

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rolellm import metrics
from rolellm.scripts.recipe import make_command_parser, require_hub_token


METRICS_DIR = Path(metrics.__file__).parent  # one folder per `evaluate` module
METRICS = sorted(path.name for path in METRICS_DIR.iterdir() if (path / f"{path.name}.py").is_file())

APP = """\
from pathlib import Path

import evaluate
from evaluate.utils import launch_gradio_widget


module = evaluate.load(str(Path(__file__).parent / "{metric}.py"))
launch_gradio_widget(module)
"""


@dataclass
class PushMetricArguments:
    """`rolellm push-metric`: which `evaluate` module goes to which Space.

    Args:
        metric (`str`, *optional*, defaults to `"rolebench_rouge"`): the module to publish (a folder of
            `rolellm/metrics/`).
        repo_id (`str`, *optional*): the Space to create or update, e.g. `<user>/rolebench_rouge`.
        output_dir (`str`, *optional*): also (or only, without `repo_id`) write the Space here.
        requirement (`str`, *optional*, defaults to `"rolellm"`): how the Space installs rolellm (a pip requirement,
            e.g. `git+https://github.com/<user>/rolellm`).
        private (`bool`, *optional*, defaults to `False`): create the Space as private.
    """

    metric: Literal[tuple(METRICS)] = field(default="rolebench_rouge", metadata={"help": "The module to publish."})
    repo_id: str | None = field(
        default=None, metadata={"help": "The Space to create or update, e.g. `<user>/rolebench_rouge`."}
    )
    output_dir: str | None = field(
        default=None, metadata={"help": "Also (or only, without --repo_id) write the Space here."}
    )
    requirement: str = field(
        default="rolellm",
        metadata={
            "help": "How the Space installs rolellm (a pip requirement, e.g. `git+https://github.com/<user>/rolellm`)."
        },
    )
    private: bool = field(default=False, metadata={"help": "Create the Space as private."})


def make_parser(subparsers=None):
    description = "Push a rolellm `evaluate` module (metric card, script, Gradio app) to the Hub as a Space."
    return make_command_parser("push-metric", [PushMetricArguments], description, subparsers)


def build_space(metric: str, output_dir: str | Path, requirement: str = "rolellm") -> Path:
    """Write the Space of `metric` into `output_dir` (created if needed) and return the folder.

    Args:
        metric (`str`): a folder of `rolellm/metrics/` (e.g. `"rolebench_rouge"`).
        output_dir (`str` or `Path`): where to write the Space's files.
        requirement (`str`, *optional*, defaults to `"rolellm"`): the pip requirement that installs rolellm.
    """
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r} is not one of rolellm's evaluate modules: {METRICS}")
    source, folder = METRICS_DIR / metric, Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for name in (f"{metric}.py", "README.md"):
        shutil.copyfile(source / name, folder / name)
    (folder / "app.py").write_text(APP.format(metric=metric), encoding="utf-8")
    requirements = ["evaluate>=0.4.5", "datasets", "numpy", "pyarrow", "numba", "gradio", requirement]
    (folder / "requirements.txt").write_text("\n".join(requirements) + "\n", encoding="utf-8")
    return folder


def main(args):
    if args.repo_id is None and args.output_dir is None:
        raise SystemExit("rolellm push-metric: pass --repo_id <user>/<space> to push, or --output_dir to only build.")
    if args.repo_id is not None:
        require_hub_token("--repo_id")
    with tempfile.TemporaryDirectory() as scratch:
        folder = build_space(args.metric, args.output_dir or Path(scratch) / args.metric, args.requirement)
        print(f"Space files for {args.metric} in {folder}")
        if args.repo_id is None:
            return 0
        from huggingface_hub import HfApi

        api = HfApi()
        url = api.create_repo(args.repo_id, repo_type="space", space_sdk="gradio", private=args.private, exist_ok=True)
        api.upload_folder(
            folder_path=str(folder),
            repo_id=args.repo_id,
            repo_type="space",
            commit_message=f"Upload the {args.metric} evaluate module (rolellm)",
        )
        print(f"Pushed to {url}; load it with evaluate.load({args.repo_id!r})")
    return 0


if __name__ == "__main__":
    main(make_parser().parse_args())
