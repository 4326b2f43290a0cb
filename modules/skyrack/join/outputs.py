"""The control plane's outputs as the rack join uses them (the contract itself is `skyrack.outputs`).

The join needs `apiserver_endpoint`, `ca_cert_hash` and `bootstrap_token` (a secret). Other
public outputs are passed on as `skyrack_cp_<key>` inventory variables. Secret outputs stay
out of the inventory and the run records: the ones the join uses reach Ansible as extra
variables in a 0600 file on a memory filesystem that exists only during the run; the others
(the admin kubeconfig, the VPN key, ...) are not given to Ansible at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import outputs as contract
from ..errors import InputError

__all__ = ["InputError", "check", "split_secrets"]

# The secrets the join's roles read (as skyrack_cp_<key>); every other secret stays out of the run.
SECRETS_FOR_ANSIBLE = tuple(k for k in contract.JOIN_REQUIRED if contract.is_secret(k))


def check(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """Raise InputError naming every contract problem (never echoing a secret's value)."""
    return contract.validate(data, path, contract.JOIN_REQUIRED)


def split_secrets(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(outputs for the inventory, the secrets the join needs as `skyrack_cp_<key>` extra variables)."""
    public, secret = contract.split_secrets(data)
    return public, {f"skyrack_cp_{k}": v for k, v in secret.items() if k in SECRETS_FOR_ANSIBLE}
