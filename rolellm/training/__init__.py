"""RoCIT training, and the preference and GRPO stages after it. Modules:

- `config`: `RoCITConfig` (a `trl.SFTConfig`) and `RolePromptArguments`, the role fields every stage shares;
- `preference`: `RoleDPOTrainer` / `RoleKTOTrainer` and their configs (thin `trl.DPOTrainer` / `trl.KTOTrainer`);
- `trainer`: `RoCITTrainer` (a `trl.SFTTrainer`) and `DataCollatorForRoleLM`;
- `grpo`: `RoleGRPOConfig` and `RoleGRPOTrainer` (a `trl.GRPOTrainer` on role prompts; rewards are arguments);
- `data`: the RoleBench-to-chat conversion (`rolebench_to_conversations`, `mix_subsets`);
- `packing`, `attention`: prefix-shared packing and its attention;
- `card`, `checkpoint`, `export`: the model card, checkpoints and adapter merging;
- `gguf_export`, `sillytavern`: a checkpoint as a GGUF file through llama.cpp's converter, with a SillyTavern card per
  role.

Importing a module loads only what it needs (`rolellm.training.packing` does not pull in trl). Import names from
their modules (`from rolellm.training.config import RoCITConfig`) or from `rolellm`.
"""
