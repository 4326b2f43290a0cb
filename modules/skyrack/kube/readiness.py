"""Wait until the API servers answer, so `pulumi up` right after the control plane is created
waits for them instead of failing.

Polls ``<endpoint>/readyz`` over TLS verified against the cluster CA, authenticated with the
admin kubeconfig's client certificate (or token), until it returns 200 or the deadline passes.
A plain function with an injectable clock and sleep: tested against a local HTTPS server.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import json
import os
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from . import kubeconfig as kubeconfigs


class NotReady(Exception):
    """The API servers did not answer /readyz with 200 before the deadline."""


def kubeconfig_server(kubeconfig: str) -> tuple[str, str | None]:
    """The API server a kubeconfig points at (its current context's cluster) and that cluster's CA PEM."""
    return kubeconfigs.server(kubeconfig)


def kubeconfig_ca(kubeconfig: str) -> str | None:
    """The PEM of the cluster CA a kubeconfig's current context trusts."""
    return kubeconfigs.server(kubeconfig)[1]


@contextlib.contextmanager
def _tls(ca_pem: str, kubeconfig: str | kubeconfigs.Credentials | None
         ) -> Iterator[tuple[ssl.SSLContext, dict[str, str]]]:
    """An SSL context trusting only the cluster CA, with the user's client certificate if it has one, and the
    headers that carry its token. `kubeconfig`: its text (embedded or file credentials; no plugin is run) or
    credentials already resolved (skyrack.kube.kubeconfig)."""
    ctx = ssl.create_default_context(cadata=ca_pem)
    creds = kubeconfigs.credentials(kubeconfig) if isinstance(kubeconfig, str) else kubeconfig
    headers = {"Authorization": f"Bearer {creds.token}"} if creds and creds.token else {}
    with tempfile.TemporaryDirectory(prefix="skyrack-readyz-") as tmp:
        if creds and creds.cert_pem and creds.key_pem:
            # ssl can only load a key from a file: a private directory that is removed right after
            cert, key = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
            for path, data in ((cert, creds.cert_pem), (key, creds.key_pem)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            ctx.load_cert_chain(cert, key)
        yield ctx, headers


Call = Callable[..., dict[str, Any]]


@contextlib.contextmanager
def client(endpoint: str, ca_pem: str, kubeconfig: str | kubeconfigs.Credentials | None,
           timeout: float = 10) -> Iterator[Call]:
    """Any request of the API server, TLS verified against the cluster CA, as the admin:
    ``call(method, path, body=None, *, patch=False)`` returns the JSON answer (``{}`` for a non-JSON
    one). A body is sent as JSON (``patch``: as a merge patch). Anything but 2xx raises
    skyrack.kube.health.ApiError with the status (0: no answer) and the server's message."""
    from .health import ApiError

    if not endpoint.startswith("https://"):
        raise ValueError(f"apiserver_endpoint {endpoint!r} is not an https:// URL")
    with _tls(ca_pem, kubeconfig) as (ctx, headers):
        def call(method: str, path: str, body: dict[str, Any] | None = None, *, patch: bool = False,
                 meta: dict[str, Any] | None = None) -> dict[str, Any]:
            data = json.dumps(body).encode() if body is not None else None
            kind = "application/merge-patch+json" if patch else "application/json"
            req = urllib.request.Request(endpoint.rstrip("/") + path, data=data, method=method,  # noqa: S310
                                         headers={**headers, **({"Content-Type": kind} if data else {})})
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:  # noqa: S310 - https only
                    raw, date = resp.read(), resp.headers.get("Date")
            except urllib.error.HTTPError as exc:
                raise ApiError(exc.code, f"{method} {path}: HTTP {exc.code}: {_message(exc)}") from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise ApiError(0, f"{method} {path}: {type(reason).__name__}: {reason}") from None
            if meta is not None:
                meta["date"] = email.utils.parsedate_to_datetime(date) if date else dt.datetime.now(dt.UTC)
            try:
                answer = json.loads(raw)
            except ValueError:
                answer = {}
            return answer if isinstance(answer, dict) else {}

        yield call


def _message(exc: urllib.error.HTTPError) -> str:
    """The API server's own reason (a Status object's message), shortened."""
    try:
        return str(json.loads(exc.read()).get("message", ""))[:300]
    except (ValueError, OSError, AttributeError):
        return ""


@contextlib.contextmanager
def api(endpoint: str, ca_pem: str, kubeconfig: str | None,
        timeout: float = 10) -> Iterator[Callable[[str], tuple[dict[str, Any], dt.datetime]]]:
    """A GET of the API server (see `client`): ``get(path)`` returns the JSON answer and the server's
    clock (its Date header)."""
    with client(endpoint, ca_pem, kubeconfig, timeout) as call:
        def get(path: str) -> tuple[dict[str, Any], dt.datetime]:
            meta: dict[str, Any] = {}
            data = call("GET", path, meta=meta)
            return data, meta["date"]

        yield get


def probe(endpoint: str, ctx: ssl.SSLContext, headers: dict[str, str], timeout: float = 5) -> str | None:
    """None when /readyz says 200, else why not (for the progress log)."""
    req = urllib.request.Request(endpoint.rstrip("/") + "/readyz", headers=headers)  # noqa: S310 - https only
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:  # noqa: S310
            return None if resp.status == 200 else f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{type(reason).__name__}: {reason}"


DEFAULT_WAIT_MINUTES = 20
WAIT_SETTING = "skyrack-cluster:apiserverWaitMinutes"


def wait_seconds(raw: str | None) -> float:
    """The stack's `apiserverWaitMinutes` (a number of minutes, fractions allowed; unset: 20) in seconds.
    Raises ValueError naming the setting for anything that is not a positive, finite number."""
    if raw is None or raw.strip() == "":
        return 60.0 * DEFAULT_WAIT_MINUTES
    try:
        minutes = float(raw)
    except ValueError:
        raise ValueError(f"{WAIT_SETTING}: {raw!r} is not a number of minutes") from None
    if not 0 < minutes < float("inf"):
        raise ValueError(f"{WAIT_SETTING}: {raw!r} must be a number of minutes above 0")
    return 60.0 * minutes


def wait_for_apiserver(endpoint: str, ca_pem: str, kubeconfig: str | None = None, *, timeout_s: float = 1200,
                       interval_s: float = 10, log: Callable[[str], None] = print,
                       clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> int:
    """Block until the API servers are ready; returns the number of attempts. Raises NotReady."""
    if not endpoint.startswith("https://"):
        raise ValueError(f"apiserver_endpoint {endpoint!r} is not an https:// URL")
    deadline = clock() + timeout_s
    attempt = 0
    with _tls(ca_pem, kubeconfig) as (ctx, headers):
        while True:
            attempt += 1
            why = probe(endpoint, ctx, headers)
            if why is None:
                log(f"API servers at {endpoint} are ready (attempt {attempt})")
                return attempt
            if clock() + interval_s > deadline:
                raise NotReady(f"API servers at {endpoint} not ready after {timeout_s:.0f}s "
                               f"({attempt} attempts, last: {why}); run `pulumi up` again once they answer")
            log(f"waiting for API servers at {endpoint}: {why} (attempt {attempt})")
            sleep(interval_s)
