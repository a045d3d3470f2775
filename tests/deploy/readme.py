"""deploy/README.md as data: its sections and fenced code blocks, for tests that run or
render exactly what the README shows."""

from __future__ import annotations

import re

from tests.deploy.render import DEPLOY

README = (DEPLOY / "README.md").read_text()


def section(title: str, text: str = README) -> str:
    """The text of the ``## title`` section (up to the next ``## `` heading)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section {title!r}"
    return match.group(1)


def code_blocks(text: str, language: str) -> list[str]:
    """The bodies of the fenced blocks (```language) in ``text``, indentation removed
    (a block inside a list item is indented like the item)."""
    blocks = []
    for match in re.finditer(rf"^( *)```{re.escape(language)}\n(.*?)^\1```$", text, re.M | re.S):
        indent = len(match.group(1))
        lines = [line[indent:] for line in match.group(2).splitlines()]
        blocks.append("\n".join(lines) + "\n")
    return blocks
