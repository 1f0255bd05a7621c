"""Data URLs (`data:<type>;base64,<payload>`), split and decoded within a size limit."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass


class DataUrlError(ValueError):
    """A data URL's payload is too large or not base64; the message reads after "the image" or "the file"."""


@dataclass(frozen=True)
class DataUrl:
    """A data URL's parts: its media type (lowercased), whether it says base64, and its payload."""

    mime: str
    base64: bool
    payload: str

    @classmethod
    def parse(cls, value: str) -> "DataUrl":
        """`value` starts with "data:" (the caller checks)."""
        header, _, payload = value[len("data:"):].partition(",")
        mime, *options = header.split(";")
        return cls(mime.lower(), "base64" in options, payload)

    def fits(self, max_bytes: int) -> bool:
        """Whether the payload decodes to at most `max_bytes` (told from its length alone)."""
        return len(self.payload) <= (max_bytes + 2) // 3 * 4

    def decoded(self, max_bytes: int) -> bytes:
        """The payload's bytes; its length is checked before decoding."""
        if not self.fits(max_bytes):
            raise DataUrlError(f"is larger than {max_bytes // (1024 * 1024)} MiB")
        try:
            return base64.b64decode(self.payload, validate=True)
        except (binascii.Error, ValueError):
            raise DataUrlError("is not valid base64") from None
