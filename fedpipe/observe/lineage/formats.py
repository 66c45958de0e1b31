"""The audit as text, JSON or a Mermaid flowchart."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping
from typing import Any

from fedpipe.config import layout
from fedpipe.observe.lineage.git import GitState
from fedpipe.observe.lineage.result import Check, Lineage
from fedpipe.observe.runfiles import flat_params

__all__ = ["format_json", "format_mermaid", "format_text", "short"]

_MAX_LISTED = 5


def short(value: Any) -> str:
    """A value as JSON, cut to 60 characters (for messages and params lines)."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def format_json(lineage: Lineage) -> str:
    """The audit as JSON (see ``Lineage.to_dict``)."""
    return json.dumps(lineage.to_dict(), indent=2, default=str)


def _flat_params(params: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return [
        f"{key}={short(value)}"
        for values in params.values()
        for key, value in flat_params(values, keep_empty=True)
    ]


def _git_line(git: GitState) -> str:
    if git.lock == "no git":
        return "git: not a git repository"
    head = f"HEAD {git.commit[:12]} ({git.subject})" if git.commit else "no commit yet"
    tree = (
        "working tree clean"
        if not git.dirty
        else f"working tree differs in {len(git.dirty)} path(s)"
    )
    return f"git: {head}; {tree}; dvc.lock {git.lock}; params.yaml {git.params}"


def _stages_text(stages: list[str]) -> str:
    """``init, round@1..round@10`` rather than every round by name."""
    rounds = [s for s in stages if s.startswith("round@")]
    others = [s for s in stages if not s.startswith("round@")]
    if len(rounds) > 2:
        others.append(f"{rounds[0]}..{rounds[-1]}")
    else:
        others += rounds
    return ", ".join(others)


def _check_line(label: str, check: Check) -> str:
    md5 = check.recorded_md5 or "-"
    files = f" ({check.nfiles} files)" if check.nfiles else ""
    origin = ""
    if label == "in":
        root = "(your code)" if check.path.endswith(".py") else "(raw data)"
        origin = f"  <- {check.upstream}" if check.upstream else f"  {root}"
    mark = "ok" if check.status == "ok" else check.status.upper()
    return f"  {label:<4}{check.path}  md5 {md5}{files}{origin}  {mark}"


def _info_lines(info: Mapping[str, Any]) -> list[str]:
    lines = []
    if "validation" in info:
        v = info["validation"]
        if v is None:
            lines.append("  validation: no reports/validation/summary.json")
        else:
            verdict = "passed" if v["success"] else "FAILED"
            lines.append(
                f"  validation: {verdict} ({v['n_expectations']} expectations on "
                f"{v['n_rows']} rows; {len(v['warnings'])} warning(s), "
                f"{len(v['failures'])} failure(s))"
            )
            lines.extend(f"    warning: {w}" for w in v["warnings"][:_MAX_LISTED])
    if "manifest" in info:
        m = info["manifest"]
        if m is None:
            lines.append(f"  manifest: no {layout.MANIFEST.as_posix()}")
        else:
            lines.append(
                f"  manifest: {m['method']}, {m['clients']} clients, train sizes "
                f"{m['train_sizes']}, test sizes {m['test_sizes']}, held out "
                f"{m['heldout']}, md5 {m['md5']}"
            )
    if "transform" in info:
        t = info["transform"]
        if t is None:
            lines.append(f"  transform: no {layout.TRANSFORM.as_posix()}")
        elif t["kind"] == "identity":
            lines.append(f"  transform: identity (not a table), md5 {t['md5']}")
        else:
            extra = (
                f", indicators for {', '.join(t['indicators'])}"
                if t["indicators"]
                else ""
            )
            if t.get("encoded"):
                extra += f", encoded {', '.join(t['encoded'])}"
            lines.append(
                f"  transform: {t['numeric']} ({t['fit']} fit from {t['clients']} "
                f"clients' statistics, {t['rows']} training rows), missing "
                f"{t['missing']}, {t['columns']} columns{extra}, md5 {t['md5']}"
            )
    if "clients_selected" in info:
        selected = info["clients_selected"]
        shown = "unknown" if selected is None else ", ".join(map(str, selected))
        acc = info.get("global_accuracy")
        lines.append(
            f"  clients: {shown}" + (f"  (global accuracy {acc})" if acc else "")
        )
    if "malicious" in info:
        bad = ", ".join(map(str, info["malicious"])) or "none this round"
        lines.append(f"  malicious (planted by attack.*): {bad}")
    return lines


def format_text(lineage: Lineage) -> str:
    """A readable report: one block per stage, oldest first, then the verdict."""
    head = f"lineage of {lineage.target} (stage {lineage.target_stage})"
    if lineage.target_path:
        head += f"\ntarget: {lineage.target_path}  md5 {lineage.target_md5 or '-'}"
    lines = [head, _git_line(lineage.git)]
    readers: dict[tuple[str, str | None, str], list[str]] = {}
    for raw in lineage.raw:
        readers.setdefault((raw.path, raw.md5, raw.role), []).append(raw.stage)
    for (path, md5, role), stages in readers.items():
        how = "written by" if role == "output" else "read by"
        kind = "code" if role == "code" else "raw data"
        lines.append(f"{kind}: {path}  md5 {md5}  ({how} {_stages_text(stages)})")
    previous: list[str] | None = None
    for stage in lineage.stages:
        lines += ["", f"{stage.name}  [{stage.status}]", f"  cmd {stage.cmd}"]
        flat = _flat_params(stage.params)
        if flat and flat == previous:
            lines.append("  params: as the stage before")
        elif flat:
            wrapped = textwrap.wrap(
                " ".join(flat),
                width=86,
                initial_indent="  params: ",
                subsequent_indent="    ",
            )
            lines.extend(wrapped)
        previous = flat or previous
        lines.extend(_check_line("in", d) for d in stage.deps)
        lines.extend(_check_line("out", o) for o in stage.outs)
        lines.extend(_info_lines(stage.info))
    flags = lineage.flags
    lines.append("")
    n_files = sum(len(s.outs) for s in lineage.stages)
    if not flags:
        lines.append(
            f"verified: {len(lineage.stages)} stage(s), {n_files} output(s) match "
            "dvc.lock; no input or param is stale"
        )
    else:
        lines.append(f"FLAGGED: {len(flags)} problem(s)")
        lines.extend(f"  {f.kind:<8}{f.stage}: {f.message}" for f in flags)
    return "\n".join(lines)


def _node(name: str) -> str:
    return "s_" + re.sub(r"\W", "_", name)


def _label(text: str) -> str:
    return text.replace('"', "#quot;")


def format_mermaid(lineage: Lineage) -> str:
    """A Mermaid flowchart of the chain; flagged stages styled red, raw data as
    cylinders, the target as a stadium."""
    lines = ["flowchart TD"]
    for i, raw in enumerate(lineage.raw):
        md5 = (raw.md5 or "-")[:12]
        lines.append(f'  raw_{i}[("{_label(raw.path)}<br/>md5 {md5}")]')
    for stage in lineage.stages:
        label = f"{stage.name}<br/>{stage.status}"
        lines.append(f'  {_node(stage.name)}["{_label(label)}"]')
    for i, raw in enumerate(lineage.raw):
        if raw.role == "output":
            lines.append(f"  {_node(raw.stage)} --> raw_{i}")
        else:
            lines.append(f"  raw_{i} --> {_node(raw.stage)}")
    for stage in lineage.stages:
        by_upstream: dict[str, list[str]] = {}
        for dep in stage.deps:
            if dep.upstream:
                by_upstream.setdefault(dep.upstream, []).append(dep.path)
        for up, paths in by_upstream.items():
            shown = _label(", ".join(p.rsplit("/", 1)[-1] for p in paths))
            lines.append(f'  {_node(up)} -->|"{shown}"| {_node(stage.name)}')
    if lineage.target_path:
        md5 = (lineage.target_md5 or "-")[:12]
        lines.append(f'  target(["{_label(lineage.target_path)}<br/>md5 {md5}"])')
        lines.append(f"  {_node(lineage.target_stage)} --> target")
    lines.append("  classDef ok fill:#e8f5e9,stroke:#2e7d32")
    lines.append("  classDef flagged fill:#ffebee,stroke:#c62828,stroke-width:3px")
    ok = [_node(s.name) for s in lineage.stages if not s.flags]
    bad = [_node(s.name) for s in lineage.stages if s.flags]
    if ok:
        lines.append(f"  class {','.join(ok)} ok")
    if bad:
        lines.append(f"  class {','.join(bad)} flagged")
    return "\n".join(lines)
