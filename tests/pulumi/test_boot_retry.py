"""A first boot that waits for the site: the rendered retry fragment, run by a real `sh`, and where it is used.

The lab shows it on real members (tests/etcd/test_cluster.py: the install re-run while the site's mirror is
down, finishing once it is back); here the function itself: the backoff, the deadline, what the boot log says.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from skyrack import certs
from skyrack import plan as planmod
from skyrack.render import cloud_init, render
from support import CONFIGS, rejects

# The fragment as rendered, then the test's own deadline, log and `sleep` (which records instead of waiting).
HARNESS = """\
{fragment}
boot_log={log}
deadline=$(( $(date +%s) + {seconds} ))
sleep() {{ echo "$1" >>{sleeps}; }}
flaky() {{ n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) >{count}; [ "$n" -ge {failures} ]; }}
retry "the mirror" flaky
echo "rc=$?"
"""


def run(tmp_path: Path, failures: int, seconds: int) -> tuple[str, list[str], list[int]]:
    fragment = render("cloud-init/retry.sh.j2", deadline_minutes=30, boot_log=cloud_init.BOOT_LOG)
    script = HARNESS.format(fragment=fragment, log=tmp_path / "boot.log", seconds=seconds, sleeps=tmp_path / "sleeps",
                            count=tmp_path / "count", failures=failures)
    out = subprocess.run(["sh", "-c", script, "skyrack-test"], capture_output=True, text=True, timeout=30)
    log = (tmp_path / "boot.log").read_text().splitlines() if (tmp_path / "boot.log").exists() else []
    sleeps = [int(s) for s in (tmp_path / "sleeps").read_text().split()] if (tmp_path / "sleeps").exists() else []
    return out.stdout, log, sleeps


def test_a_step_is_retried_with_backoff_until_it_succeeds(tmp_path: Path) -> None:
    out, log, sleeps = run(tmp_path, failures=6, seconds=600)
    assert out.strip() == "rc=0"
    assert sleeps == [5, 10, 20, 40, 60, 60]  # doubling, capped at a minute
    assert [line.split(" ", 2)[2] for line in log] == [
        *(f"waiting: the mirror (attempt {i} failed; again in {s} s)" for i, s in enumerate(sleeps, 1)),
        "done: the mirror (attempt 7)"]
    assert all(line.split(" ")[1] == "skyrack-test:" for line in log)  # which script said it


def test_at_the_deadline_a_step_fails_and_says_so(tmp_path: Path) -> None:
    out, log, sleeps = run(tmp_path, failures=100, seconds=0)
    assert out.strip() == "rc=1" and sleeps == []
    assert log[-1].endswith("FAILED: the mirror (attempt 1 failed at the deadline, 30 min after the start)")


def test_a_step_that_works_at_once_says_nothing(tmp_path: Path) -> None:
    out, log, sleeps = run(tmp_path, failures=0, seconds=600)
    assert (out.strip(), log, sleeps) == ("rc=0", [], [])


def test_every_network_step_of_a_first_boot_is_retried_until_the_deadline() -> None:
    prod = planmod.make(CONFIGS / "prod.yaml")
    issued = certs.issue_all(prod)
    etcd, api = prod.members_of("etcd")[0], prod.members_of("apiserver")[0]
    scripts = {
        "etcd": yaml.safe_load(cloud_init.etcd(prod, etcd, cloud_init.EtcdPki.issued(issued, etcd.name),
                                               kubernetes_repo="https://m.lab.internal/k/")),
        "apiserver": yaml.safe_load(cloud_init.apiserver(prod, api, cloud_init.ApiServerPki.issued(issued, api.name),
                                                         kubernetes_repo="https://m.lab.internal/k/")),
    }
    for role, config in scripts.items():
        path = "/usr/local/sbin/skyrack-etcd-install" if role == "etcd" else "/usr/local/sbin/skyrack-kubeadm"
        [script] = [f["content"] for f in config["write_files"] if f["path"] == path]
        assert f"deadline=$(( $(date +%s) + {30 * 60} ))" in script  # prod's default: 30 minutes
        lines = [line.strip() for line in script.replace("\\\n", " ").splitlines()]  # continuations joined
        fetches = [line for line in lines if not line.startswith("#")
                   and any(w in line for w in ("apt-get update", "apt-get install", "curl "))]
        assert len(fetches) == 5, fetches  # lists, prerequisites, the key, the repository's lists, the packages
        for line in fetches:  # each a retried step; curl inside repository_key, which is one
            assert line.startswith("retry ") or line.startswith("curl -fsSL"), line
        assert 'retry "the Kubernetes repository\'s key (https://m.lab.internal/k/Release.key)" repository_key' in lines
        assert all("--error-on=any" in line for line in fetches if "apt-get update" in line)
    bootstrap = next(f["content"] for f in scripts["apiserver"]["write_files"]
                     if f["path"] == "/usr/local/sbin/skyrack-kubeadm")
    assert 'say "FAILED: kubeadm init' in bootstrap and 'say "ready: kubeadm init done"' in bootstrap


@pytest.mark.parametrize("value", [0, -5, 24 * 60 + 1, "30"])
def test_a_deadline_out_of_range_is_one_clear_error(tmp_path: Path, value) -> None:
    data = yaml.safe_load((CONFIGS / "dev.yaml").read_text())
    data["control_plane"]["boot_deadline_minutes"] = value
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    rejects(path, "dev.yaml: control_plane.boot_deadline_minutes: ")
