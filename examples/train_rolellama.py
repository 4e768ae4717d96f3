"""Train a RoleLLaMA-style model with RoCIT: RoleBench rows + role profiles -> `rolellm.RoCITTrainer`.

This is rolellm's training script (`rolellm train`, `rolellm/scripts/train.py`): `make_parser()` is rolellm's recipe
parser over `RoleBenchArguments`, `RoCITConfig` and `trl.ModelConfig` that reads `--config recipe.yaml`, and `main()` trains,
saves the model with its chat template and model card (`train()` does the work and returns the trainer). It runs with
`python`, `accelerate launch` and `torchrun`:

```bash
python examples/train_rolellama.py --config examples/recipes/rolellama-7b-lora.yaml
accelerate launch --config_file examples/accelerate_configs/multi_gpu.yaml examples/train_rolellama.py \
    --config examples/recipes/rolellama-7b-lora.yaml
torchrun --nproc_per_node 8 examples/train_rolellama.py --config examples/recipes/roleglm-qwen2.5-7b-lora.yaml
# the tiny CPU recipe of `make demo` (build the model with rolellm.testing.models.build_tiny_llama("./tiny-llama"))
python examples/train_rolellama.py --config examples/recipes/tiny-cpu.yaml --model_name_or_path ./tiny-llama
```
"""

from rolellm.data.selection import RoleBenchArguments
from rolellm.scripts.train import main, make_parser, train


__all__ = ["RoleBenchArguments", "main", "make_parser", "train"]


if __name__ == "__main__":
    main(make_parser().parse_args())
