"""Every manifest of the cluster layer, grouped by concern: the one list both the Pulumi
components (``layer``) and ``skyrack kube manifests`` render."""

from __future__ import annotations

import datetime as dt
from typing import Any

from .. import plan as planmod
from . import autoscaler, batch, bootstrap, cloudpools, gpu, isolation, monitoring
from . import objects as o


def all_manifests(p: planmod.Plan, *, endpoint: Any, ca_cert_pem: Any, token_id: Any, token_secret_part: Any,
                  now: dt.datetime, scale_sets: Any = None, autoscaler_credentials: Any = None,
                  pool_token_id: Any = None, pool_token_secret_part: Any = None) -> dict[str, list[o.Manifest]]:
    """Concern name -> its manifests; concerns with nothing to create are left out.

    Any argument but the plan and `now` may be a pulumi.Output (see ``objects.lift``).
    """
    scaler = autoscaler.manifests(p, scale_sets)
    if scaler and autoscaler_credentials is not None:
        scaler.append(autoscaler.credentials_secret(autoscaler_credentials))
    groups = {
        "Bootstrap": bootstrap.manifests(p, endpoint=endpoint, ca_cert_pem=ca_cert_pem, token_id=token_id,
                                         token_secret_part=token_secret_part, now=now),
        "Batch": batch.manifests(p) + isolation.manifests(),
        "Gpu": gpu.manifests(p) if any(n.gpu_count for n in p.nodes) else [],
        "Monitoring": monitoring.manifests(p),
        "Autoscaler": scaler,
        "CloudPools": cloudpools.manifests(p, token_id=pool_token_id, token_secret_part=pool_token_secret_part),
    }
    return {k: v for k, v in groups.items() if v}
