"""`skyrack upgrade <env> --plan`: the steps in the order the review promises, from the plan alone or from the
cluster's versions (a stand-in's Nodes here; the join's guards have their tests in tests/ansible/test_upgrade.py)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from skyrack import plan as planmod
from skyrack import upgrades
from skyrack.cli import app
from skyrack.join import upgrade

ROOT = Path(__file__).resolve().parents[2]


def kubelet(name: str, version: str) -> dict:
    return {"metadata": {"name": name}, "status": {"nodeInfo": {"kubeletVersion": f"v{version}"}}}


def test_without_the_cluster_every_node_is_in_a_batch_in_the_joins_rack_order():
    p = planmod.make(ROOT / "configs" / "prod.yaml")
    s = upgrades.steps(p)
    assert s.apiservers == [m.name for m in p.members if m.role == "apiserver"] and len(s.apiservers) == 5
    assert [r.rack for r in s.racks] == list(dict.fromkeys(n.rack for n in p.nodes))
    first = s.racks[0]
    assert first.when == "canary: alone, first"
    assert [len(b) for b in first.batches] == [1, 12, 12, 12, 12, 12, 3]  # [1, "20%"] of 64
    assert sum(len(b) for r in s.racks for b in r.batches) == len(p.nodes)
    text = upgrades.lines(s, "configs/prod.yaml")
    assert text[1].startswith("1. Control plane, one API server at a time: apiserver-0 → apiserver-1")
    assert text[2].startswith("2. Cluster layer") and text[3].startswith("3. Racks: `skyrack join configs/prod.yaml")
    assert "r001-n02 … r001-n13 (12 nodes)" in text[4]


def test_with_the_cluster_only_the_nodes_behind_are_batched_and_a_refusal_is_said():
    p = planmod.make(ROOT / "configs" / "lab.yaml")
    target = upgrade.version(p.env.kubernetes.version)
    prev = upgrade.show((1, target[1] - 1, 5))
    nodes = [kubelet("r01-n01", prev), kubelet("r01-n02", p.env.kubernetes.version), kubelet("r02-n01", prev)]
    s = upgrades.steps(p, nodes, target)
    assert [(r.rack, r.batches, r.current) for r in s.racks] == [("r01", [["r01-n01"]], ["r01-n02"]),
                                                                 ("r02", [["r02-n01"]], [])]
    assert s.refused == ""
    behind_cp = upgrades.steps(p, nodes, (1, target[1] - 1, 5))
    assert "racks are never upgraded ahead of the control plane" in behind_cp.refused
    assert "The join would refuse now:" in upgrades.lines(behind_cp, "configs/lab.yaml")[-1]


def test_api_servers_whose_node_runs_the_target_are_done_so_a_stopped_upgrade_resumes_at_the_next():
    p = planmod.make(ROOT / "configs" / "prod.yaml")
    target = p.env.kubernetes.version
    prev = upgrade.show((1, upgrade.version(target)[1] - 1, 5))
    members = [m.name for m in p.members_of("apiserver")]
    nodes = [kubelet(members[0], target), kubelet(members[1], target), kubelet(members[2], prev)]  # 3, 4: no Node
    s = upgrades.steps(p, nodes, upgrade.version(target))
    assert s.apiservers_done == members[:2] and s.apiservers == members[2:]
    line = upgrades.lines(s, "configs/prod.yaml")[1]
    assert line.startswith(f"1. Control plane, one API server at a time: {members[2]} → {members[3]}")
    assert line.endswith(f"({members[0]}, {members[1]}: at {target} already).")
    every = upgrades.steps(p, [kubelet(m, target) for m in members], upgrade.version(target))
    assert every.apiservers == [] and upgrades.lines(every, "configs/prod.yaml")[1].startswith(
        f"1. Control plane: done, every API server's Node runs {target}")
    assert upgrades.steps(p).apiservers == members  # not read: every member


def test_the_command_plans_as_text_and_json_and_refuses_without_plan():
    runner = CliRunner()
    r = runner.invoke(app, ["upgrade", "configs/lab.yaml", "--plan", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["ok"] and data["target"] == planmod.make(ROOT / "configs" / "lab.yaml").env.kubernetes.version
    assert data["racks"][0]["batches"] == [["r01-n01"], ["r01-n02"]]
    r = runner.invoke(app, ["upgrade", "configs/lab.yaml"])
    assert r.exit_code == 1 and "skyrack upgrade only plans: give --plan" in r.output and "Traceback" not in r.output


def test_a_cluster_that_does_not_answer_is_one_clear_error(tmp_path: Path):
    from kube.conftest import admin_kubeconfig, make_ca

    endpoint = "https://127.0.0.1:9"  # nothing listens on the discard port
    ca = make_ca()
    f = tmp_path / "outputs.json"
    f.write_text(json.dumps({"apiserver_endpoint": endpoint, "ca_cert_pem": ca.cert_pem,
                             "admin_kubeconfig": admin_kubeconfig(ca, endpoint)}))
    r = CliRunner().invoke(app, ["upgrade", "configs/lab.yaml", "--plan", "--outputs", str(f)])
    assert r.exit_code == 1, r.output
    assert "the cluster did not answer" in r.output and "nothing was planned" in r.output
    assert "Traceback" not in r.output
    f.write_text(json.dumps({"apiserver_endpoint": endpoint}))
    r = CliRunner().invoke(app, ["upgrade", "configs/lab.yaml", "--plan", "--outputs", str(f)])
    assert r.exit_code == 1 and "admin_kubeconfig" in r.output and "Traceback" not in r.output
