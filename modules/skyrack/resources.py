"""Where skyrack's own files are: the Ansible playbooks, roles and collections, the Jinja2
templates, the Pulumi programs and policy pack, and the tools it runs that are not Python
packages (Azurite, cloud-init's validator).

The playbooks, roles, templates, Pulumi programs and policy pack are package data, found
with `importlib.resources`, so an installed wheel and a checkout run the same files:
`skyrack/ansible`, `skyrack/stacks` and `skyrack/policy` are the repository's `ansible/`,
`stacks/` and `policy/` directories (symlinks in the checkout, files in the wheel). Nothing
here walks up from a module to the source tree.

The tools are not in the package. In a checkout `./dev setup` installs them beside it
(`scripts/npm-tools/`, `.cache/`); an installed package finds Azurite through
`$SKYRACK_AZURITE` or `PATH`, and keeps its cache in `$SKYRACK_CACHE` or the user's cache
directory (`$XDG_CACHE_HOME/skyrack`, `~/.cache/skyrack`).
"""

from __future__ import annotations

import os
import shutil
from importlib.resources import files
from pathlib import Path

PACKAGE = Path(str(files("skyrack")))
ANSIBLE = PACKAGE / "ansible"  # ansible.cfg, playbooks/, roles/, collections/
TEMPLATES = PACKAGE / "templates"
STACKS = PACKAGE / "stacks"  # the Pulumi programs: Azure (here), cluster/ (the cluster layer), lab/ (the lab's stand-in)
POLICY = PACKAGE / "policy"  # the Pulumi policy pack


def checkout() -> Path | None:
    """The repository the package runs from (`<root>/modules/skyrack`), or None for an installed package."""
    pkg = PACKAGE.resolve()
    root = pkg.parent.parent
    return root if pkg.parent.name == "modules" and (root / "pyproject.toml").is_file() else None


def cache_dir() -> Path:
    """Where downloaded tools are unpacked (cloud-init's validator)."""
    if os.environ.get("SKYRACK_CACHE"):
        return Path(os.environ["SKYRACK_CACHE"])
    root = checkout()
    if root is not None:
        return root / ".cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "skyrack"


def azurite_bin() -> Path:
    """azurite-blob: `$SKYRACK_AZURITE`, the checkout's `scripts/npm-tools/`, or the one on PATH."""
    if os.environ.get("SKYRACK_AZURITE"):
        return Path(os.environ["SKYRACK_AZURITE"])
    root = checkout()
    if root is not None:
        return root / "scripts/npm-tools/node_modules/.bin/azurite-blob"
    found = shutil.which("azurite-blob")
    return Path(found) if found else Path("azurite-blob")
