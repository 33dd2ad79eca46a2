"""The format samples (tests/data/formats/<format>/): each is what the format's
public documentation and its official SDK types describe, and each comes
back equal through its own exporter after a trip through the archive.

Every sample, and every export, is validated by the official types of the
``openai`` and ``anthropic`` packages (tests/support/official.py): a test
fails when an export is not what the API takes.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message as AnthropicMessage
from anthropic.types.beta import BetaMessage
from anthropic.types.beta.message_create_params import MessageCreateParamsNonStreaming as BetaRequest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming as AnthropicRequest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam
from openai.types.responses import Response, ResponseInputParam

from chatarchive import ChatRepository, formats
from tests.support.official import validate, validate_chat_completions

SAMPLES = Path(__file__).parents[1] / "data" / "formats"


def _finetune_line(line: Any) -> None:
    assert isinstance(line, dict)
    assert line.keys() <= {"messages", "tools", "parallel_tool_calls", "functions"}
    for message in line["messages"]:
        validate(ChatCompletionMessageParam, message, allowed=frozenset({"weight"}))
    for tool in line.get("tools", []):
        validate(ChatCompletionToolUnionParam, tool)
    assert isinstance(line.get("parallel_tool_calls", False), bool)


def _anthropic(record: Any) -> None:
    """A request or a response, of the Messages API or of its beta (MCP,
    the code execution tool and containers are beta features)."""
    request = "messages" in record
    kinds = (AnthropicRequest, BetaRequest) if request else (AnthropicMessage, BetaMessage)
    problems = []
    for kind in kinds:
        try:
            validate(kind, record)
        except (AssertionError, ValueError) as problem:
            problems.append(problem)
        else:
            return
    raise problems[0]


def _responses(record: Any) -> None:
    """An input item list, or a ``Response``."""
    validate(Response if isinstance(record, dict) else ResponseInputParam, record)


def _claude_ai(record: Any) -> None:
    """No SDK has types for Claude.ai's export: the keys every conversation
    and message of it has, and message blocks that are Anthropic's."""
    assert {"uuid", "name", "created_at", "updated_at", "chat_messages"} <= record.keys()
    for message in record["chat_messages"]:
        assert {"uuid", "text", "sender", "created_at", "content"} <= message.keys()
        assert message["sender"] in ("human", "assistant")


def _open_webui(record: Any) -> None:
    """No SDK has types for Open WebUI's export: the keys its chats and
    messages have, and a tree whose links agree."""
    if "chat" in record:  # an export's chat
        history = record["chat"]["history"]
        assert {"id", "user_id", "title", "chat", "created_at", "updated_at"} <= record.keys()
    else:  # the chat object Open WebUI keeps, as importers pass it around
        history = record["history"]
        assert {"id", "title", "models", "history", "messages", "timestamp"} <= record.keys()
    for node_id, node in history["messages"].items():
        assert {"id", "parentId", "childrenIds", "role", "content", "timestamp"} <= node.keys()
        assert node["id"] == node_id
        assert all(history["messages"][child]["parentId"] == node_id for child in node["childrenIds"])
    assert history["currentId"] in history["messages"]


def _chatgpt(record: Any) -> None:
    """No SDK has types for ChatGPT's export: the keys its conversations,
    nodes and messages have, and a tree whose links agree."""
    assert {"title", "create_time", "update_time", "mapping"} <= record.keys()
    mapping = record["mapping"]
    for node_id, node in mapping.items():
        assert node["id"] == node_id
        assert all(mapping[child]["parent"] == node_id for child in node["children"])
        if node["message"] is not None:
            assert {"id", "author", "content", "metadata"} <= node["message"].keys()
            assert node["message"]["author"]["role"] in ("system", "user", "assistant", "tool")
    assert record.get("current_node") is None or record["current_node"] in mapping


def _langchain(record: Any) -> None:
    """langchain-core reads the messages, and writes them back the same."""
    from langchain_core._api.beta_decorator import LangChainBetaWarning
    from langchain_core.load import dumpd, load
    from langchain_core.messages import messages_from_dict, messages_to_dict

    if all("lc" in item for item in record):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LangChainBetaWarning)  # load() is marked beta
            assert [dumpd(load(item, allowed_objects="all")) for item in record] == record
    else:
        assert messages_to_dict(messages_from_dict(record)) == record


def _gemini(record: Any) -> None:
    """The google-genai package's types, which refuse keys they do not declare."""
    from google.genai import types

    contents = record if isinstance(record, list) else record["contents"]
    for content in contents:
        types.Content.model_validate(content)
    if isinstance(record, dict):
        assert record.keys() <= {
            "contents",
            "systemInstruction",
            "tools",
            "toolConfig",
            "safetySettings",
            "generationConfig",
            "cachedContent",
        }
        types.Content.model_validate(record.get("systemInstruction", {"parts": []}))
        for tool in record.get("tools", []):
            types.Tool.model_validate(tool)
        types.GenerationConfig.model_validate(record.get("generationConfig", {}))


def _pydantic_ai(record: Any) -> None:
    """Pydantic AI's own adapter reads the messages, and writes them back the same."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    messages = ModelMessagesTypeAdapter.validate_python(record)
    assert ModelMessagesTypeAdapter.dump_python(messages, mode="json") == record


def _llama_index(record: Any) -> None:
    """llama-index-core's ChatMessage reads each message, and writes it back the same."""
    from llama_index.core.llms import ChatMessage

    assert [ChatMessage.model_validate(item).model_dump(mode="json") for item in record] == record


#: How the official types check a record of each format.
OFFICIAL: dict[str, Callable[[Any], None]] = {
    "openai-finetune": _finetune_line,
    "anthropic": _anthropic,
    "openai-responses": _responses,
    "chatgpt": _chatgpt,
    "claude-ai": _claude_ai,
    "open-webui": _open_webui,
    "langchain": _langchain,
    "pydantic-ai": _pydantic_ai,
    "llama-index": _llama_index,
    "gemini": _gemini,
}


def _samples() -> Iterator[Any]:
    for path in sorted(SAMPLES.glob("*/*.json")):
        yield pytest.param(path.parent.name, path, id=f"{path.parent.name}/{path.stem}")


def test_every_format_with_samples_is_an_import_and_export_format() -> None:
    named = {path.name for path in SAMPLES.iterdir()}
    assert named <= formats.IMPORT_FORMATS.keys() & formats.EXPORT_FORMATS.keys()
    assert named <= OFFICIAL.keys()


@pytest.mark.parametrize(("name", "path"), list(_samples()))
def test_each_sample_is_valid_and_comes_back_equal_through_its_own_exporter(
    repo: ChatRepository, name: str, path: Path
) -> None:
    record = json.loads(path.read_text(encoding="utf-8"))
    OFFICIAL[name](record)
    assert formats.detect(record) == name
    document = formats.to_document(record)
    assert formats.export(document, name) == record
    repo.save(document)
    stored = repo.get_tree(document.chat_id).document
    exported = formats.export(stored, name)
    assert exported == record
    if formats.FORMATS[name].round_trip == "exact, every branch":  # byte for byte: the keys' order too
        assert json.dumps(exported, ensure_ascii=False) == json.dumps(record, ensure_ascii=False)
    OFFICIAL[name](exported)
    validate_chat_completions(formats.export(stored, "chat-completions"))
