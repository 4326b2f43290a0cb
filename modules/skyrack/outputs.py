"""The control plane's outputs: the one contract of what the Azure stack (or the lab's stand-in) exports.

Every output has a name, a shape (checked on every read), whether it is secret, and whether
a stack always exports it. The Azure stack exports through `secret()` (a secret output is a
Pulumi secret because this table says so), the rack join and `skyrack inventory` read a file
of them through `read_file` + `validate`, the cluster layer reads `CLUSTER_LAYER_REQUIRED` by
name, and every printer hides what `secret()` marks. Secret detection never looks at the
name's spelling: an output that is not declared here is an error, not a guess.

Plain data and no Pulumi import: the core, the join and the lab all use it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError, Problem
from .files import atomic_write, read_text

HIDDEN = "[secret]"  # what `pulumi stack output --json` writes for a secret without --show-secrets
MAX_FILE_BYTES = 1 << 20


def _fullmatch(pattern: str) -> Callable[[Any], bool]:
    rx = re.compile(pattern, re.ASCII)  # \d and \w are ASCII only: no look-alike digits
    return lambda v: isinstance(v, str) and rx.fullmatch(v) is not None


def _https_url(v: Any) -> bool:
    return _fullmatch(r"https://[0-9A-Za-z.-]+(:\d{1,5})?(/[0-9A-Za-z._~/-]*)?")(v)


def _list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


def _cidr(v: Any) -> bool:
    try:
        ipaddress.IPv4Network(v, strict=True)
    except (ValueError, TypeError):
        return False
    return isinstance(v, str)


def _ipv4(v: Any) -> bool:
    try:
        ipaddress.IPv4Address(v)
    except (ValueError, TypeError):
        return False
    return isinstance(v, str)


def _text(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= 64 * 1024 and "\x00" not in v


def _str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and _text(x) for k, x in v.items())


@dataclass(frozen=True)
class Output:
    name: str
    shape: str  # what a valid value looks like, for messages
    valid: Callable[[Any], bool]
    secret: bool = False
    always: bool = True  # exported by every control-plane stack (False: only in some, or only read)
    nullable: bool = False  # may be null (e.g. vpn_gateway_ip without a VPN)


CONTRACT: dict[str, Output] = {o.name: o for o in (
    Output("apiserver_endpoint", "https://<address>:<port>",
           _fullmatch(r"https://[0-9A-Za-z.:\[\]-]+:\d{1,5}")),
    Output("ca_cert_pem", "a PEM certificate",
           _fullmatch(r"-----BEGIN CERTIFICATE-----\n[A-Za-z0-9+/=\n]+-----END CERTIFICATE-----\n?")),
    Output("ca_cert_hash", "sha256:<64 hex digits>", _fullmatch(r"sha256:[0-9a-f]{64}")),
    Output("bootstrap_token", "<6 chars>.<16 chars> of [a-z0-9]", _fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}"),
           secret=True),
    Output("admin_kubeconfig", "a kubeconfig (YAML text)", _text, secret=True),
    Output("etcd_endpoints", "a list of https://<ip>:2379", _list_of(_https_url)),
    Output("vpn_gateway_ip", "an IPv4 address", _ipv4, nullable=True),
    Output("backup_container_url", "https://<account>.blob.core.windows.net/<container>", _https_url),
    Output("key_vault_uri", "https://<vault>.vault.azure.net/", _https_url),
    Output("etcd_events_endpoints", "a list of https://<ip>:2379", _list_of(_https_url)),
    Output("resource_group", "an Azure resource group name", _fullmatch(r"[-\w.()]{1,90}")),
    Output("dns_zone", "a DNS name", _fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")),
    Output("vnet_address_space", "a list of IPv4 CIDRs", _list_of(_cidr)),
    Output("onprem_routed_prefixes", "a list of IPv4 CIDRs", _list_of(_cidr)),
    Output("cert_expiry", "a timestamp", _fullmatch(r"[0-9T:.+Z -]{10,40}")),
    # Azure's own BGP address, for the on-prem VPN device (null without BGP).
    Output("vpn_bgp_peering_address", "an IPv4 address", _ipv4, nullable=True),
    Output("vpn_shared_key", "the VPN's pre-shared key", _text, secret=True, always=False),
    Output("admin_ssh_private_key", "a PEM private key", _text, secret=True, always=False),
    # Read by the cluster layer (the autoscaler) when a stack exports them.
    Output("cloud_pool_scale_sets", "a mapping of cloud pool to scale set name", _str_map, always=False),
    # The cloud pools' own join token (no expiry: scale sets join whenever they scale), read by the cluster layer.
    Output("pool_bootstrap_token", "<6 chars>.<16 chars> of [a-z0-9]", _fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}"),
           secret=True, always=False),
    Output("autoscaler_credentials", "a mapping of ARM_* variables", _str_map, secret=True, always=False),
)}

# What each consumer needs. The lab's stand-in stack writes exactly LAB_STAND_IN.
JOIN_REQUIRED = ("apiserver_endpoint", "ca_cert_hash", "bootstrap_token")
CLUSTER_LAYER_REQUIRED = ("apiserver_endpoint", "ca_cert_pem", "bootstrap_token", "admin_kubeconfig")
LAB_STAND_IN = ("apiserver_endpoint", "ca_cert_hash", "bootstrap_token", "admin_kubeconfig")


def spec(name: str) -> Output:
    """The declaration of one output; KeyError for a name the contract does not know."""
    return CONTRACT[name]


def is_secret(name: str) -> bool:
    return CONTRACT[name].secret


def undeclared(names: Iterable[str]) -> list[str]:
    return [n for n in names if n not in CONTRACT]


def validate(data: Mapping[str, Any], source: str | Path, required: Iterable[str] = ()) -> dict[str, Any]:
    """Check a mapping of outputs against the contract; InputError names every problem.

    `required`: the outputs this consumer cannot do without. Every present output must have
    its shape; a name the contract does not declare is an error. A secret's value is never
    echoed in a message.
    """
    src = str(source)
    if not isinstance(data, Mapping):
        raise InputError([Problem(src, "", "expected a JSON object of stack outputs")])
    problems = []
    for key in required:
        if data.get(key) is None:
            problems.append(Problem(src, key, "required but missing"))
    for key, value in data.items():
        out = CONTRACT.get(key) if isinstance(key, str) else None
        if out is None:
            problems.append(Problem(src, str(key)[:80], "not an output of the control plane (known: "
                                    f"{', '.join(CONTRACT)})"))
        elif value is None:
            continue  # reported above when required; a stack may export null (no VPN, no pools)
        elif value == HIDDEN:
            problems.append(Problem(src, key, "is hidden: write the file with "
                                              "`pulumi stack output --json --show-secrets`"))
        elif not out.valid(value):
            shown = "(value hidden)" if out.secret else f"(got {_short(value)})"
            problems.append(Problem(src, key, f"expected {out.shape} {shown}"))
    if problems:
        raise InputError(problems)
    return dict(data)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def split_secrets(data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(public outputs, secret outputs), as the contract marks them."""
    public = {k: v for k, v in data.items() if not CONTRACT[k].secret}
    secret = {k: v for k, v in data.items() if CONTRACT[k].secret}
    return public, secret


def redacted(data: Mapping[str, Any]) -> dict[str, Any]:
    """The outputs with every secret value replaced by "[secret]", for anything printed or logged."""
    return {k: (HIDDEN if k in CONTRACT and CONTRACT[k].secret and v is not None else v) for k, v in data.items()}


def read_file(path: Path) -> dict[str, Any]:
    """Read `pulumi stack output --json --show-secrets` (or the lab's equivalent); shape not yet checked."""
    text = read_text(path, MAX_FILE_BYTES)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError([Problem(str(path), f"line {exc.lineno}", f"invalid JSON: {exc.msg}")]) from None
    except RecursionError:
        raise InputError([Problem(str(path), "", "invalid JSON: nested too deeply")]) from None
    if not isinstance(data, dict):
        raise InputError([Problem(str(path), "", "expected a JSON object of stack outputs")])
    return data


def write_file(path: Path, data: Mapping[str, Any], required: Iterable[str] = LAB_STAND_IN) -> None:
    """Write an outputs file as `pulumi stack output --json --show-secrets` would (the lab's stand-in):
    validated first, then 0600 and atomic, since it holds secrets."""
    checked = validate(data, path, required)
    atomic_write(path, json.dumps(checked, indent=2, sort_keys=True) + "\n", mode=0o600)


def load(path: Path, required: Iterable[str] = JOIN_REQUIRED) -> dict[str, Any]:
    """`read_file` and `validate` in one: the outputs a consumer may use."""
    return validate(read_file(path), path, required)
