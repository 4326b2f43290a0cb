"""Pair the environment files of two revisions and compare each pair.

Files are matched by path; a file that exists only at base and one only at head
whose texts are mostly alike (difflib ratio >= RENAME_SIMILARITY, git's default
threshold) are a rename. A pair is compared twice: its files by `compare` (what the
change to the file means), and what each revision's own code derives from them by
`effects` (`revision` runs the derivations), so a code change is seen too. A pair whose
files (environment, lock, Pulumi stack settings) are identical while no code changed is
not planned at all, so a review of one changed environment costs one pair of plans.
"""

from __future__ import annotations

import difflib
import functools
import posixpath
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from .. import config
from .. import plan as planmod
from ..errors import InputError
from . import derive, effects
from .compare import compare, summary
from .git import Repo, lock_name
from .model import Change, EnvDiff, Report
from .revision import Derivation, code_changes

RENAME_SIMILARITY = 0.5


@dataclass(frozen=True)
class Side:
    """One revision of the repository: a commit, or the working tree (rev None)."""

    repo: Repo
    rev: str | None
    label: str  # as the user wrote it
    base: bool = False  # the side compared against: its files may still name keys this code retired

    def text(self, path: str) -> str | None:
        return self.repo.read(self.rev, path)

    def plan(self, path: str) -> planmod.Plan:
        """Validate and plan the environment at this revision (InputError names rev:path)."""
        where = Path(path if self.rev is None else f"{self.label}:{path}")
        # the base may still name a key this code retired (config.RETIRED): the change under review removes it
        env = config.load(where, self.text(path), base=self.base, read=lambda rel: self.text(beside(path, rel)))
        lock_text = self.text(lock_name(path))
        lock = None if lock_text is None else planmod.read_lock(where, lock_text)
        return planmod.build(env, where, lock)


def _stem(path: str) -> str:
    return PurePosixPath(path).stem


def env_files(path: str) -> tuple[str, str, str]:
    """An environment file and the files beside it that it is read with: its lock, its stack settings."""
    p = PurePosixPath(path)
    return path, lock_name(path), str(p.with_name(f"Pulumi.{p.stem}.yaml"))


def pair(base: list[str], head: list[str], base_side: Side, head_side: Side) -> list[tuple[str | None, str | None]]:
    """(base path, head path) pairs: same path, renames, then what was added or deleted."""
    pairs: list[tuple[str | None, str | None]] = [(p, p) for p in base if p in head]
    gone = [p for p in base if p not in head]
    new = [p for p in head if p not in base]
    texts = {p: (base_side.text(p) or "").splitlines() for p in gone}
    for h in list(new):
        lines = (head_side.text(h) or "").splitlines()
        scored = [(difflib.SequenceMatcher(None, texts[g], lines).ratio(), g) for g in gone]
        best = max(scored, default=(0.0, ""))
        if best[0] >= RENAME_SIMILARITY:
            pairs.append((best[1], h))
            gone.remove(best[1])
            new.remove(h)
    pairs += [(g, None) for g in gone] + [(None, h) for h in new]
    return sorted(pairs, key=lambda p: _stem(p[1] or p[0] or ""))


def review(repo: Repo, base: Side, head: Side, only: set[str] | None = None) -> Report:
    pairs = pair(repo.env_files(base.rev), repo.env_files(head.rev), base, head)
    if only:
        pairs = [p for p in pairs if {_stem(x) for x in p if x} & only]
    assert base.rev is not None
    code = code_changes(repo.changed(base.rev, head.rev))
    todo = [(b, h) for b, h in pairs if b and h and (code or b != h or not _same(base, head, b))]
    runs = (Derivation.start(repo, base.rev, base.label, [b for b, _ in todo]),
            Derivation.start(repo, head.rev, head.label, [h for _, h in todo]))
    try:
        envs = [_one(base, head, b, h, runs if (b, h) in todo else None) for b, h in pairs]
    finally:
        for r in runs:
            r.close()
    return Report(base=base.label, head=head.label, envs=envs, code_changes=code)


def beside(path: str, rel: str) -> str:
    """A file the environment file names by a path relative to its own directory (`mirrors.ca`)."""
    return posixpath.normpath(str(PurePosixPath(path).parent / rel))


def named_files(side: Side, path: str) -> list[str]:
    """The files the environment file at `side` names (a `mirrors.ca` that is a relative path), for `_same`."""
    try:
        data = yaml.safe_load(side.text(path) or "")
    except yaml.YAMLError:
        return []  # loading it reports the file's own problem
    ca = ((data or {}).get("mirrors") or {}).get("ca") if isinstance(data, dict) else None
    if not isinstance(ca, str) or ca.lstrip().startswith("-----BEGIN") or PurePosixPath(ca).is_absolute():
        return []
    return [beside(path, ca)]


def _same(base: Side, head: Side, path: str) -> bool:
    files = [*env_files(path), *named_files(base, path), *named_files(head, path)]
    return all(base.text(p) == head.text(p) for p in files)


def _one(base: Side, head: Side, b: str | None, h: str | None,
         runs: tuple[Derivation, Derivation] | None) -> EnvDiff:
    name = _stem(h or b or "")
    status = "added" if b is None else "deleted" if h is None else "renamed" if b != h else "modified"
    diff = EnvDiff(name=name, status=status, base_path=b, head_path=h)
    try:
        if b is None:
            assert h is not None
            new = head.plan(h)
            diff.stack = new.env.lab is None
            diff.changes.append(Change("info", "environment", h, f"new environment: {summary(new)}"))
        elif h is None:
            try:
                what = summary(base.plan(b))
            except InputError:
                what = "(it did not validate at base)"
            diff.changes.append(Change("danger", "environment", b,
                                       f"environment deleted: {what} no longer managed from this repository "
                                       "(destroying its Pulumi stack is a separate, explicit step)"))
        elif runs is None:
            diff.status = "unchanged"
        else:
            same = b == h and _same(base, head, b)
            old, new = functools.cache(lambda: base.plan(b)), functools.cache(lambda: head.plan(h))
            if b != h:
                diff.changes.append(Change("danger", "environment", h,
                                           f"renamed from {b}: the Pulumi stack is named after the file, so this is a "
                                           f"new stack {name!r}; rename the stack (`pulumi stack rename`) first or "
                                           "the old one's resources are orphaned"))
            if not same:
                diff.changes += compare(old(), new())
            # One code derives both sides: the plans' differences are the files' (compare). Otherwise those
            # the files explain, derived by one code, are left to compare.
            one_code = all(r.in_process for r in runs)
            skip = frozenset({"plan"}) if one_code else frozenset()
            explained = {} if same or one_code else {p: (x, y) for p, x, y in effects.leaf_diff(
                derive.plan_facts(old(), None), derive.plan_facts(new(), None))}
            head_facts = runs[1].facts(h, new, skip)
            diff.changes += effects.changes(runs[0].facts(b, old, skip), head_facts, explained)
            lab = (head_facts.get("user_data") or {}).get("lab")  # known without planning here again
            diff.stack = not lab if lab is not None else new().env.lab is None
            if same and not diff.changes:
                diff.status = "unchanged"
    except InputError as exc:
        diff.status = "invalid"
        diff.problems = exc.problems
        diff.changes = []
    return diff

