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



def _config(layout: Path, tag: str) -> tuple[dict, int]:
    """An image's config and its number of layers, read from the OCI layout."""
    import json

    def blob(digest: str) -> dict:
        algo, hexd = digest.split(":")
        return json.loads((layout / "blobs" / algo / hexd).read_text())

    index = json.loads((layout / "index.json").read_text())
    desc = next(m for m in index["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] == tag)
    manifest = blob(desc["digest"])
    return blob(manifest["config"]["digest"])["config"], len(manifest["layers"])


def test_an_image_built_from_another_keeps_its_entrypoint_and_adds_one_layer(tmp_path: Path):
    """As a Dockerfile's `FROM agnhost`, `COPY`, `CMD`: the conformance suite's kitten and nautilus."""
    import subprocess

    base_root = tmp_path / "base"
    images.skeleton(base_root)
    (base_root / "agnhost").write_text("binary")
    log = (tmp_path / "log").open("w")
    cluster = tmp_path / "cluster"
    images.assemble(cluster, "agnhost-2.66.1", base_root, log, user=0, entrypoint=("/agnhost",), cmd=("pause",))
    layout = tmp_path / "suite"
    images.copy_image(cluster, "agnhost-2.66.1", layout, "base", log)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "kitten.jpg").write_text("a kitten")
    images.layer(layout, "base", "kitten-1.8", extra, log, cmd=("test-webserver",))
    images.layer(layout, "base", "agnhost-2.55", extra, log)  # no command given: the base's stays
    images.untag(layout, "base", log)

    config, layers = _config(layout, "kitten-1.8")
    assert (config["Entrypoint"], config["Cmd"], layers) == (["/agnhost"], ["test-webserver"], 2)
    config, layers = _config(layout, "agnhost-2.55")
    assert (config["Entrypoint"], config["Cmd"], layers) == (["/agnhost"], ["pause"], 2)
    assert _config(cluster, "agnhost-2.66.1")[1] == 1  # the cluster's own image is not changed
    bundle = tmp_path / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:kitten-1.8", str(bundle)], check=True,
                   capture_output=True)
    assert (bundle / "rootfs/agnhost").read_text() == "binary"
    assert (bundle / "rootfs/kitten.jpg").read_text() == "a kitten"
    index = (layout / "index.json").read_text()
    assert '"base"' not in index
