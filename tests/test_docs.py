"""The README and docs/ cannot drift: links resolve and the commands they show parse.

Every relative link must name a file that exists (and a heading that exists, for
``#anchors``); every ``fedpipe`` command in a shell block must parse with the real
command line, every ``dvc`` command with DVC's.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```(bash|sh|console)?\n(.*?)```", re.S)


def _slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {
        _slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", page.read_text(), re.M)
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


INLINE = re.compile(r"`((?:\.venv/bin/)?(?:fedpipe|dvc) [^`]+)`")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$|\.\.\.|…")


def _inline(page: Path) -> list[list[str]]:
    """Inline ``fedpipe ...`` / ``dvc ...`` spans of the prose, without the ones
    that show a placeholder (``fedpipe stage NAME``)."""
    out = []
    text = FENCE.sub("", page.read_text()).replace("\n", " ")
    for span in INLINE.findall(text):
        first = re.split(r"&&|\|", span.split(" #")[0])[0]
        words = shlex.split(first)
        if any(PLACEHOLDER.search(w) or w.startswith("[") for w in words):
            continue
        out.append([Path(words[0]).name, *words[1:]])
    return out


def _commands(page: Path) -> list[list[str]]:
    """``fedpipe ...`` and ``dvc ...`` commands of the page's shell blocks and
    prose."""
    out = _inline(page)
    for lang, block in FENCE.findall(page.read_text()):
        for raw in block.replace("\\\n", " ").splitlines():
            prompt = raw.lstrip().startswith("$ ")
            line = raw.split(" #")[0].strip().removeprefix("$ ")
            for part in re.split(r"&&|\|\||;|\|", line):
                try:
                    words = shlex.split(part)
                except ValueError:
                    continue
                while words and "=" in words[0] and not words[0].startswith("-"):
                    words = words[1:]  # VAR=value prefixes
                if not words:
                    continue
                tool = Path(words[0]).name
                shown = lang or prompt or words[0] != tool
                if tool in ("fedpipe", "dvc") and shown and not words[0].endswith("/"):
                    out.append([tool, *words[1:]])
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_commands_parse(page: Path) -> None:
    from dvc.cli import DvcParserError
    from dvc.cli import parse_args as dvc_parse

    from fedpipe_app.cli import _with_examples, build_parser

    parser = build_parser()
    _with_examples(parser)
    bad = []
    commands = {a.dest: a for a in parser._actions}["command"].choices
    for tool, *args in _commands(page):
        args = [a for a in args if a != ">"]
        if tool == "fedpipe" and len(args) == 1 and args[0] in commands:
            continue  # the command's name, in prose
        try:
            if tool == "fedpipe":
                parser.parse_args(args)
            else:
                dvc_parse(args)
        except (SystemExit, DvcParserError):
            bad.append(" ".join([tool, *args]))
    assert not bad, f"{page.name}: commands that do not parse: {bad}"


def test_the_docs_show_commands_at_all() -> None:
    """The parser test above checks something: the pages hold many commands."""
    assert sum(len(_commands(p)) for p in PAGES) > 40


def test_own_data_starts_from_fedpipe_init_and_calls_no_venv_it_lacks() -> None:
    """docs/own-data.md is followed in a project ``fedpipe init`` made: the page
    says how to make one before the first command run in it, and calls no
    ``.venv/bin/dvc`` or ``.venv/bin/fedpipe`` (such a project has no ``.venv``;
    ``.venv/bin/python benchmarks/...`` is run in the fedpipe checkout)."""
    text = (ROOT / "docs/own-data.md").read_text()
    commands = [" ".join(c) for c in _commands(ROOT / "docs/own-data.md")]
    made = [c for c in commands if c.startswith("fedpipe init ")]
    assert made, commands
    start = text.index(made[0])  # as written on the page, before any use
    assert all(
        start < text.index(u) for u in ("dvc add", "fedpipe run", "fedpipe stats")
    )
    assert not re.findall(r"(?<![/\w])\.venv/bin/(?:dvc|fedpipe)\b", text)
