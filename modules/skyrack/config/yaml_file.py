"""Reading an environment file's YAML: bounded in size and expansion, duplicate keys refused.

Problems name the file, line and column (`yaml_problem`); the lock file's reader uses the same
duplicate-key rule (`construct_unique_mapping`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError, Problem, printable
from ..files import read_text
from .schema import MAX_FILE_BYTES, MAX_YAML_NODES


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor`: merged keys may be overridden, that is what a merge is for
        key = loader.construct_object(key_node, deep=deep)
        try:
            twice = key in seen
        except TypeError:  # a list or mapping as a key
            raise yaml.constructor.ConstructorError(None, None, "a key must be a plain value",
                                                    key_node.start_mark) from None
        if twice:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice (first on line {seen[key].start_mark.line + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_unique_mapping)


def read_yaml(path: Path, text: str | None = None) -> Any:
    """Parse a YAML file; problems name the file, line and column.

    At most MAX_FILE_BYTES, and at most MAX_YAML_NODES once aliases are expanded (checked on the
    node graph before anything is built, so an alias bomb costs nothing); recursive aliases and
    nesting too deep for the parser are problems, not crashes."""
    label = str(path)
    if text is None:
        text = read_text(path, MAX_FILE_BYTES)
    elif len(text) > MAX_FILE_BYTES:
        raise InputError([Problem(label, "", f"larger than {MAX_FILE_BYTES // 1024} KiB: not a skyrack file")])
    loader = None
    try:
        loader = _UniqueKeyLoader(text)  # the reader refuses some characters already
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(label, node)
        return loader.construct_document(node)
    except (yaml.YAMLError, RecursionError) as exc:
        raise InputError([yaml_problem(label, exc)]) from None
    finally:
        if loader is not None:
            loader.dispose()


def yaml_problem(label: str, exc: yaml.YAMLError | RecursionError) -> Problem:
    """A YAML error as `file: line L, column C: invalid YAML: what`."""
    if isinstance(exc, RecursionError):
        return Problem(label, "", "invalid YAML: nested too deeply")
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    what = getattr(exc, "problem", None) or str(exc)
    return Problem(label, where, f"invalid YAML: {printable(what)}")


def _check_expansion(label: str, root: yaml.Node) -> None:
    """Count the nodes the document expands to (aliases included) without expanding it."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]

    def children(n: yaml.Node) -> list[yaml.Node]:
        if isinstance(n, yaml.MappingNode):
            return [x for pair in n.value for x in pair]
        return list(n.value) if isinstance(n, yaml.SequenceNode) else []

    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children(node))
            if size[key] > MAX_YAML_NODES:
                line = node.start_mark.line + 1
                raise InputError([Problem(label, f"line {line}", f"expands to more than {MAX_YAML_NODES:,} YAML nodes "
                                          "(aliases included): not an environment file")])
            continue
        if key in size:
            continue
        if key in on_path:
            raise InputError([Problem(label, f"line {node.start_mark.line + 1}", "invalid YAML: a recursive alias")])
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children(node) if id(c) not in size)
