"""chatarchive: LLM chat conversations kept losslessly in a normalized database.

The public API is what this module exports; the modules behind it are private.
"""

from ._api import AsyncChatArchive, AsyncChatRepository, ChatArchive, ChatRepository
from ._backends.citus import Distribution
from ._document import (
    ChatDocument,
    ChatFilter,
    ChatPage,
    ChatSummary,
    ChatTree,
    ContentPart,
    Feedback,
    Limits,
    Message,
    ToolCall,
    ToolFunction,
    Usage,
)
from ._embeddings import Embedder, register_embedder
from ._engine import (
    DEFAULT_URL,
    URL_ENV,
    create_async_engine,
    create_engine,
    database_url,
    for_writing,
)
from ._exceptions import (
    ArchiveClosed,
    ChatArchiveError,
    ChatNotFound,
    ConflictError,
    DatabaseError,
    EmbedderError,
    ImportFailed,
    InvalidArgument,
    InvalidDocument,
    NotSupported,
    SchemaNotReady,
    SealedChat,
    TransactionEnded,
    TransactionInProgress,
    UsageError,
    UserScopeError,
)
from ._repository.bulk import OnError
from ._repository.prices import Cost, ModelPrice
from ._repository.writes import ChatChanges
from ._schema import is_archive_table
from ._search import SearchHit, SearchResults
from ._terms import LANGUAGES as SEARCH_LANGUAGES
from ._terms import SearchSettings

__all__ = [
    "DEFAULT_URL",
    "SEARCH_LANGUAGES",
    "URL_ENV",
    "ArchiveClosed",
    "AsyncChatArchive",
    "AsyncChatRepository",
    "ChatArchive",
    "ChatArchiveError",
    "ChatChanges",
    "ChatDocument",
    "ChatFilter",
    "ChatNotFound",
    "ChatPage",
    "ChatRepository",
    "ChatSummary",
    "ChatTree",
    "ConflictError",
    "ContentPart",
    "Cost",
    "DatabaseError",
    "Distribution",
    "Embedder",
    "EmbedderError",
    "Feedback",
    "ImportFailed",
    "InvalidArgument",
    "InvalidDocument",
    "Limits",
    "Message",
    "ModelPrice",
    "NotSupported",
    "OnError",
    "SchemaNotReady",
    "SealedChat",
    "SearchHit",
    "SearchResults",
    "SearchSettings",
    "ToolCall",
    "ToolFunction",
    "TransactionEnded",
    "TransactionInProgress",
    "Usage",
    "UsageError",
    "UserScopeError",
    "create_async_engine",
    "create_engine",
    "database_url",
    "for_writing",
    "is_archive_table",
    "register_embedder",
]

__version__ = "0.1.0"
