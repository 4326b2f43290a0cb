"""Jinja2 rendering of every file skyrack puts on a machine (no Pulumi, no Ansible).

Templates live in `skyrack/templates/`. Undefined variables are errors, never empty
strings. `yaml_block` embeds a multi-line text (a certificate, a unit file) in a YAML
document as a literal block, so the rendered file stays readable and parses back to
exactly the text given.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jinja2


def yaml_block(text: str, indent: int) -> str:
    """`text` as a YAML literal block scalar whose lines are indented by `indent` spaces."""
    stripped = text.rstrip("\n")
    trailing = len(text) - len(stripped)
    chomp = "-" if trailing == 0 else ("" if trailing == 1 else "+")
    pad = " " * indent
    lines = stripped.split("\n") + [""] * max(0, trailing - 1)
    indicator = str(indent) if stripped[:1] in (" ", "\t") else ""
    return f"|{indicator}{chomp}\n" + "\n".join(pad + line if line else "" for line in lines)


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("skyrack", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # noqa: S701 - renders YAML, shell and unit files, never HTML
    )
    env.filters["yaml_block"] = yaml_block
    env.filters["tojson"] = lambda v: json.dumps(v)
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
