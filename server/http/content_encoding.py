"""Compressed request bodies (`Content-Encoding`: gzip, deflate, br, zstd), decoded within the body's size limit.

The decoding is bounded by what it gives, not by what it reads: a few kilobytes that would expand to gigabytes (a
bomb) stop at one byte past the limit, read no further.
"""

from __future__ import annotations

import io
import zlib
from typing import Callable

import brotli
import zstandard

ENCODINGS = ("gzip", "x-gzip", "deflate", "br", "zstd", "identity")


class UnknownEncoding(ValueError):
    """A `Content-Encoding` this server does not decode."""


class BadEncoding(ValueError):
    """A body that is not what its `Content-Encoding` says (corrupt or cut short)."""


class DecodedTooLarge(ValueError):
    """A body that decodes to more than the limit."""


def content_encodings(header: str) -> list[str]:
    """The encodings a `Content-Encoding` header lists, in the order they were applied (identity dropped);
    UnknownEncoding naming the first this server does not decode."""
    encodings = [part.strip().lower() for part in header.split(",") if part.strip()]
    for encoding in encodings:
        if encoding not in ENCODINGS:
            raise UnknownEncoding(encoding)
    return [encoding for encoding in encodings if encoding != "identity"]


def decoded(body: bytes, encodings: list[str], limit: int) -> bytes:
    """`body` with `encodings` undone, last applied first; DecodedTooLarge past `limit` bytes at any stage,
    BadEncoding for data that is not what an encoding says."""
    for encoding in reversed(encodings):
        body = _DECODERS[encoding](body, limit)
        if len(body) > limit:
            raise DecodedTooLarge(encoding)
    return body


def _zlib(body: bytes, limit: int, wbits: int) -> bytes:
    decoder = zlib.decompressobj(wbits)
    try:
        out = decoder.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadEncoding(str(exc)) from None
    if len(out) <= limit and not decoder.eof:
        raise BadEncoding("the compressed data ends early")
    return out


def _gzip(body: bytes, limit: int) -> bytes:
    return _zlib(body, limit, 16 + zlib.MAX_WBITS)


def _deflate(body: bytes, limit: int) -> bytes:
    """HTTP's deflate is zlib's format; some clients send the raw deflate stream, which is taken too."""
    try:
        return _zlib(body, limit, zlib.MAX_WBITS)
    except BadEncoding:
        return _zlib(body, limit, -zlib.MAX_WBITS)


def _br(body: bytes, limit: int) -> bytes:
    decoder = brotli.Decompressor()
    try:
        out = decoder.process(body, output_buffer_limit=limit + 1)
    except brotli.error as exc:
        raise BadEncoding(str(exc)) from None
    if len(out) <= limit and not decoder.is_finished():
        raise BadEncoding("the compressed data ends early")
    return out


def _zstd(body: bytes, limit: int) -> bytes:
    """Read within the limit; a body that fits is decoded once more to see its frame end (zstandard's reader does
    not tell a body cut short)."""
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body), read_across_frames=True)
    try:
        out = reader.read(limit + 1)
        if len(out) <= limit:
            whole = zstandard.ZstdDecompressor().decompressobj()
            whole.decompress(body)
            if not whole.eof:
                raise BadEncoding("the compressed data ends early")
    except zstandard.ZstdError as exc:
        raise BadEncoding(str(exc)) from None
    return out


_DECODERS: dict[str, Callable[[bytes, int], bytes]] = {
    "gzip": _gzip, "x-gzip": _gzip, "deflate": _deflate, "br": _br, "zstd": _zstd}
