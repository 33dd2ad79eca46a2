"""``chatarchive ls``, ``show``, ``rm``, ``stats`` and ``search``: looking at the archive."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial

import click
from pydantic import BaseModel

from chatarchive import analytics
from chatarchive._arguments import require_moment
from chatarchive._document import ChatFilter
from chatarchive._repository.prices import COST_GROUPS
from chatarchive._search import SEARCH_MODES, SearchMode

from .app import (
    archive,
    before_options,
    chat_filter_options,
    count_of_chats,
    fail,
    main,
    moment,
    until_of,
)
from .rendering import (
    echo_json,
    highlighted,
    literal,
    print_stats,
    print_table,
    printable,
    stderr,
    stdout,
    write_csv,
)
from .transcript import render_transcript, render_tree

__all__ = ["ls", "rm", "search", "show", "stats"]


@main.command("ls")
@chat_filter_options
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1), help="How many chats.")
@click.option(
    "--cursor",
    metavar="CURSOR",
    help="The next page: the cursor a previous 'ls' with the same options printed.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the chats' summaries as JSON.")
def ls(where: ChatFilter, limit: int, cursor: str | None, as_json: bool) -> None:
    """List chats, most recently updated first (--before or --older-than
    shows what 'rm' with the same option would delete), a page at a time."""
    target = archive()
    page = target.list_chats(where, limit=limit, cursor=cursor)
    more = None
    if page.next_cursor:
        shown = f"{limit:,} shown" if cursor else f"showing the {limit:,} most recent"
        more = f"({shown} of {target.count_chats(where):,}; next page: --cursor {page.next_cursor})"
    if as_json:
        echo_json([chat.model_dump(mode="json") for chat in page.items])
        if more:
            stderr().print(more)
        return
    print_table(
        ("chat_id", "user", "title", "model", "messages", "updated (UTC)"),
        [
            (
                chat.chat_id,
                chat.user_id,
                chat.title,
                chat.model,
                chat.message_count,
                chat.updated_at,
            )
            for chat in page.items
        ],
    )
    if more:
        stdout().print(more)


@main.command("show")
@click.argument("chat_id")
@click.option("--json", "as_json", is_flag=True, help="Print the canonical JSON document.")
@click.option("--leaf", help="Show the path that ends at this message (a uid) instead of the active one.")
@click.option(
    "--tree",
    "whole",
    is_flag=True,
    help="Every branch: a line a message, the active path marked (with --json: the whole document).",
)
def show(chat_id: str, as_json: bool, leaf: str | None, whole: bool) -> None:
    """Show one chat's active path as a readable transcript (--tree: every branch)."""
    if whole and leaf is not None:
        raise click.UsageError("--tree shows every branch: not with --leaf")
    target = archive()
    if whole:
        tree = target.get_tree(chat_id)
        if as_json:
            click.echo(tree.document.model_dump_json(indent=2))
        else:
            stdout().print(render_tree(tree))
        return
    document = target.get(chat_id, leaf=leaf)
    if as_json:
        click.echo(document.model_dump_json(indent=2))
    else:
        stdout().print(render_transcript(document))


@main.command("rm")
@click.argument("chat_id", required=False)
@click.option("--user", "user_id", help="Delete every chat of this user (with --before/--older-than: those).")
@before_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def rm(
    chat_id: str | None,
    user_id: str | None,
    before: datetime | None,
    older_than: datetime | None,
    yes: bool,
) -> None:
    """Delete a chat with everything in it; or, with --user, every chat of a
    user; or, with --before or --older-than, the chats not updated since
    then (a retention policy, deleted a few hundred chats per transaction)."""
    before = until_of(before, older_than)
    if (chat_id is None) == (user_id is None and before is None):
        raise click.UsageError("give either CHAT_ID, or --user and/or --before/--older-than")
    target = archive()
    if chat_id is not None:
        target.delete(chat_id)
        stderr().print(literal(f"deleted chat {chat_id}"))
        return
    whose = "" if user_id is None else f" of user {user_id!r}"
    if before is not None:
        cutoff = require_moment(before, "before").astimezone(UTC)
        whose += f" last updated before {cutoff:%Y-%m-%d %H:%M:%S} UTC"
        delete = partial(target.delete_older_than, cutoff, user_id=user_id)
    else:
        assert user_id is not None
        delete = partial(target.delete_user, user_id)
    if not yes:
        found = target.count_chats(ChatFilter(user_id=user_id, until=before))
        if not found:
            stderr().print(literal(f"no chats{whose}"))
            return
        click.confirm(printable(f"Delete {count_of_chats(found)}{whose}?"), abort=True, err=True)
    stderr().print(literal(f"deleted {count_of_chats(delete())}{whose}"))


# -- analytics and search ----------------------------------------------------------


_STATS = {
    "day": "daily_usage",
    "model": "model_usage",
    "tool": "tool_usage",
    "user": "user_activity",
    "workflow": "workflow_usage",
    "feedback": "feedback_summary",
}


@main.command("stats")
@click.option(
    "--by",
    "by",
    type=click.Choice([*_STATS, "chat"]),
    default="day",
    show_default=True,
    help="Group by ('chat' with --cost only).",
)
@click.option(
    "--cost",
    is_flag=True,
    help="What the messages cost per day, model, user or chat, at the prices loaded with 'prices load'.",
)
@click.option("--since", type=moment, help="From this day or time (UTC if no offset), inclusive.")
@click.option("--until", type=moment, help="Up to this day or time, exclusive.")
@click.option("--user", "user_id", help="Only this user's chats.")
@click.option("--model", help="Only chats with this chosen model.")
@click.option("--workflow", help="Only chats of this workflow (workflow.name).")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True
)
def stats(
    by: str,
    cost: bool,
    since: datetime | None,
    until: datetime | None,
    user_id: str | None,
    model: str | None,
    workflow: str | None,
    fmt: str,
) -> None:
    """Usage statistics: per day, model, tool, user, workflow, or feedback; or cost."""
    filters: analytics.Filters = {
        "since": since,
        "until": until,
        "user_id": user_id,
        "model": model,
        "workflow": workflow,
    }
    if cost:
        if by not in COST_GROUPS:
            fail(f"--cost groups by {', '.join(COST_GROUPS)}, not {by}")
        rows: Sequence[BaseModel] = analytics.cost(archive(), by, **filters)
    elif by == "chat":
        fail("--by chat needs --cost")
    else:
        rows = getattr(analytics, _STATS[by])(archive(), **filters)
    if fmt == "table":
        records = [row.model_dump() for row in rows]
        if cost:  # a few thousandths of a cent add up: six decimals
            records = [record | {"cost": _money(record["cost"])} for record in records]
        print_stats(by, records)
        return
    dumped = [row.model_dump(mode="json") for row in rows]
    if fmt == "json":
        echo_json(dumped)
    else:
        write_csv(dumped)


def _money(value: float | None) -> str | None:
    return None if value is None else f"{value:.6f}"


@main.command("search")
@click.argument("query")
@click.option(
    "--mode",
    type=click.Choice(SEARCH_MODES),
    default="keyword",
    show_default=True,
    help="By words, by meaning (the archive's embedder), or both fused by rank.",
)
@click.option("--user", "user_id", help="Only this user's chats.")
@click.option("--role", help="Only messages with this role.")
@click.option("--model", help="Only chats (or messages) of this model.")
@click.option("--tag", help="Only chats with this tag.")
@click.option("--since", type=moment, help="Only messages created from then on.")
@click.option("--until", type=moment, help="Only messages created before then.")
@click.option(
    "--active-path", is_flag=True, help="Only messages on the chats' active paths (not other branches)."
)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print the hits as JSON.")
def search(
    query: str,
    mode: SearchMode,
    user_id: str | None,
    role: str | None,
    model: str | None,
    tag: str | None,
    since: datetime | None,
    until: datetime | None,
    active_path: bool,
    limit: int,
    as_json: bool,
) -> None:
    """Search message text: words, "phrases", -word, or; or by meaning.

    Finds words in every script (Chinese, Japanese and Korean too). --mode
    vector or hybrid needs the archive's embedder in this process (an
    installed 'chatarchive.embedders' entry point). With deferred indexing,
    says on stderr how many chats are not searchable yet.
    """
    hits = archive().search(
        query,
        mode=mode,
        user_id=user_id,
        role=role,
        model=model,
        tag=tag,
        since=since,
        until=until,
        branches="active" if active_path else "all",
        limit=limit,
    )
    if not hits.fresh:
        stderr().print(
            f"{hits.pending_chats} chats have writes not searchable yet "
            f"(the oldest from {hits.pending_since:%Y-%m-%d %H:%M:%S} UTC): "
            "'chatarchive db index' indexes them"
        )
    if as_json:
        echo_json([hit.model_dump(mode="json") for hit in hits])
        return
    if not hits:
        stderr().print("no matches")
        return
    for hit in hits:
        header = literal(f"{hit.chat_id} [{hit.position}] {hit.role}", style="bold")
        header.append(f"  {hit.created_at:%Y-%m-%d %H:%M}  rank {hit.rank:.3f}", style="dim")
        stdout().print(header)
        stdout().print(highlighted(hit.snippet))
