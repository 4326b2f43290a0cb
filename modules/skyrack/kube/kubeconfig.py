"""A kubeconfig read as kubectl reads it, for what skyrack needs of one: the current context's server,
the CA it trusts, and its user's credentials.

A researcher's kubeconfig is rarely the admin's client certificate: a site behind Entra ID or another
OIDC provider hands out a kubeconfig whose user runs an **exec credential plugin** (kubelogin, a
cloud CLI), and others name files instead of embedding data. Supported, as kubectl does them:

- the cluster's CA as ``certificate-authority-data`` or a ``certificate-authority`` file;
- a client certificate and key as ``client-certificate(-key)-data`` or files; a ``token`` or a ``tokenFile``;
- ``exec`` (``client.authentication.k8s.io/v1`` and ``v1beta1``): the command run with its ``args`` and
  ``env`` as an argument vector (no shell), ``KUBERNETES_EXEC_INFO`` describing the request, stdin and the
  plugin's prompts passed through when the terminal is interactive (a device-code login), its answer a
  token or a client certificate. A command with a path separator is relative to the kubeconfig's
  directory, a bare name is looked up in PATH. Only a kubeconfig the user named runs a plugin
  (``run_exec``): kubeconfigs skyrack reads from its own stacks carry certificates.

Relative file names are read from the kubeconfig's own directory. What is not supported is refused with
the field: ``auth-provider`` (removed from kubectl in 1.26 in favour of exec plugins) and
``insecure-skip-tls-verify`` (skyrack always verifies the API server).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError, Problem

EXEC_APIS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_TIMEOUT = 60.0  # seconds a plugin may take when it cannot ask the user anything
INTERACTIVE_TIMEOUT = 600.0  # ... and when it can (a browser or device-code login)
MAX_FILE = 1 << 20


@dataclass(frozen=True)
class Credentials:
    """What to present to the API server: a bearer token and/or a client certificate (PEM)."""

    token: str | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None


@dataclass(frozen=True)
class Context:
    """The current context's cluster and user, with where they sit in the file (for errors)."""

    cluster: dict[str, Any]
    cluster_at: str
    user: dict[str, Any]
    user_at: str


def _load(text: str) -> dict[str, Any]:
    cfg = yaml.safe_load(text) or {}
    if not isinstance(cfg, dict):
        raise ValueError("not a kubeconfig (expected a mapping with clusters, users and contexts)")
    return cfg


def current(text: str) -> Context:
    """The current context's cluster and user (the first of each where the file names no context). Raises
    ValueError for text that is not a kubeconfig."""
    cfg = _load(text)
    name = cfg.get("current-context")
    ctx = next((c.get("context") or {} for c in cfg.get("contexts") or [] if isinstance(c, dict)
                and c.get("name") == name), {})

    def pick(section: str, wanted: object) -> tuple[dict[str, Any], str]:
        entries = [e for e in cfg.get(section) or [] if isinstance(e, dict)]
        i = next((i for i, e in enumerate(entries) if e.get("name") == wanted), 0 if entries else None)
        if i is None:
            return {}, section
        body = entries[i].get(section.removesuffix("s"))
        return (body if isinstance(body, dict) else {}), f"{section}[{i}].{section.removesuffix('s')}"

    cluster, cluster_at = pick("clusters", ctx.get("cluster"))
    user, user_at = pick("users", ctx.get("user"))
    return Context(cluster, cluster_at, user, user_at)


def _read(base: Path | None, name: str, source: str, field: str) -> bytes:
    path = Path(name).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE + 1)
    except OSError as exc:
        raise InputError([Problem(source, field, f"cannot read {path}: {exc.strerror or exc}")]) from None
    if len(data) > MAX_FILE:
        raise InputError([Problem(source, field, f"{path} is larger than {MAX_FILE} bytes")])
    return data


def _data_or_file(entry: dict[str, Any], key: str, base: Path | None, source: str, at: str) -> bytes | None:
    """`<key>-data` (base64) or `<key>` (a file name)."""
    if entry.get(f"{key}-data"):
        try:
            return base64.b64decode(str(entry[f"{key}-data"]), validate=True)
        except ValueError:
            raise InputError([Problem(source, f"{at}.{key}-data", "is not base64")]) from None
    if entry.get(key):
        return _read(base, str(entry[key]), source, f"{at}.{key}")
    return None


def server(text: str, base: Path | None = None, source: str = "kubeconfig") -> tuple[str, str | None]:
    """The current context's API server URL and the CA PEM it trusts (None when it names none). Raises
    ValueError for text that is not a kubeconfig, InputError for a field skyrack cannot use."""
    ctx = current(text)
    if not ctx.cluster.get("server"):
        raise ValueError("its cluster has no server")
    if ctx.cluster.get("insecure-skip-tls-verify"):
        raise InputError([Problem(source, f"{ctx.cluster_at}.insecure-skip-tls-verify",
                                  "skyrack always verifies the API server: give the cluster's CA instead")])
    ca = _data_or_file(ctx.cluster, "certificate-authority", base, source, ctx.cluster_at)
    return str(ctx.cluster["server"]), ca.decode() if ca else None


def credentials(text: str, base: Path | None = None, source: str = "kubeconfig", *,
                run_exec: bool = False) -> Credentials:
    """The current user's credentials. InputError names the field when they cannot be had."""
    ctx = current(text)
    user, at = ctx.user, ctx.user_at
    if user.get("auth-provider"):
        raise InputError([Problem(source, f"{at}.auth-provider", "auth-provider plugins were removed from kubectl "
                                                                 "in 1.26; use the provider's exec plugin (exec:)")])
    if user.get("exec"):
        if not run_exec:
            raise InputError([Problem(source, f"{at}.exec", "skyrack runs a credential plugin only from a "
                                                            "kubeconfig you name (--kubeconfig, $KUBECONFIG)")])
        return _exec(user["exec"], ctx, base, source, f"{at}.exec")
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = _read(base, str(user["tokenFile"]), source, f"{at}.tokenFile").decode().strip()
    cert = _data_or_file(user, "client-certificate", base, source, at)
    key = _data_or_file(user, "client-key", base, source, at)
    if bool(cert) != bool(key):
        raise InputError([Problem(source, at, "a client certificate needs its key, and a key its certificate")])
    return Credentials(str(token) if token else None, cert, key)


def _exec(spec: object, ctx: Context, base: Path | None, source: str, at: str) -> Credentials:
    def bad(msg: str, field: str = "") -> InputError:
        return InputError([Problem(source, f"{at}.{field}" if field else at, msg)])

    if not isinstance(spec, dict) or not spec.get("command"):
        raise bad("names no command", "command")
    api = spec.get("apiVersion")
    if api not in EXEC_APIS:
        raise bad(f"{api!r} is not a credential plugin API skyrack speaks ({', '.join(EXEC_APIS)})", "apiVersion")
    args = spec.get("args") or []
    env = spec.get("env") or []
    if not isinstance(args, list) or not isinstance(env, list) or \
            not all(isinstance(e, dict) and isinstance(e.get("name"), str) for e in env):
        raise bad("args must be a list and env a list of {name, value}")
    mode = spec.get("interactiveMode") or ("IfAvailable" if api.endswith("v1beta1") else None)
    if mode not in ("Never", "IfAvailable", "Always"):
        raise bad("must be Never, IfAvailable or Always", "interactiveMode")
    interactive = mode != "Never" and sys.stdin.isatty()
    if mode == "Always" and not interactive:
        raise bad("the plugin needs a terminal to ask you (interactiveMode: Always) and there is none")
    command = str(spec["command"])
    if os.sep in command and not Path(command).is_absolute() and base is not None:
        command = str(base / command)
    request: dict[str, Any] = {"interactive": interactive}
    if spec.get("provideClusterInfo"):
        request["cluster"] = {k: v for k, v in {
            "server": ctx.cluster.get("server"), "certificate-authority-data": ctx.cluster.get(
                "certificate-authority-data"), "config": (ctx.cluster.get("extensions") or {})}.items() if v}
    info = {"apiVersion": api, "kind": "ExecCredential", "spec": request}
    hint = f" ({spec['installHint']})" if spec.get("installHint") else ""
    try:
        proc = subprocess.run([command, *map(str, args)], check=False, text=True,  # the user's own plugin, as kubectl runs it
                              env={**os.environ, **{e["name"]: str(e.get("value", "")) for e in env},
                                   "KUBERNETES_EXEC_INFO": json.dumps(info)},
                              stdin=None if interactive else subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=None if interactive else subprocess.PIPE,
                              timeout=INTERACTIVE_TIMEOUT if interactive else EXEC_TIMEOUT)
    except FileNotFoundError:
        raise bad(f"the credential plugin {command!r} is not installed{hint}", "command") from None
    except PermissionError:
        raise bad(f"the credential plugin {command!r} is not executable", "command") from None
    except subprocess.TimeoutExpired as exc:
        raise bad(f"the credential plugin {command!r} did not answer within {exc.timeout:.0f} s") from None
    if proc.returncode != 0:
        said = " ".join((proc.stderr or "").split())[-300:]
        raise bad(f"the credential plugin {command!r} exited with {proc.returncode}"
                  + (f": {said}" if said else ""))
    try:
        answer = json.loads(proc.stdout)
        status = answer["status"]
        if answer.get("kind") != "ExecCredential" or answer.get("apiVersion") != api or not isinstance(status, dict):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise bad(f"the credential plugin {command!r} did not print an ExecCredential of {api}") from None
    cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
    if not status.get("token") and not (cert and key):
        raise bad(f"the credential plugin {command!r} gave neither a token nor a client certificate and key")
    return Credentials(str(status["token"]) if status.get("token") else None,
                       str(cert).encode() if cert and key else None, str(key).encode() if cert and key else None)
