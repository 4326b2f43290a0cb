"""Lab environments derived from `configs/lab.yaml` for tests and benchmarks.

A variant gets its own bridge and /24 (198.18.<n>.0/24), so it runs next to a developer's
lab without touching it, and optionally another number of rack nodes or etcd members.
Its lock file is written next to it, as `skyrack plan` would.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from skyrack import plan as planmod
from skyrack.lab import mesh
from skyrack.lab.state import Paths

BASE_PREFIX = "198.18.0."


def make(source: Path, dest_dir: Path, bridge: str, octet: int, rack_nodes: int | None = None,
         etcd: int | None = None, kubernetes: bool = True, racks: int | None = None,
         execution: bool = True, kubernetes_settings: dict | None = None, apiservers: int | None = None) -> Path:
    """Write `<dest_dir>/lab.yaml` (+ lock) and return its path. `kubernetes=False`: a lab of hosts
    only (no Kubernetes mirror, so nothing is built and the API servers boot without user-data).
    `rack_nodes`: every rack's size. `racks=3`: the file's racks, then its first again as `r03`, ...
    (the next addresses), or only the first `racks` of them. `execution=False`: no Receptor mesh.
    `kubernetes_settings`: merged into the file's `kubernetes:` (e.g. short-lived `certificates`).
    `apiservers`: how many API servers stand behind the load balancer instead of the file's count
    (configs/lab.yaml runs one: docs/lab.md, "Two API servers")."""
    data = yaml.safe_load(source.read_text())
    data["lab"]["bridge"] = bridge
    if not kubernetes:
        data["mirrors"].update(kubernetes=None, registry=None)
    if rack_nodes is not None:
        for rack in data["racks"]:
            rack["node_range"]["count"] = rack_nodes
    first = data["racks"][0]
    wanted = len(data["racks"]) if racks is None else racks
    del data["racks"][wanted:]
    for i in range(len(data["racks"]) + 1, wanted + 1):
        rng = first["node_range"]
        base = rng["first_ip"].rsplit(".", 1)
        ip = f"{base[0]}.{int(base[1]) + 10 * (i - 1)}"  # r01 .131..., r02 .141..., r03 .151...
        data["racks"].append({**first, "name": f"r{i:02d}",
                              "node_range": {**rng, "first_ip": ip, "name": f"r{i:02d}-n{{index:02d}}"}})
    names = [r["name"] for r in data["racks"]]
    ex = data.get("execution")
    if ex is not None:
        ex["nodes"] = [{**x, "racks": [r for r in x["racks"] if r in names]} for x in ex["nodes"]]
        ex["nodes"] = [x for x in ex["nodes"] if x["racks"]]
        if not execution or not ex["nodes"]:
            del data["execution"]
        else:  # the lab's Receptor socket is in this bridge's state directory
            ex["receptor_socket"] = str(mesh.socket_path(Paths.for_bridge(bridge)))
    if etcd is not None:
        data["control_plane"]["etcd"]["count"] = etcd
    if apiservers is not None:
        data["control_plane"]["apiservers"]["count"] = apiservers
    data["kubernetes"].update(kubernetes_settings or {})
    text = yaml.safe_dump(data, sort_keys=False).replace(BASE_PREFIX, f"198.18.{octet}.")
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / "lab.yaml"
    path.write_text(f"# A variant of {source} (tests/lab_variants.py): bridge {bridge}, 198.18.{octet}.0/24.\n" + text)
    planmod.write_lock(planmod.make(path, require_lock=False))
    return path
