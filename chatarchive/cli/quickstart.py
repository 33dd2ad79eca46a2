"""``chatarchive quickstart``: a first archive with the bundled sample chats in it."""

from __future__ import annotations

import json
from importlib import resources

import click

from chatarchive._document import ChatDocument
from chatarchive._engine import shown_url

from .app import archive, main
from .browse import ls
from .rendering import stderr, stdout
from .transcript import render_transcript

__all__ = ["quickstart"]


@main.command("quickstart")
def quickstart() -> None:
    """Create the archive, import the bundled sample chats, list and show one."""
    target = archive()
    stderr().print(f"archive: {shown_url(target.url)}", markup=False)
    target.upgrade()
    samples = sorted(
        (
            entry
            for entry in resources.files("chatarchive").joinpath("samples").iterdir()
            if entry.name.endswith(".json")
        ),
        key=lambda entry: entry.name,
    )
    for sample in samples:
        target.save(ChatDocument.parse(json.loads(sample.read_text(encoding="utf-8"))))
    stderr().print(f"imported {len(samples)} sample chats\n")
    click.get_current_context().invoke(ls, limit=20)
    stdout().print()
    stdout().print(render_transcript(target.get("seed-tool-calling")))
    stdout().print()
    stdout().print("Next: chatarchive show CHAT_ID, chatarchive export, chatarchive import FILE")
