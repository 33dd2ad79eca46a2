"""chatarchive: LLM chat conversations kept losslessly in a normalized database."""

from ._archive import ChatArchive
from ._async import AsyncChatArchive, AsyncChatRepository
from ._document import (
    ChatDocument,
    ChatPage,
    ChatSummary,
    ContentPart,
    Feedback,
    Limits,
    Message,
    ToolCall,
    ToolFunction,
    Usage,
)
from ._engine import (
    DEFAULT_URL,
    URL_ENV,
    create_async_engine,
    create_engine,
    database_url,
    for_writing,
)
from ._exceptions import (
    ChatArchiveError,
    ChatNotFound,
    ConflictError,
    DatabaseError,
    InvalidDocument,
    SchemaNotReady,
)
from ._repository import ChatChanges, ChatRepository
from ._schema import is_archive_table
from ._search import SearchHit

__all__ = [
    "DEFAULT_URL",
    "URL_ENV",
    "AsyncChatArchive",
    "AsyncChatRepository",
    "ChatArchive",
    "ChatArchiveError",
    "ChatChanges",
    "ChatDocument",
    "ChatNotFound",
    "ChatPage",
    "ChatRepository",
    "ChatSummary",
    "ConflictError",
    "ContentPart",
    "DatabaseError",
    "Feedback",
    "InvalidDocument",
    "Limits",
    "Message",
    "SchemaNotReady",
    "SearchHit",
    "ToolCall",
    "ToolFunction",
    "Usage",
    "create_async_engine",
    "create_engine",
    "database_url",
    "for_writing",
    "is_archive_table",
]

__version__ = "0.1.0"
