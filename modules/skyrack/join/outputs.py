"""The control plane's outputs (`pulumi stack output --json --show-secrets`) and their contract.

The join needs `apiserver_endpoint` ("https://ip:6443"), `ca_cert_hash` ("sha256:<hex>")
and `bootstrap_token` ("<6>.<16>", a secret). Other keys are passed on as
`skyrack_cp_<key>` inventory variables. Secret values stay out of the inventory and the
run records: `split_secrets` sets them apart, and the driver hands them to Ansible as
extra variables in a 0600 file on a memory filesystem that exists only during the run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import InputError, Problem

REQUIRED = {
    "apiserver_endpoint": (re.compile(r"^https://[0-9A-Za-z.:\[\]-]+:\d+$"), "https://<address>:<port>"),
    "ca_cert_hash": (re.compile(r"^sha256:[0-9a-f]{64}$"), "sha256:<64 hex digits>"),
    "bootstrap_token": (re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$"), "<6 chars>.<16 chars> of [a-z0-9]"),
}
SECRET = re.compile(r"token|secret|password|private_key")


def check(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """Raise InputError naming every contract problem (never echoing a secret's value)."""
    problems = []
    for key, (pattern, shape) in REQUIRED.items():
        value = data.get(key)
        if value is None:
            problems.append(Problem(str(path), key, "required but missing"))
        elif value == "[secret]":
            problems.append(Problem(str(path), key, "is hidden: write the file with "
                                                    "`pulumi stack output --json --show-secrets`"))
        elif not isinstance(value, str) or not pattern.match(value):
            shown = "(value hidden)" if SECRET.search(key) else f"(got {value!r})"
            problems.append(Problem(str(path), key, f"expected {shape} {shown}"))
    if problems:
        raise InputError(problems)
    return data


def split_secrets(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(outputs for the inventory, secret outputs as `skyrack_cp_<key>` extra variables)."""
    public = {k: v for k, v in data.items() if not SECRET.search(k)}
    secret = {f"skyrack_cp_{k}": v for k, v in data.items() if SECRET.search(k)}
    return public, secret
