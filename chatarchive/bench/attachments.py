"""``chatarchive bench --attachments``: what storing attachments once saves
and costs, on the workload with its images as base64 data URLs.

The workload's image parts (a tenth of the user turns) become data URLs of
images each user sends again and again: every user has a few images (40 to
160 KB of incompressible bytes, as PNGs and JPEGs are), and each image turn
shows one of them. The chats are loaded with ``save_many`` with attachments
inline and then stored once, alternately, ``runs`` times each, into emptied
tables; the figures are messages a second and the bytes on disk per message
(tables, indexes and TOAST of the whole archive) after each load.
"""

from __future__ import annotations

import base64
import copy
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from chatarchive._api import ChatArchive
from chatarchive._backends import backend_of
from chatarchive._schema import SEARCH_TERMS, metadata

__all__ = ["image_workload", "measure_attachments"]

Progress = Callable[[str, int, int], None]

#: Images per user, and their sizes in bytes.
IMAGES_PER_USER = 3
IMAGE_SIZES = (40_000, 160_000)


def image_workload(docs: Sequence[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """Copies of ``docs`` whose image parts hold data URLs of their user's images."""
    rng = random.Random(seed)
    pools: dict[str, list[str]] = {}
    images = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        pool = pools.get(doc["user_id"])
        if pool is None:
            pool = pools[doc["user_id"]] = [_image(rng) for _ in range(IMAGES_PER_USER)]
        for message in doc["messages"]:
            if isinstance(message["content"], list):
                for part in message["content"]:
                    if part.get("type") == "image_url":
                        part["image_url"] = {"url": rng.choice(pool)}
        images.append(doc)
    return images


def _image(rng: random.Random) -> str:
    size = rng.randrange(*IMAGE_SIZES)
    if rng.random() < 0.5:
        raw, media_type = b"\x89PNG\r\n\x1a\n" + rng.randbytes(size), "image/png"
    else:
        raw, media_type = b"\xff\xd8\xff\xe0" + rng.randbytes(size), "image/jpeg"
    return f"data:{media_type};base64,{base64.b64encode(raw).decode()}"


def measure_attachments(
    archive: ChatArchive, engine: Engine, docs: Sequence[dict[str, Any]], *, runs: int, progress: Progress
) -> dict[str, float | None]:
    """The figures of ``save_many`` and storage with attachments inline and stored once."""
    workload = image_workload(docs)
    messages = sum(len(doc["messages"]) for doc in workload)
    images = sum(
        1
        for doc in workload
        for message in doc["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part.get("type") == "image_url"
    )
    rates: dict[bool, list[float]] = {False: [], True: []}
    sizes: dict[bool, float] = {}
    for run in range(runs):
        for once in (False, True):
            progress(f"attachments {'stored once' if once else 'inline'}", run, runs)
            empty(engine)
            archive.set_attachments_stored_once(once)
            start = time.perf_counter()
            archive.save_many(workload)
            rates[once].append(messages / (time.perf_counter() - start))
            sizes[once] = _bytes(engine) / messages
    archive.set_attachments_stored_once(False)
    empty(engine)
    return {
        "attachments_images": float(images),
        "attachments_distinct_images": float(
            len(
                {
                    part["image_url"]["url"]
                    for doc in workload
                    for message in doc["messages"]
                    if isinstance(message["content"], list)
                    for part in message["content"]
                    if part.get("type") == "image_url"
                }
            )
        ),
        "attachments_inline_save_many": statistics.median(rates[False]),
        "attachments_once_save_many": statistics.median(rates[True]),
        "attachments_inline_bytes_per_message": sizes[False],
        "attachments_once_bytes_per_message": sizes[True],
    }


def empty(engine: Engine) -> None:
    """Delete every chat (and the keys); give a SQLite file its pages back."""
    postgres = backend_of(engine).name == "postgresql"
    tables = [table.name for table in metadata.sorted_tables if table.name != "archive_settings"]
    with engine.begin() as connection:
        if postgres:
            connection.execute(text(f"TRUNCATE {', '.join([*tables, SEARCH_TERMS])}"))
        else:
            for table in reversed(tables):
                connection.execute(text(f"DELETE FROM {table}"))
            connection.execute(text(f"DELETE FROM {SEARCH_TERMS}"))
    if not postgres:  # give the file's pages back, so that its size is the load's
        raw = engine.raw_connection()
        try:
            raw.commit()
            driver = raw.driver_connection
            assert driver is not None
            driver.execute("VACUUM")
        finally:
            raw.close()


def _bytes(engine: Engine) -> float:
    """The archive's bytes on disk: its tables with their indexes and TOAST (PostgreSQL), or its file."""
    if backend_of(engine).name != "postgresql":
        database = engine.url.database
        return float(Path(database).stat().st_size) if database else 0.0
    names = [*(table.name for table in metadata.sorted_tables), SEARCH_TERMS]
    with engine.connect() as connection:
        return float(
            connection.execute(
                text(
                    "SELECT sum(pg_total_relation_size(CAST(name AS regclass))) "
                    "FROM unnest(CAST(:names AS text[])) name"
                ),
                {"names": names},
            ).scalar_one()
        )
