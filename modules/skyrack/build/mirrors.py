"""The Debian mirrors this host is configured with, read from its apt sources at run time.

The lab never names a mirror itself: debootstrap, the nodes' apt sources and the apt
proxy's allow-list all come from `/etc/apt/sources.list` and `/etc/apt/sources.list.d/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

APT_DIR = Path("/etc/apt")


@dataclass(frozen=True)
class Source:
    uri: str  # e.g. http://mirror/debian
    suites: tuple[str, ...]
    components: tuple[str, ...]

    @property
    def host(self) -> str:
        return urlsplit(self.uri).netloc


def _deb822(text: str) -> list[Source]:
    out = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            out.append(Source(uri.rstrip("/"), tuple(fields.get("suites", "").split()),
                              tuple(fields.get("components", "").split())))
    return out


def _one_line(text: str) -> list[Source]:
    out = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = [w for w in words[1:] if not w.startswith("[")]  # drop [options]
        if len(words) >= 2:
            out.append(Source(words[0].rstrip("/"), (words[1],), tuple(words[2:])))
    return out


def sources(apt_dir: Path = APT_DIR) -> list[Source]:
    """Every enabled `deb` source over plain HTTP (what the proxy can forward), in apt's order."""
    found: list[Source] = []
    main = apt_dir / "sources.list"
    if main.exists():
        found += _one_line(main.read_text())
    for path in sorted((apt_dir / "sources.list.d").glob("*")):
        if path.suffix == ".sources":
            found += _deb822(path.read_text())
        elif path.suffix == ".list":
            found += _one_line(path.read_text())
    return [s for s in found if s.uri.startswith("http://")]


def primary(suite: str, apt_dir: Path = APT_DIR) -> Source | None:
    """The source that carries `suite` itself (what debootstrap needs), if any."""
    return next((s for s in sources(apt_dir) if suite in s.suites), None)


def sources_list(srcs: list[Source], kind: str = "deb") -> str:
    """The same sources as a one-line-style sources.list, for the nodes (`kind` "deb-src": their sources)."""
    lines = ["# The lab host's Debian sources; nodes reach them only through the lab's apt proxy."]
    lines += [f"{kind} {s.uri} {suite} {' '.join(s.components)}" for s in srcs for suite in s.suites]
    return "\n".join(lines) + "\n"
