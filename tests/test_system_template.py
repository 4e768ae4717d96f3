"""`--system_template` means the same on every command: Jinja source, or a file holding it, read and checked by
`system_template_text` (evaluate, RoleGPT generation, chat)."""

import pytest

from rolellm.clients.config import ClientConfig
from rolellm.evaluation.benchmark.config import BenchmarkConfig
from rolellm.generation.rolegpt import RoleGPTConfig
from rolellm.roles.profile import RoleProfile
from rolellm.roles.prompts import build_system_instruction
from rolellm.scripts.cli import main


TEXT = "You are {{ role }}. {{ desc }}\n"


def test_a_file_and_its_text_give_one_template(tmp_path):
    path = tmp_path / "role.jinja"
    path.write_text(TEXT, encoding="utf-8")
    from_file = BenchmarkConfig(str(tmp_path / "out"), ClientConfig("m", base_url="http://127.0.0.1:9/v1"),
                               system_template=str(path))  # fmt: skip
    from_text = BenchmarkConfig(str(tmp_path / "out"), ClientConfig("m", base_url="http://127.0.0.1:9/v1"),
                               system_template=TEXT)  # fmt: skip
    assert from_file.system_template == from_text.system_template == TEXT
    assert RoleGPTConfig(system_template=str(path)).system_template == TEXT
    po = RoleProfile("Po", "en", "A kung fu panda.")
    assert build_system_instruction(po, "en", from_file.system_template) == "You are Po. A kung fu panda."


def test_a_missing_or_broken_template_file_stops_the_command(tmp_path, capsys):
    broken = tmp_path / "broken.jinja"
    broken.write_text("You are {{ role }.\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="absent.jinja: no such system template file"):
        RoleGPTConfig(system_template=str(tmp_path / "absent.jinja"))
    base = ["evaluate", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--output_dir", str(tmp_path / "out")]
    for value, message in ((tmp_path / "absent.jinja", "no such system template file"), (broken, "not valid Jinja")):
        assert main([*base, "--system_template", str(value)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) <= 2 and message in err[-1] and str(value.name) in err[-1]
    assert not (tmp_path / "out").exists()
