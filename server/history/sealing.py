"""Sealed reasoning for stateless clients: AES-GCM from the `cryptography` package, under the server's keys.

A sealed value is `rsv1.` + base64url(key id (4 bytes) | nonce (12 bytes) | ciphertext and tag). The purpose
(`reasoning`, later `compaction`) is the associated data, so a value moved to another kind of item does not open.
Several keys may be given: the first seals, all of them open (rotation).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from server.lru import BytesLru

PREFIX = "rsv1."
KEY_FILE = "reasoning.key"
_RAW = "hex:"
_NONCE = 12
_KEY_ID = 4


class SealError(ValueError):
    """A sealed value that is not ours, was changed, or belongs to another purpose."""


# The sealed values a sealer remembers opening (by their size): a history's sealed items open once, not every turn.
OPENED_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Sealer:
    """Seals and opens JSON payloads; `keys[0]` seals, every key opens."""

    keys: tuple[bytes, ...]
    _opened: _Opened = field(default_factory=lambda: _Opened(OPENED_BYTES), compare=False, repr=False)

    @classmethod
    def ephemeral(cls) -> "Sealer":
        """A key for this process only (tests, and servers that keep nothing across restarts)."""
        return cls((AESGCM.generate_key(bit_length=256),))

    def seal(self, purpose: str, payload: dict[str, Any]) -> str:
        key = self.keys[0]
        nonce = os.urandom(_NONCE)
        sealed = AESGCM(key).encrypt(nonce, json.dumps(payload).encode(), purpose.encode())
        return PREFIX + base64.urlsafe_b64encode(_key_id(key) + nonce + sealed).decode()

    def tag(self, purpose: str, value: str) -> str:
        """A secret, stable name for `value` (HMAC-SHA256 under the sealing key, URL-safe base64, 43 characters):
        the same on every replica that shares the key, unguessable without it."""
        digest = hmac.new(self.keys[0], f"{purpose}\0{value}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def open(self, purpose: str, value: str) -> dict[str, Any]:
        """The payload sealed in `value` for `purpose` (a copy: opened once, then remembered)."""
        opened = self._opened.get(purpose, value) if isinstance(value, str) else None
        if opened is None:
            opened = self._decrypt(purpose, value)
            self._opened.keep(purpose, value, opened)
        return dict(opened)

    def _decrypt(self, purpose: str, value: str) -> dict[str, Any]:
        if not isinstance(value, str) or not value.startswith(PREFIX):
            raise SealError("not a value sealed by this server")
        try:
            raw = base64.urlsafe_b64decode(value[len(PREFIX):].encode())
        except (binascii.Error, ValueError):
            raise SealError("not valid base64") from None
        key_id, nonce, sealed = raw[:_KEY_ID], raw[_KEY_ID:_KEY_ID + _NONCE], raw[_KEY_ID + _NONCE:]
        for key in self.keys:
            if _key_id(key) != key_id or len(nonce) != _NONCE:
                continue
            try:
                payload = json.loads(AESGCM(key).decrypt(nonce, sealed, purpose.encode()))
            except InvalidTag:
                break
            if isinstance(payload, dict):
                return payload
        raise SealError("sealed under another key, changed, or meant for another kind of item")


class _Opened:
    """Payloads by the sealed value they were opened from, least recently used dropped past `max_bytes` (of
    sealed text)."""

    def __init__(self, max_bytes: int) -> None:
        self._payloads: BytesLru[tuple[str, str], dict[str, Any]] = BytesLru(max_bytes)

    def get(self, purpose: str, value: str) -> dict[str, Any] | None:
        return self._payloads.get((purpose, value))

    def keep(self, purpose: str, value: str, payload: dict[str, Any]) -> None:
        if (purpose, value) not in self._payloads:
            self._payloads.keep((purpose, value), payload, len(value))


def sealer_from(secrets_text: str | None, data_dir: Path) -> Sealer:
    """Keys from `--reasoning-key` (comma-separated), else a key file made once in the data directory.

    An entry `hex:` + 64 hex digits is a raw key (the key file's, carried to other replicas as
    `--reasoning-key hex:$(cat reasoning.key)`); any other entry is a secret that a key is derived from.
    """
    if secrets_text:
        keys = tuple(_key(secret.strip()) for secret in secrets_text.split(",") if secret.strip())
        if not keys:
            raise ValueError("--reasoning-key holds no secret")
        return Sealer(keys)
    path = data_dir / KEY_FILE
    if not path.exists():
        _create_key_file(path)
    return Sealer((_raw_key(path.read_text().strip()),))


def _create_key_file(path: Path) -> None:
    """A new random key, private from its first byte (mkstemp makes files 0600) and published atomically: of
    several first starts at once, one key wins and every start reads that one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{KEY_FILE}.")
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_hex(32) + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, path)  # fails if another start published its key first: that one is kept
        except FileExistsError:
            pass
    finally:
        os.unlink(temporary)


def _key(entry: str) -> bytes:
    return _raw_key(entry) if entry.startswith(_RAW) else _derive(entry)


def _raw_key(text: str) -> bytes:
    """A key written as hex (the key file holds its key so, with or without the `hex:` prefix)."""
    try:
        key = bytes.fromhex(text.removeprefix(_RAW))
    except ValueError:
        raise ValueError("a raw reasoning key is `hex:` and 64 hex digits") from None
    if len(key) != 32:
        raise ValueError("a raw reasoning key is `hex:` and 64 hex digits (256 bits)")
    return key


def _derive(secret: str) -> bytes:
    """A 256-bit key from a secret of any length (HKDF-SHA256)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=b"responses-server reasoning").derive(secret.strip().encode())


def _key_id(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()[:_KEY_ID]
