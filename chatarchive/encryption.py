"""Per-user encryption keys: a user's chats sealed with a key of their own,
and the key's deletion making them unreadable wherever they were copied.

An archive given ``UserKeys`` seals the chats of users it writes whole
(``save``, ``save_many`` and ``import``, ``compact``): the text of their
messages, their content parts (text and the rest of each part, images
included) and their tool calls' arguments, and the chunks of messages
being streamed, are stored encrypted with AES-256-GCM under a data key of
the chat's user. The data keys are in the ``user_keys`` table, each
wrapped (encrypted) by the application's master key, or by a key
management service through ``wrap`` and ``unwrap``. Deleting a user's key
(``delete_user_key``, or ``delete_user``) leaves their sealed chats as
ciphertext nobody can read. A backup taken before holds the user's wrapped
key too: it is unreadable once the master key that wrapped it is retired,
so rotate the master key (``rewrap_user_keys``) after deletions, more
often than backups are kept; with a key management service that keeps a
key per user, deleting that key there is enough.

What stays in the clear, so that lists, analytics and operations work: the
chat's id, user, title, tags, metadata, model and settings; each message's
uid, role, name, times, model, token counts and tool names; feedback.
Nothing of a sealed text is searchable: sealed chats get no search terms
and no vectors.

Example:
    >>> import os
    >>> from chatarchive import ChatArchive
    >>> from chatarchive.encryption import UserKeys
    >>> keys = UserKeys(master_key=os.urandom(32))  # the application's secret, from its vault
    >>> archive = ChatArchive("sqlite://", keys=keys)
    >>> archive.upgrade()
    >>> archive.save({"chat_id": "c1", "user_id": "ann", "messages": [{"role": "user", "content": "secret"}]})
    1
    >>> archive.get("c1").messages[0].content
    'secret'
    >>> archive.delete_user_key("ann")  # crypto-shredding
    True
    >>> archive.find("c1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    chatarchive._exceptions.SealedChat: chat 'c1' is sealed with the key of user 'ann', which is deleted: ...
    >>> archive.close()
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ._exceptions import InvalidArgument, SealedChat

__all__ = ["MASTER_KEY_ENV", "UserKeys", "check_keys", "keys_from_environment", "open_text", "seal_text"]

#: The variable from which the command line takes the master key (64 hex digits).
MASTER_KEY_ENV = "CHATARCHIVE_MASTER_KEY"

#: The version byte in front of every sealed value and wrapped key.
_VERSION = b"\x01"
_NONCE = 12
_KEY = 32


def _seal(key: bytes, plain: bytes, aad: bytes) -> bytes:
    nonce = os.urandom(_NONCE)
    return _VERSION + nonce + AESGCM(key).encrypt(nonce, plain, aad)


def _open(key: bytes, sealed: bytes, aad: bytes) -> bytes:
    if sealed[:1] != _VERSION:
        raise InvalidTag
    return AESGCM(key).decrypt(sealed[1 : 1 + _NONCE], sealed[1 + _NONCE :], aad)


@dataclass
class UserKeys:
    """Where the users' data keys come from: wrapped by ``master_key`` (32
    bytes, AES-256-GCM), or by a key management service (``wrap(user_id,
    key)`` gives the wrapped key to store, ``unwrap(user_id, wrapped)`` the
    key back). Unwrapped keys are kept in memory (``cached`` at most), by
    their wrapped form: a key deleted from the archive is never read again.

    To rotate the master key: give every process ``UserKeys(master_key=new,
    previous_master_keys=(old,))`` (keys wrapped by ``old`` still unwrap), call
    ``rewrap_user_keys()`` once (every key is then wrapped by ``new``), then
    drop ``old`` from the configuration and destroy it.

    Raises:
        InvalidArgument: neither a master key of 32 bytes nor both callbacks.
    """

    master_key: bytes | None = field(default=None, repr=False)
    previous_master_keys: tuple[bytes, ...] = field(default=(), repr=False)
    wrap: Callable[[str, bytes], bytes] | None = None
    unwrap: Callable[[str, bytes], bytes] | None = None
    cached: int = 10_000
    _unwrapped: dict[tuple[str, bytes], bytes] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        by_callbacks = self.wrap is not None and self.unwrap is not None
        if self.master_key is not None:
            if not isinstance(self.master_key, bytes) or len(self.master_key) != _KEY:
                raise InvalidArgument("master_key must be 32 bytes", argument="master_key")
            if self.wrap is not None or self.unwrap is not None:
                raise InvalidArgument("give master_key, or wrap and unwrap, not both", argument="master_key")
            if any(not isinstance(key, bytes) or len(key) != _KEY for key in self.previous_master_keys):
                raise InvalidArgument(
                    "previous_master_keys must be keys of 32 bytes", argument="previous_master_keys"
                )
        elif not by_callbacks:
            raise InvalidArgument("UserKeys needs master_key, or both wrap and unwrap", argument="master_key")

    def new_key(self, user_id: str) -> tuple[bytes, bytes]:
        """A new data key for ``user_id`` and its wrapped form."""
        key = AESGCM.generate_key(bit_length=256)
        return key, self.wrapped(user_id, key)

    def wrapped(self, user_id: str, key: bytes) -> bytes:
        """``key``, the data key of ``user_id``, wrapped."""
        if self.master_key is not None:
            wrapped = _seal(self.master_key, key, user_id.encode())
        else:
            assert self.wrap is not None
            wrapped = self.wrap(user_id, key)
        self._keep(user_id, wrapped, key)
        return wrapped

    def key_of(self, user_id: str, wrapped: bytes) -> bytes:
        """The data key that ``wrapped`` holds for ``user_id``."""
        with self._lock:
            found = self._unwrapped.get((user_id, wrapped))
        if found is not None:
            return found
        if self.master_key is not None:
            for master in (self.master_key, *self.previous_master_keys):
                try:
                    key = _open(master, wrapped, user_id.encode())
                    break
                except InvalidTag:
                    continue
            else:
                raise SealedChat(
                    f"the key of user {user_id!r} is not wrapped by this master key (nor a previous one)",
                    user_id=user_id,
                )
        else:
            assert self.unwrap is not None
            key = self.unwrap(user_id, wrapped)
        if len(key) != _KEY:
            raise SealedChat(f"the key of user {user_id!r} did not unwrap to 32 bytes", user_id=user_id)
        self._keep(user_id, wrapped, key)
        return key

    def _keep(self, user_id: str, wrapped: bytes, key: bytes) -> None:
        with self._lock:
            if len(self._unwrapped) >= self.cached:
                self._unwrapped.pop(next(iter(self._unwrapped)))
            self._unwrapped[user_id, wrapped] = key


def keys_from_environment() -> UserKeys | None:
    """``UserKeys`` of the master key in ``$CHATARCHIVE_MASTER_KEY`` (64 hex
    digits), as the command line takes it; ``None`` when it is not set.

    Raises:
        InvalidArgument: a value that is not 64 hex digits.
    """
    value = os.environ.get(MASTER_KEY_ENV)
    if not value:
        return None
    try:
        master = bytes.fromhex(value.strip())
    except ValueError:
        master = b""
    if len(master) != _KEY:
        raise InvalidArgument(f"${MASTER_KEY_ENV} must be 64 hex digits (32 bytes)", argument=MASTER_KEY_ENV)
    return UserKeys(master_key=master)


def check_keys(keys: object) -> UserKeys | None:
    """``keys`` as an archive takes them (``None``: chats are not sealed).

    Raises:
        InvalidArgument: not a ``UserKeys``.
    """
    if keys is None or isinstance(keys, UserKeys):
        return keys
    raise InvalidArgument(f"keys must be UserKeys, not {type(keys).__name__}", argument="keys")


def seal_text(key: bytes, text: str, aad: str) -> str:
    """``text`` sealed, as text (base64)."""
    return base64.b64encode(_seal(key, text.encode("utf-8", "surrogatepass"), aad.encode())).decode("ascii")


def open_text(key: bytes, sealed: str, aad: str) -> str:
    """The text that ``seal_text`` sealed.

    Raises:
        InvalidTag: ``sealed`` was not sealed with ``key`` for ``aad``.
    """
    return _open(key, base64.b64decode(sealed), aad.encode()).decode("utf-8", "surrogatepass")
