"""Images sent in input parts: a data URL (or fetched bytes) checked from its header (type, pixels, the request's
pixel budget), then decoded and sized in the work pool, each distinct image once."""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from server.data_urls import DataUrl, DataUrlError
from server.attachments.work_pool import WorkPool, WorkTooCostly
from server.errors import RequestError, TooLarge

if TYPE_CHECKING:  # the work pool's workers import this module: they need nothing of requests
    from server.attachments.files import LoadFile
    from server.requests import ContentPart, ResponsesRequest

MAX_IMAGE_BYTES = 20 * 1024 * 1024
LOW_DETAIL_SIDE = 512  # `detail: low`: OpenAI's models see "a low-res 512px x 512px version of the image"
MAX_IMAGE_PIXELS = 40_000_000  # width x height of one image, checked from the header before any pixel is decoded
MAX_REQUEST_PIXELS = 64_000_000  # of all a request's distinct images (its history's too): ~190 MB decoded
IMAGE_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/jpg": "JPEG", "image/webp": "WEBP",
               "image/gif": "GIF"}


class ImageError(ValueError):
    """An image the server cannot take; the message is the client's (raised in a worker, said with its part)."""


@dataclass(frozen=True)
class _Source:
    """One distinct image: its bytes, the format its data URL names (None: fetched, any of IMAGE_TYPES)."""

    data: bytes
    expected: str | None


def checked_images(body: "ResponsesRequest", modalities: tuple[str, ...],
                   fetched: Mapping[str, bytes] = MappingProxyType({})) -> dict[Any, str]:
    """The param of each image URL the request sends, once checked from its header (no pixel decoded): a
    RequestError naming the part when the served model does not see or an image cannot be taken."""
    params: dict[Any, str] = {}
    for param, part in body.content_parts():
        if not part.is_image() or part.image_source in params:
            continue
        if "image" not in modalities:
            raise RequestError("The served model reads text only: it cannot take images "
                               f"(its input modalities: {', '.join(modalities)}).", param=param)
        _checked_size(_source(part.image_source, param, fetched), param)
        params[part.image_source] = param
    return params


async def decoded_images(parts: Sequence["ContentPart"], params: Mapping[Any, str], pool: WorkPool,
                         fetched: Mapping[str, bytes] = MappingProxyType({}),
                         max_pixels: int = MAX_REQUEST_PIXELS) -> tuple[Any, ...]:
    """The image parts' images as the model gets them, in order, each distinct image (by content and detail)
    decoded once in `pool`; a RequestError naming the part (`params`, else the history's) when one cannot be."""
    budget = _PixelBudget(max_pixels)
    wanted = []
    for part in parts:  # every image counted before any is decoded
        param = params.get(part.image_source, "previous_response_id")
        source = _source(part.image_source, param, fetched)
        key = hashlib.sha256(source.data).hexdigest()  # a URL's spelling (`;n=1`) does not make another image
        budget.take(key, _checked_size(source, param), param)
        wanted.append((param, source, (key, part.detail)))
    decoded: dict[tuple[str, str | None], Any] = {}
    for param, source, (key, detail) in wanted:
        if (key, detail) not in decoded:
            decoded[(key, detail)] = await _decoded(pool, source, detail, param)
    return tuple(decoded[seen] for _, _, seen in wanted)


class _PixelBudget:
    """The pixels of a request's distinct images, counted against its budget."""

    def __init__(self, most: int) -> None:
        self.most, self.taken, self.seen = most, 0, set()

    def take(self, key: str, size: tuple[int, int], param: str) -> None:
        if key in self.seen:
            return
        self.seen.add(key)
        self.taken += size[0] * size[1]
        if self.taken > self.most:
            raise TooLarge(f"The request's images have more than {self.most:,} pixels in all; send fewer or "
                           "smaller images.", param=param, code="image_too_large")


async def uploaded_images(sources: Sequence[tuple[str, str]], load: "LoadFile | None") -> dict[str, bytes]:
    """The bytes of each image sent by `file_id` (its `(param, image_source)`), read through `load` (the project's
    own files: another's is exactly a missing one); a RequestError naming the part's file_id when one is missing."""
    from server.attachments.files import uploaded
    from server.requests import UPLOADED_IMAGE

    images: dict[str, bytes] = {}
    for param, source in sources:
        file_id = source.removeprefix(UPLOADED_IMAGE)
        _, data = await uploaded(load, file_id, param, "input_image")
        if len(data) > MAX_IMAGE_BYTES:
            raise TooLarge(f"The image file '{file_id}' is larger than {MAX_IMAGE_BYTES:,} bytes.", param=param,
                           code="image_too_large")
        images[source] = data
    return images


def _source(url: Any, param: str, fetched: Mapping[str, bytes]) -> _Source:
    if not isinstance(url, str) or not url:
        raise RequestError("An input_image needs an image_url (a data URL, data:image/png;base64,...) or the "
                           "file_id of an uploaded image.", param=param)
    if url in fetched:
        return _Source(fetched[url], None)
    if not url.startswith("data:"):
        raise RequestError("This server fetches image URLs only from the domains its operator allows: send the "
                           "image inline as a data URL (data:image/png;base64,...).", param=param)
    data_url = DataUrl.parse(url)
    if data_url.mime not in IMAGE_TYPES:
        raise RequestError(f"Unsupported image type {data_url.mime!r}: send PNG, JPEG, WebP or GIF.", param=param)
    if not data_url.base64:
        raise RequestError("An image data URL must be base64-encoded (data:image/png;base64,...).", param=param)
    try:
        return _Source(data_url.decoded(MAX_IMAGE_BYTES), IMAGE_TYPES[data_url.mime])
    except DataUrlError as exc:
        raise RequestError(f"The image {exc}.", param=param) from None


def _checked_size(source: _Source, param: str) -> tuple[int, int]:
    """The image's size from its header (no pixel is decoded); a RequestError when it is not what it says."""
    try:
        return image_size(source.data, source.expected)
    except ImageError as exc:
        raise RequestError(str(exc), param=param) from None


async def _decoded(pool: WorkPool, source: _Source, detail: str | None, param: str) -> Any:
    try:
        return await pool.run(decoded_image, source.data, source.expected, detail)
    except ImageError as exc:
        raise RequestError(str(exc), param=param) from None
    except WorkTooCostly as exc:
        if exc.kind == "time":
            raise RequestError("The image took longer to decode than this server allows.", param=param,
                               code="image_too_costly") from None
        raise TooLarge("The image needs more memory to decode than this server allows.", param=param,
                       code="image_too_large") from None


def image_size(data: bytes, expected: str | None) -> tuple[int, int]:
    """(width, height) from the header, checked: a format the server takes (the one the data URL names), at
    most MAX_IMAGE_PIXELS; an ImageError else."""
    with _opened(data) as image:
        if expected is None and image.format not in IMAGE_TYPES.values():
            raise ImageError(f"Unsupported image type {image.format!r}: send PNG, JPEG, WebP or GIF.")
        if expected is not None and image.format != expected:
            raise ImageError(f"The image is {image.format or 'not an image'}, not the {expected} its data URL says.")
        width, height = image.size
        if width * height > MAX_IMAGE_PIXELS:
            raise ImageError(f"The image is {width}x{height} pixels; at most {MAX_IMAGE_PIXELS:,} pixels are "
                             "accepted.")
        return width, height


def decoded_image(data: bytes, expected: str | None, detail: str | None) -> Any:
    """The image as the model gets it (run in the work pool): RGB (a GIF's first frame); with `detail: low`,
    scaled down to fit LOW_DETAIL_SIDE pixels a side (its aspect kept), else as sent, for the model's processor
    to size (`high`, `auto` and `original` alike: the processor knows the model's resolution)."""
    image_size(data, expected)
    try:
        with _opened(data) as image:
            image.seek(0)  # a GIF's first frame
            rgb = image.convert("RGB")
    except ImageError:
        raise
    except Exception:  # PIL raises OSError, ValueError, SyntaxError, EOFError, ...
        raise ImageError("The image could not be decoded.") from None
    if detail == "low" and max(rgb.size) > LOW_DETAIL_SIDE:
        rgb.thumbnail((LOW_DETAIL_SIDE, LOW_DETAIL_SIDE))
    return rgb


class _opened:
    """PIL's image of `data`, its header read (an ImageError when it is no image PIL opens)."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def __enter__(self) -> Any:
        from PIL import Image, ImageFile

        # An image whose compressed data ends early is decoded as far as it goes (the rest black), as browsers show
        # it: the Open Responses compliance suite's own image-input PNG is one. PIL keeps this switch process-wide.
        ImageFile.LOAD_TRUNCATED_IMAGES = True
        try:
            self._image = Image.open(io.BytesIO(self._data))  # reads the header only
        except Image.DecompressionBombError:  # PIL's own limit, past twice its default, refuses at the header
            raise ImageError(f"The image has more than {MAX_IMAGE_PIXELS:,} pixels.") from None
        except Exception:
            raise ImageError("The image could not be decoded.") from None
        return self._image

    def __exit__(self, *_: Any) -> None:
        self._image.close()
