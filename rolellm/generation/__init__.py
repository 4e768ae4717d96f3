"""Data generation: LLM chat clients, RoleGPT, Context-Instruct and profile descriptions."""
