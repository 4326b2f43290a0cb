"""Golden files: every resource the program registers, with its inputs, as reviewable YAML.

Stable by construction: resources sorted by (type, name), keys sorted, cloud-init user
data decoded and shown as YAML, and every value the PKI resources generated (keys,
certificates, tokens) replaced by a placeholder naming its source (`<etcd-0-peer.cert_pem>`).
A secret input is shown as `{secret: ...}` around its redacted value, or `[secret]`.
Regenerate with `SKYRACK_UPDATE_GOLDEN=1 pytest tests/pulumi` and review the diff.
"""

from __future__ import annotations

import base64
from typing import Any

import yaml
from pulumi_harness import DYNAMIC, StackRun

from support import is_secret, unwrap

GENERATED = ("cert_pem", "key_pem", "cert_hash", "public_pem", "public_key", "value")


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def snapshot(run: StackRun) -> str:
    generated: dict[str, str] = {}
    for r in run.resources:
        if r.typ.startswith(DYNAMIC):
            for field in GENERATED:
                if isinstance(r.state.get(field), str) and r.state[field]:
                    generated[r.state[field]] = f"<{r.name}.{field}>"
    longest_first = sorted(generated.items(), key=lambda kv: -len(kv[0]))

    def text(value: str) -> str:
        for raw, placeholder in longest_first:
            if raw in value:
                value = value.replace(raw, placeholder)
        return value

    def walk(value: Any, key: str | None = None) -> Any:
        if is_secret(value):
            shown = walk(value["value"], key)
            return {"secret": "[secret]" if shown == unwrap(value["value"]) else shown}
        if key == "customData" and isinstance(value, str):
            return {"cloud-init (decoded)": walk(yaml.safe_load(base64.b64decode(value)))}
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return text(value) if isinstance(value, str) else value

    resources = sorted(run.resources, key=lambda r: (r.typ, r.name))
    doc = [{"type": r.typ, "name": r.name, "inputs": walk(r.inputs)} for r in resources]
    header = (f"# Resource inputs of the `{run.name}` stack under mocks, written by tests/pulumi/pulumi_golden.py.\n"
              "# Regenerate: SKYRACK_UPDATE_GOLDEN=1 pytest tests/pulumi ; review the diff like code.\n")
    return header + yaml.dump(doc, Dumper=_Dumper, sort_keys=True, width=120, allow_unicode=True)
