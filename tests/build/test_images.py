"""What the image recipes lay out beside the binaries (the images themselves run in tests/lab)."""

from __future__ import annotations

from pathlib import Path

from skyrack.build import images


def test_agnhost_has_upstreams_layout_beside_its_binary(tmp_path: Path):
    k8s_dir = tmp_path / "kubernetes"
    porter = k8s_dir / "test/images/agnhost/porter"
    porter.mkdir(parents=True)
    for name in images.PORTER_CERTS:
        (porter / name).write_text(f"upstream's {name}\n")
    root = tmp_path / "root"
    images.skeleton(root)
    (root / "agnhost").write_text("binary")

    images._agnhost_layout(root, k8s_dir)

    assert (root / "uploads").is_dir()
    assert (root / "localhost.crt").read_text() == "upstream's localhost.crt\n"
    assert (root / "localhost.key").read_text() == "upstream's localhost.key\n"
    assert (root / "agnhost-2").readlink() == Path("agnhost")
    users = {line.split(":")[0]: line.split(":") for line in (root / "etc/passwd").read_text().splitlines()}
    groups = {line.split(":")[0]: line.split(":") for line in (root / "etc/group").read_text().splitlines()}
    assert users["user-defined-in-image"][2:4] == ["1000", "1000"]
    assert groups["group-defined-in-image"][2:] == ["50000", "user-defined-in-image"]
    assert "root" in users and "nonroot" in users  # the skeleton's users stay

