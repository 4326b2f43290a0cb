"""`skyrack diff` output: text for a terminal, Markdown for a pull-request comment, JSON.

The Markdown fits a PR comment: one table per changed environment, node names
folded into <details> per rack, and the whole body kept under GitHub's comment limit
(the JSON output, kept as a CI artifact, always has everything).
"""

from __future__ import annotations

import json

from .model import RISKS, EnvDiff, Report, counts

MARKER = "<!-- skyrack-diff -->"  # lets CI find and update its own comment
COMMENT_LIMIT = 60_000  # GitHub allows 65,536 characters
NAMES_SHOWN = 64  # node names listed per change
CODE_SHOWN = 12  # changed code files listed
ICON = {"danger": "🔴 danger", "caution": "🟡 caution", "info": "🔵 info"}


def _tally(counts: dict[str, int]) -> str:
    return ", ".join(f"{counts[r]} {r}" for r in RISKS)


def _headline(report: Report) -> str:
    envs = f"{len(report.changed)} of {len(report.envs)} environment(s) changed"
    invalid = f", {len(report.invalid)} invalid" if report.invalid else ""
    return f"{envs}{invalid}: {_tally(report.counts)}"


def _node_list(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    return shown + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")


def _code(report: Report) -> str | None:
    files = report.code_changes
    if not files:
        return None
    shown = ", ".join(files[:CODE_SHOWN]) + (f" and {len(files) - CODE_SHOWN} more" if len(files) > CODE_SHOWN else "")
    return f"code changed ({len(files)} file(s): {shown}): each environment compared as each revision's code derives it"


def _env_title(e: EnvDiff) -> str:
    where = f"{e.base_path} → {e.head_path}" if e.status == "renamed" else e.path
    return f"{e.name} ({where}): {e.status}"


# ----------------------------------------------------------------------------- text


def text(report: Report, verbose: bool = False) -> str:
    lines = [f"skyrack diff {report.base} → {report.head}: {_headline(report)}"]
    lines += [c for c in [_code(report)] if c]
    for e in report.envs:
        if e.status == "unchanged":
            continue
        lines += ["", _env_title(e) + (f" ({_tally(counts(e.changes))})" if e.changes else "")]
        lines += [f"  error {p}" for p in e.problems]
        for c in e.sorted_changes():
            lines.append(f"  {c.risk:<8} {c.area:<14} {c.message}  [{c.field}]")
            if c.nodes and (verbose or len(c.nodes) <= 8):
                lines.append(f"{'':27}{_node_list(c.nodes)}")
    if not report.changed:
        lines.append("no environment changes")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- markdown


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _markdown_env(e: EnvDiff, node_lists: bool) -> list[str]:
    lines = [f"#### `{e.name}`: {e.status}" + (f" ({_tally(counts(e.changes))})" if e.changes else ""), ""]
    if e.status == "renamed":
        lines += [f"`{e.base_path}` → `{e.head_path}`", ""]
    if e.problems:
        lines += ["Invalid: `skyrack validate` reports", "", "```"] + [str(p) for p in e.problems] + ["```", ""]
    if e.changes:
        lines += ["| risk | area | change | field |", "|---|---|---|---|"]
        lines += [f"| {ICON[c.risk]} | {c.area} | {_cell(c.message)} | `{_cell(c.field)}` |"
                  for c in e.sorted_changes()]
        lines.append("")
    with_nodes = [c for c in e.sorted_changes() if c.nodes] if node_lists else []
    if with_nodes:
        total = sum(len(c.nodes) for c in with_nodes)
        lines += [f"<details><summary>{total:,} node(s) concerned, by rack</summary>", ""]
        lines += [f"- **{_cell(c.message)}**: {_node_list(c.nodes)}" for c in with_nodes]
        lines += ["", "</details>", ""]
    return lines


def markdown(report: Report) -> str:
    """The PR comment. Too long with node names? Without them. Still too long? Cut."""
    out = _markdown(report, node_lists=True)
    if len(out) > COMMENT_LIMIT:
        out = _markdown(report, node_lists=False)
    if len(out) > COMMENT_LIMIT:
        out = out[: COMMENT_LIMIT - len(CUT)].rsplit("\n", 1)[0] + CUT
    return out


CUT = "\n\n… cut to fit a comment: the job's `skyrack-diff.json` artifact has every change.\n"


def _markdown(report: Report, node_lists: bool) -> str:
    danger = report.counts["danger"]
    headline = _headline(report).replace(f"{danger} danger", f"**{danger} danger**") if danger else _headline(report)
    verdict = ("**Needs an explicit approval**: this change carries danger items or an invalid environment."
               if report.exit_code else "No danger items.")
    lines = [MARKER, f"### skyrack diff `{report.base}` → `{report.head}`", "", f"{headline}. {verdict}", ""]
    lines += [f"{_cell(c)}.", ""] if (c := _code(report)) else []
    for e in report.envs:
        if e.status != "unchanged":
            lines += _markdown_env(e, node_lists)
    unchanged = [e.name for e in report.envs if e.status == "unchanged"]
    if unchanged:
        lines.append(f"Unchanged: {', '.join(unchanged)}.")
    if not node_lists:
        lines.append("Node names left out to fit a comment: see the job's `skyrack-diff.json` artifact.")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- json


def as_json(report: Report) -> str:
    return json.dumps(report.as_dict(), indent=2) + "\n"


