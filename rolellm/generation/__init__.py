"""Data generation on chat clients: RoleGPT answers, Context-Instruct question/answer pairs and profile
descriptions, each a config plus a generator with `prompt()` and `parse()` over a shared job base.
"""
