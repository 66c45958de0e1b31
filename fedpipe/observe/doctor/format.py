"""The doctor's findings as text for a terminal and as Markdown for a report."""

from __future__ import annotations

from collections.abc import Sequence

from fedpipe.observe.doctor.findings import Finding


def format_text(findings: Sequence[Finding]) -> str:
    """Plain text for a terminal."""
    if not findings:
        return "no findings"
    blocks = []
    for i, f in enumerate(findings, start=1):
        lines = [f"{i}. [{f.severity}] {f.title}  ({f.code})"]
        lines += [f"   - {line}" for line in f.evidence]
        if f.side:
            lines.append(f"   side: {f.side}")
        lines.append(f"   fix: {f.fix}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def format_markdown(findings: Sequence[Finding]) -> str:
    """Markdown for a report."""
    if not findings:
        return "no findings"
    blocks = []
    for f in findings:
        lines = [f"### {f.severity}: {f.title}", "", f"`{f.code}`", ""]
        lines += [f"- {line}" for line in f.evidence]
        if f.side:
            lines += ["", f"**Side:** {f.side}"]
        lines += ["", f"**Fix:** {f.fix}"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
