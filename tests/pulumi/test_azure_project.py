"""The Pulumi project is laid out so that `pulumi stack init dev && pulumi up` finds everything."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_project_file_points_at_the_program_and_the_stack_settings() -> None:
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["runtime"]["name"] == "python"
    assert (ROOT / project["main"] / "__main__.py").is_file()
    settings = ROOT / project["stackConfigDir"]
    environments = [p.stem for p in settings.glob("*.yaml") if "." not in p.stem and not p.stem.startswith("Pulumi")]
    for env in environments:
        if env == "lab":  # the lab runs on this machine, not in Azure
            continue
        stack = yaml.safe_load((settings / f"Pulumi.{env}.yaml").read_text())
        assert isinstance(stack.get("config"), dict), env
        assert not any(k.startswith("skyrack:vpnSharedKey") for k in stack["config"]), "secrets only via the CLI"
    assert {"dev", "prod"} <= set(environments)


def test_program_compiles() -> None:
    for path in (ROOT / "stacks").glob("*.py"):
        compile(path.read_text(), str(path), "exec")
