"""A small etcd v3 client over mutual TLS, through etcd's JSON gateway on the client port.

etcd 3.4 serves its gRPC API as JSON on the client URL (`POST /v3/kv/put`, ...); bytes
are base64 in both directions. Every request presents the operator's client
certificate and checks the member's certificate against the environment's etcd CA.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests


@dataclass(frozen=True)
class Tls:
    """The files of a client identity: CA to trust, certificate and key to present."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def from_dir(cls, d: Path, cert: str = "client.crt", key: str = "client.key") -> Tls:
        return cls(d / "ca.crt", d / cert, d / key)


class EtcdError(RuntimeError):
    """An etcd request failed (unreachable, refused, or an error answer)."""


def _b64(s: str | bytes) -> str:
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def _unb64(s: str) -> str:
    return base64.b64decode(s).decode()


class Client:
    def __init__(self, tls: Tls, timeout: float = 5):
        self.tls, self.timeout = tls, timeout
        self.http = requests.Session()
        # Only the environment's CA, never a bundle or proxy from the environment variables.
        self.http.trust_env = False
        self.http.verify = str(tls.ca)
        self.http.cert = (str(tls.cert), str(tls.key))

    def call(self, endpoint: str, path: str, body: dict[str, Any] | None = None, timeout: float | None = None) -> dict:
        try:
            r = self.http.post(f"{endpoint}/v3/{path}", json=body or {}, timeout=timeout or self.timeout)
        except requests.RequestException as exc:
            raise EtcdError(f"{endpoint}: {type(exc).__name__}: {exc}") from None
        data = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        if r.status_code != 200:
            raise EtcdError(f"{endpoint}: {data.get('message') or data.get('error') or r.text.strip()}")
        return data

    def health(self, endpoint: str) -> bool:
        try:
            r = self.http.get(f"{endpoint}/health", timeout=self.timeout)
            return r.status_code == 200 and r.json().get("health") == "true"
        except (requests.RequestException, ValueError):
            return False

    def status(self, endpoint: str) -> dict:
        return self.call(endpoint, "maintenance/status")

    def alarms(self, endpoint: str) -> list[dict]:
        """The cluster's raised alarms: [{"memberID": ..., "alarm": "NOSPACE" | "CORRUPT"}]."""
        return self.call(endpoint, "maintenance/alarm", {"action": "GET"}).get("alarms", [])

    def alarm_disarm(self, endpoint: str, member_id: str, alarm: str) -> None:
        self.call(endpoint, "maintenance/alarm", {"action": "DEACTIVATE", "memberID": member_id, "alarm": alarm})

    def defragment(self, endpoint: str, timeout: float = 300) -> None:
        """Defragment that member's backend (it serves nothing while it runs)."""
        self.call(endpoint, "maintenance/defragment", {}, timeout=timeout)

    def move_leader(self, leader_endpoint: str, target_id: str) -> None:
        """Hand leadership to member `target_id`; only the current leader accepts it."""
        self.call(leader_endpoint, "maintenance/transfer-leadership", {"targetID": target_id}, timeout=30)

    def members(self, endpoint: str) -> list[dict]:
        return self.call(endpoint, "cluster/member/list").get("members", [])

    def member_remove(self, endpoint: str, member_id: str) -> None:
        self.call(endpoint, "cluster/member/remove", {"ID": member_id})

    def member_add(self, endpoint: str, peer_url: str) -> dict:
        return self.call(endpoint, "cluster/member/add", {"peerURLs": [peer_url]})["member"]

    def put(self, endpoint: str, key: str, value: str, timeout: float | None = None) -> int:
        """Write a key; returns the revision it was committed at."""
        answer = self.call(endpoint, "kv/put", {"key": _b64(key), "value": _b64(value)}, timeout)
        return int(answer["header"]["revision"])

    def get_prefix(self, endpoint: str, prefix: str, serializable: bool = False) -> dict[str, str]:
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        data = self.call(endpoint, "kv/range", {"key": _b64(prefix), "range_end": _b64(end),
                                                "serializable": serializable}, timeout=30)
        return {_unb64(kv["key"]): _unb64(kv.get("value", "")) for kv in data.get("kvs", [])}

    def snapshot(self, endpoint: str) -> Iterator[bytes]:
        """The member's backend database as etcd streams it (with its SHA-256 trailer, as etcdctl saves it)."""
        try:
            r = self.http.post(f"{endpoint}/v3/maintenance/snapshot", json={}, stream=True, timeout=(self.timeout, 60))
        except requests.RequestException as exc:
            raise EtcdError(f"{endpoint}: {exc}") from None
        if r.status_code != 200:
            raise EtcdError(f"{endpoint}: snapshot refused: {r.text[:200]}")
        with r:
            for line in r.iter_lines():
                if not line:
                    continue
                msg = json.loads(line)
                if "error" in msg:
                    raise EtcdError(f"{endpoint}: snapshot failed: {msg['error']}")
                blob = msg.get("result", {}).get("blob")
                if blob:
                    yield base64.b64decode(blob)
