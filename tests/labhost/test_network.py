"""The lab's stand-in for the site's routers and Azure's route table (skyrack.lab.network.fabric_routes).

In production an API server reaches on-prem pods through its default gateway (the VNet routes them over the VPN,
the site to the rack), and a rack node reaches an API server's pods through its own. The lab host forwards
nothing, so each lab node gets those routes directly; tests/lab/test_kubernetes.py shows them carrying traffic.
"""

from __future__ import annotations

import shutil

import yaml

from skyrack import plan as planmod
from skyrack.lab import network, nodes
from support import CONFIGS


def _lab_plan(tmp_path, *, one_segment: bool) -> planmod.Plan:
    shutil.copy(CONFIGS / "lab.lock.yaml", tmp_path / "lab.lock.yaml")
    env = yaml.safe_load((CONFIGS / "lab.yaml").read_text())
    if not one_segment:
        for rack in env["racks"]:
            rack.pop("segment", None)
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump(env))
    return planmod.make(tmp_path / "lab.yaml")


def test_an_api_server_routes_every_racks_pods_and_a_rack_node_the_api_servers(tmp_path):
    p = _lab_plan(tmp_path, one_segment=True)
    api = p.members_of("apiserver")[0]
    racks = {n.name: (n.pod_cidr, n.ip) for n in p.nodes}
    assert len(racks) >= 3 and api.pod_cidr
    assert sorted(network.fabric_routes(p, api.name)) == sorted(racks.values())
    # the racks share one segment: their own skyrack-pod-routes routes each other, the lab only the API servers
    for name in racks:
        assert network.fabric_routes(p, name) == [(api.pod_cidr, api.ip)]
    # etcd members run no pods
    assert network.fabric_routes(p, p.members_of("etcd")[0].name) == []


def test_racks_on_their_own_segments_reach_each_other_through_the_stand_in(tmp_path):
    p = _lab_plan(tmp_path, one_segment=False)
    api = p.members_of("apiserver")[0]
    n = next(x for x in p.nodes if x.rack == "r01")
    same_rack = {x.pod_cidr for x in p.nodes if x.rack == "r01" and x.name != n.name}
    other_racks = {(x.pod_cidr, x.ip) for x in p.nodes if x.rack != "r01"}
    routes = set(network.fabric_routes(p, n.name))
    assert routes == other_racks | {(api.pod_cidr, api.ip)}
    assert not {cidr for cidr, _ in routes} & same_rack  # the pod_network role's, never twice


def test_the_routes_are_a_host0_drop_in_and_none_removes_it(tmp_path):
    nodes.write_routes(tmp_path, [("10.128.0.0/26", "198.18.0.131"), ("10.128.0.64/26", "198.18.0.132")])
    text = (tmp_path / nodes.FABRIC_ROUTES).read_text()
    assert "[Route]\nDestination=10.128.0.0/26\nGateway=198.18.0.131\n" in text
    assert text.count("[Route]") == 2
    assert (tmp_path / nodes.FABRIC_ROUTES).parent.name == "80-container-host0.network.d"
    nodes.write_routes(tmp_path, [])
    assert not (tmp_path / nodes.FABRIC_ROUTES).exists()
