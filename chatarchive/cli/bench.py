"""``chatarchive bench``: the archive's speed, measured against the database's own limits."""

from __future__ import annotations

import json

import click
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn
from rich.table import Table

from chatarchive._embeddings import required_embedder_named
from chatarchive._exceptions import EmbedderError
from chatarchive._terms import MOST_VECTOR_SCAN

from .app import archive, ask_if_chats_are_lost, database_option, main
from .rendering import stderr, stdout

__all__ = ["bench"]


@main.command("bench")
@click.option(
    "--chats", default=2000, show_default=True, type=click.IntRange(min=1), help="Chats in the workload."
)
@click.option(
    "--messages", default=20, show_default=True, type=click.IntRange(min=2), help="Messages per chat."
)
@click.option("--seed", default=0, show_default=True, help="Seed of the synthetic workload.")
@click.option(
    "--runs", default=3, show_default=True, type=click.IntRange(min=1), help="Runs per figure (median)."
)
@click.option(
    "--keep",
    is_flag=True,
    help="Run in the --db database itself: its chats are deleted (asked first), the workload is left in it.",
)
@click.option("--yes", is_flag=True, help="Do not ask before --keep deletes the chats the database holds.")
@click.option("--analytics", is_flag=True, help="Also time the views, the ready queries and searches.")
@click.option(
    "--streaming", is_flag=True, help="Also time concurrent streams and append_chunk early and late."
)
@click.option(
    "--import-memory",
    default=0,
    type=click.FloatRange(min=0),
    metavar="MB",
    help="Also measure the peak memory of 'chatarchive import' of a generated ChatGPT export of MB "
    "megabytes.",
)
@click.option(
    "--frameworks",
    default=0,
    type=click.IntRange(min=0),
    metavar="CHATS",
    help="Also play CHATS chats of the workload, a turn at a time, into each framework integration and "
    "into the framework's own PostgreSQL store, with sync and with deferred indexing (PostgreSQL; "
    "frameworks not installed are left out).",
)
@click.option(
    "--search",
    default=0,
    type=click.IntRange(min=0),
    metavar="MESSAGES",
    help="Also measure what indexing costs an append (sync, deferred, against a bare insert), the lag of "
    "deferred indexing, and search at MESSAGES messages (PostgreSQL).",
)
@click.option(
    "--embedder",
    metavar="NAME",
    help="With --search: embed the messages with this embedder (an installed 'chatarchive.embedders' entry "
    "point, or one registered in this process) instead of the bench's synthetic one, to measure search by "
    "meaning and the index's recall on its vectors.",
)
@click.option(
    "--vector-scan",
    type=click.IntRange(min=1, max=MOST_VECTOR_SCAN),
    metavar="N",
    help="With --search: search with the archive's vector_scan set to N (see 'db search --vector-scan').",
)
@click.option(
    "--citus",
    metavar="URL",
    help="Also load and read the workload on an archive distributed over a Citus cluster: URL is an empty "
    "database of its coordinator, with the citus extension on every node and the workers added (PostgreSQL).",
)
@click.option(
    "--attachments",
    is_flag=True,
    help="Also load the workload with its images as base64 data URLs that users send again, with "
    "attachments inline and stored once: save_many speed and bytes per message.",
)
@click.option(
    "--keys",
    is_flag=True,
    help="Also time save_many and get of chats sealed with their users' keys against plain ones.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench(
    chats: int,
    messages: int,
    seed: int,
    runs: int,
    keep: bool,
    yes: bool,
    analytics: bool,
    streaming: bool,
    import_memory: float,
    frameworks: int,
    search: int,
    embedder: str | None,
    vector_scan: int | None,
    citus: str | None,
    attachments: bool,
    keys: bool,
    as_json: bool,
) -> None:
    """Measure ingest, reads, storage and memory against the database's own limits.

    Runs in a throwaway database created next to --db (dropped afterwards)
    unless --keep is given. Ratios compare figures measured in the same run.
    """
    if (embedder or vector_scan) and not search:
        raise click.UsageError("--embedder and --vector-scan apply to --search")
    try:
        chosen = None if embedder is None else required_embedder_named(embedder)
    except EmbedderError as exc:
        raise click.BadParameter(str(exc), param_hint="--embedder") from exc
    if keep and not yes:
        ask_if_chats_are_lost(archive(), "Delete the {chats} of {where} to run the benchmark in it?")

    from chatarchive.bench import run_bench  # loaded by this command alone

    progress = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), console=stderr(), transient=True
    )
    with progress:
        task = progress.add_task("bench", total=None)

        def report(phase: str, done: int, total: int) -> None:
            progress.update(task, description=phase, completed=done, total=total)

        result = run_bench(
            database_option(),
            chats=chats,
            messages=messages,
            seed=seed,
            runs=runs,
            keep=keep,
            analytics=analytics,
            streaming=streaming,
            import_memory=import_memory,
            frameworks=frameworks,
            search=search,
            embedder=chosen,
            vector_scan=vector_scan,
            attachments=attachments,
            keys=keys,
            citus=citus,
            progress=report,
        )
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    stdout().print(
        f"{result.chats} chats, {result.messages} messages, {result.tool_calls} tool calls; "
        f"median of {result.runs} runs; {result.database}",
        markup=False,
    )
    figures = Table("figure", "value")
    for name, value in result.figures.items():
        figures.add_row(name, "n/a" if value is None else f"{value:,.3f}" if value < 100 else f"{value:,.0f}")
    stdout().print(figures)
    ratios = Table("ratio", "value")
    for name, value in result.ratios().items():
        ratios.add_row(name, "n/a" if value is None else f"{value:.2f}")
    stdout().print(ratios)


# -- quickstart ------------------------------------------------------------------
