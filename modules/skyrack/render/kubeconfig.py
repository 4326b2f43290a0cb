"""A kubeconfig for a client certificate (the cluster layer's admin credentials)."""

from __future__ import annotations

import base64

import yaml


def _b64(pem: str) -> str:
    return base64.b64encode(pem.encode()).decode()


def kubeconfig(cluster: str, server: str, ca_cert_pem: str, cert_pem: str, key_pem: str, user: str = "admin") -> str:
    context = f"{user}@{cluster}"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert_pem)}}],
        "users": [{"name": context, "user": {"client-certificate-data": _b64(cert_pem),
                                             "client-key-data": _b64(key_pem)}}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": context}}],
        "current-context": context,
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)
