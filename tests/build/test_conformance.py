"""The conformance suite's build and run rules that need no cluster (the run itself: bench/conformance.py).

The image list here is an excerpt of what `e2e.test --list-images` of Kubernetes 1.37.2 prints.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from skyrack import upstream
from skyrack.build import conformance as suite_build
from skyrack.build.cache import BuildError
from skyrack.lab import conformance

LISTED = """\
gcr.io/k8s-authenticated-test/agnhost:2.6
registry.k8s.io/e2e-test-images/busybox:1.36.1-1
registry.k8s.io/e2e-test-images/busybox:1.37.0-2
registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1
registry.k8s.io/e2e-test-images/agnhost:2.55
registry.k8s.io/e2e-test-images/agnhost:2.66.1
registry.k8s.io/pause:3.10.2
registry.k8s.io/e2e-test-images/nginx:1.27.0-2
registry.k8s.io/e2e-test-images/nginx:1.28.0-2
registry.k8s.io/e2e-test-images/kitten:1.8
registry.k8s.io/e2e-test-images/nautilus:1.8
registry.k8s.io/e2e-test-images/nonewprivs:1.4
registry.k8s.io/e2e-test-images/nonroot:1.5
registry.k8s.io/e2e-test-images/perl:5.26
registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2
registry.k8s.io/etcd:3.7.0-0
registry.k8s.io/sig-storage/csi-attacher:v4.12.0
registry.k8s.io/e2e-test-images/node-perf/npb-ep:1.6.0
invalid.registry.k8s.io/invalid/alpine:3.1
registry.k8s.io/e2e-test-images/something-new:1.0
"""
B = upstream.KUBERNETES_BUILDS["1.37.2"]


@pytest.fixture
def suite_dir(tmp_path: Path) -> Path:
    (tmp_path / "images.txt").write_text(LISTED)
    return tmp_path


def test_every_tag_of_the_images_built_here_is_made_and_named_as_upstream_names_it(suite_dir):
    assert suite_build.image_refs(suite_dir) == {
        "busybox-1.36.1-1": "registry.k8s.io/e2e-test-images/busybox:1.36.1-1",
        "busybox-1.37.0-2": "registry.k8s.io/e2e-test-images/busybox:1.37.0-2",
        "glibc-dns-testing-2.1.1": "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1"}


def test_a_suite_that_lists_no_busybox_is_a_build_error(tmp_path):
    (tmp_path / "images.txt").write_text("registry.k8s.io/pause:3.10.2\n")
    with pytest.raises(BuildError, match=r"lists no registry\.k8s\.io/e2e-test-images image of"):
        suite_build.image_refs(tmp_path)


def test_every_image_not_built_here_has_its_reason(suite_dir):
    got = suite_build.unbuilt(suite_dir, B)
    # the cluster's own agnhost and pause, busybox, and the whole suite's images are served; the rest is listed
    assert set(got) == {"gcr.io/k8s-authenticated-test/agnhost:2.6",
                        "registry.k8s.io/e2e-test-images/perl:5.26",
                        "registry.k8s.io/sig-storage/csi-attacher:v4.12.0",
                        "registry.k8s.io/e2e-test-images/node-perf/npb-ep:1.6.0",
                        "invalid.registry.k8s.io/invalid/alpine:3.1",
                        "registry.k8s.io/e2e-test-images/something-new:1.0"}
    assert "private registry" in got["gcr.io/k8s-authenticated-test/agnhost:2.6"]
    assert "no conformance test" in got["registry.k8s.io/e2e-test-images/perl:5.26"]
    assert "CSI" in got["registry.k8s.io/sig-storage/csi-attacher:v4.12.0"]
    assert "not conformance" in got["registry.k8s.io/e2e-test-images/node-perf/npb-ep:1.6.0"]
    assert "invalid registry" in got["invalid.registry.k8s.io/invalid/alpine:3.1"]
    assert got["registry.k8s.io/e2e-test-images/something-new:1.0"] == "not built here"


def test_the_subset_focus_matches_exactly_its_tests():
    focus = re.compile(conformance.exactly(conformance.SUBSET))
    for name in conformance.SUBSET:
        full = f"{conformance.SUITE_TEXT} {name}"  # what Ginkgo matches a focus against
        assert focus.search(full)
        assert not focus.search(full + " [Slow]") and not focus.search(f"{conformance.SUITE_TEXT} [sig-x] {name}")
    assert not focus.search(f"{conformance.SUITE_TEXT} [sig-network] DNS should provide DNS for services")


def test_one_process_runs_e2e_test_and_more_go_through_ginkgo(tmp_path):
    args = (tmp_path, Path("/k/admin.conf"), Path("/k/kubectl"), tmp_path / "r", "F", "S")
    one = conformance.command(*args, procs=1, timeout_min=30)
    assert one[0] == str(tmp_path / "bin/e2e.test")
    assert {"--ginkgo.focus=F", "--ginkgo.skip=S", f"--ginkgo.junit-report={tmp_path / 'r/junit.xml'}",
            "--provider=skeleton", "--kubeconfig=/k/admin.conf", "--kubectl-path=/k/kubectl",
            "--ginkgo.timeout=30m"} <= set(one)
    many = conformance.command(*args, procs=3, timeout_min=30)
    assert many[0] == str(tmp_path / "bin/ginkgo") and "--procs=3" in many
    split = many.index("--")
    assert many[split - 1] == str(tmp_path / "bin/e2e.test")
    assert "--provider=skeleton" in many[split:] and "--focus=F" in many[:split]
    # the racks' team taint does not keep the suite from starting (it is lifted on the nodes it uses)
    assert "--non-blocking-taints=node-role.kubernetes.io/control-plane,skyrack.io/team" in many[split:]


def test_a_kubeconfig_that_is_not_there_is_one_clear_error(tmp_path):
    with pytest.raises(conformance.ConformanceError, match=r"gone\.conf: no such kubeconfig"):
        conformance.preflight(Path("/bin/false"), tmp_path / "gone.conf")


def test_the_whole_suites_images_are_a_second_set_the_subset_does_without(suite_dir):
    whole = suite_build.whole_suite_refs(suite_dir, B)
    assert whole == {
        "agnhost-2.55": "registry.k8s.io/e2e-test-images/agnhost:2.55",  # the previous release: not the cluster's
        "etcd-3.7.0-0": "registry.k8s.io/etcd:3.7.0-0",
        "sample-apiserver-1.29.2": "registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2",
        "kitten-1.8": "registry.k8s.io/e2e-test-images/kitten:1.8",
        "nautilus-1.8": "registry.k8s.io/e2e-test-images/nautilus:1.8",
        "nginx-1.27.0-2": "registry.k8s.io/e2e-test-images/nginx:1.27.0-2",
        "nginx-1.28.0-2": "registry.k8s.io/e2e-test-images/nginx:1.28.0-2",
        "nonewprivs-1.4": "registry.k8s.io/e2e-test-images/nonewprivs:1.4",
        "nonroot-1.5": "registry.k8s.io/e2e-test-images/nonroot:1.5"}
    assert not set(whole.values()) & set(suite_build.image_refs(suite_dir).values())
    subset = suite_build.unbuilt(suite_dir, B, whole=False)
    for ref in whole.values():
        assert "whole suite only" in subset[ref], ref
    assert set(subset) - set(whole.values()) == set(suite_build.unbuilt(suite_dir, B))


def test_a_suite_that_lists_no_image_of_the_whole_set_is_a_build_error(tmp_path):
    (tmp_path / "images.txt").write_text(LISTED.replace("registry.k8s.io/e2e-test-images/nonewprivs:1.4\n", ""))
    with pytest.raises(BuildError, match=r"lists no registry\.k8s\.io/e2e-test-images image of \['nonewprivs'\]"):
        suite_build.whole_suite_refs(tmp_path, B)


def test_nginx_is_laid_out_as_upstreams_image(tmp_path):
    root = tmp_path / "root"  # what Debian's nginx package installs, in part
    (root / "etc/nginx/sites-enabled").mkdir(parents=True)
    (root / "etc/nginx/sites-enabled/default").symlink_to("/etc/nginx/sites-available/default")
    (root / "var/log/nginx").mkdir(parents=True)
    (root / "var/log/nginx/access.log").write_text("")
    suite_build._nginx_layout(root)
    site = (root / "etc/nginx/sites-enabled/default").read_text()
    assert not (root / "etc/nginx/sites-enabled/default").is_symlink()
    assert "listen 80;" in site and "root /usr/share/nginx/html;" in site
    assert (root / "usr/share/nginx/html/index.html").is_file()
    assert (root / "var/log/nginx/access.log").readlink() == Path("/dev/stdout")
    assert (root / "var/log/nginx/error.log").readlink() == Path("/dev/stderr")
    suite_build._marker(root, "registry.k8s.io/e2e-test-images/nginx:1.27.0-2")
    assert "in place of registry.k8s.io/e2e-test-images/nginx:1.27.0-2" in (root / suite_build.MARKER).read_text()


def test_busybox_has_every_applet_in_bin_as_upstreams_image(tmp_path):
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "bin/busybox").write_text("binary")
    suite_build._link_applets(root, ["bin/busybox", "bin/sh", "sbin/sysctl", "usr/bin/wget"])
    for name in ("sh", "sysctl", "wget"):  # the sysctl test runs /bin/sysctl
        assert (root / "bin" / name).readlink() == Path("/bin/busybox"), name
    assert (root / "sbin/sysctl").readlink() == Path("/bin/busybox")
    assert (root / "usr/bin/wget").readlink() == Path("/bin/busybox")
    assert not (root / "bin/busybox").is_symlink()


# Debian bookworm's busybox 1:1.35.0-4+deb12u1, debian/patches/series (abridged)
SERIES = """\
# The following patches need significant re-working for the current version
# u-mount-FreeBSD-support.patch

# other patches
shell-ash-export-HOME.patch
revert-9c143ce52da11ec3d21a3491c3749841d3dc10f0.patch
temp-deb-installer-hack.patch
CVE-2022-48174.patch
CVE-2023-42363.patch  # a trailing comment
"""


def test_busybox_is_built_with_debians_patches_in_order_less_the_one_that_drops_environment_names():
    assert suite_build.busybox_patches(SERIES) == [
        "shell-ash-export-HOME.patch", "CVE-2022-48174.patch", "CVE-2023-42363.patch"]


def test_a_debian_series_without_the_patch_left_out_is_a_build_error_not_a_silent_change():
    with pytest.raises(BuildError, match="no longer has revert-9c143ce"):
        suite_build.busybox_patches(SERIES.replace("revert-9c143ce52da11ec3d21a3491c3749841d3dc10f0.patch\n", ""))


@pytest.mark.parametrize("keeps", [True, False])
def test_a_busybox_whose_shell_drops_an_environment_name_fails_the_build(tmp_path, keeps):
    # stand-ins for `busybox sh -c env`: one passes its environment on, one weeds out the name as Debian's does
    fake = tmp_path / "busybox"
    drop = "" if keeps else f"os.environ.pop({suite_build.BUSYBOX_ENV_PROBE!r})\n"
    fake.write_text(f"#!{sys.executable}\nimport os\n{drop}os.execvp('env', ['env'])\n")  # (dash drops it too)
    fake.chmod(0o755)
    if keeps:
        suite_build._check_busybox(fake)
    else:
        with pytest.raises(BuildError, match="drops the environment name 'data-1'"):
            suite_build._check_busybox(fake)


def test_a_failure_is_told_by_its_first_line_and_a_bare_expected_by_what_it_expected():
    assert conformance.first_line("[FAILED] timed out waiting for the condition\nmore") == \
        "timed out waiting for the condition"
    gomega = "Expected\n    <string>: NAME=\"Debian GNU/Linux\"\nto contain substring\n    <string>: Alpine Linux\n"
    assert conformance.first_line(gomega) == \
        'Expected <string>: NAME="Debian GNU/Linux" to contain substring <string>: Alpine Linux'
    assert conformance.first_line("expected \"a=b\" in container output: Expected\n  <string>: X=1\n").startswith(
        'expected "a=b" in container output: Expected <string>: X=1')
    assert conformance.first_line(None) == "" and conformance.first_line("\n  \n") == ""
