"""Images sent in input parts: a data URL decoded and checked (type, bytes, pixels); fetching URLs is off."""

from __future__ import annotations

import io
from types import MappingProxyType
from typing import Any, Iterator, Mapping

from server.attachments.data_urls import DataUrl, DataUrlError
from server.errors import RequestError
from server.requests import MessageItem, ResponsesRequest, ToolOutput

MAX_IMAGE_BYTES = 20 * 1024 * 1024
LOW_DETAIL_SIDE = 512  # `detail: low`: OpenAI's models see "a low-res 512px x 512px version of the image"
MAX_IMAGE_PIXELS = 40_000_000  # width x height, checked from the header before any pixel is decoded
IMAGE_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/jpg": "JPEG", "image/webp": "WEBP",
               "image/gif": "GIF"}


def load_image(url: Any, param: str, fetched: Mapping[str, bytes] = MappingProxyType({})) -> Any:
    """The image of a data URL, or of a URL among those `fetched`, as an RGB PIL image (a GIF's first frame); a
    RequestError naming `param` else."""
    if not isinstance(url, str) or not url:
        raise RequestError("An input_image needs an image_url: a data URL (data:image/png;base64,...).", param=param)
    if url in fetched:
        return _decoded(fetched[url], None, param)
    if not url.startswith("data:"):
        raise RequestError("This server fetches image URLs only from the domains its operator allows: send the "
                           "image inline as a data URL (data:image/png;base64,...).", param=param)
    data_url = DataUrl.parse(url)
    if data_url.mime not in IMAGE_TYPES:
        raise RequestError(f"Unsupported image type {data_url.mime!r}: send PNG, JPEG, WebP or GIF.", param=param)
    if not data_url.base64:
        raise RequestError("An image data URL must be base64-encoded (data:image/png;base64,...).", param=param)
    try:
        data = data_url.decoded(MAX_IMAGE_BYTES)
    except DataUrlError as exc:
        raise RequestError(f"The image {exc}.", param=param) from None
    return _decoded(data, IMAGE_TYPES[data_url.mime], param)


def _decoded(data: bytes, expected: str | None, param: str) -> Any:
    """`expected`: the format the data URL named (None for fetched bytes: any of IMAGE_TYPES')."""
    from PIL import Image, ImageFile

    # An image whose compressed data ends early is decoded as far as it goes (the rest black), as browsers show it:
    # the Open Responses compliance suite's own image-input PNG is one. PIL keeps this switch process-wide.
    ImageFile.LOAD_TRUNCATED_IMAGES = True

    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            if expected is None and image.format not in IMAGE_TYPES.values():
                raise RequestError(f"Unsupported image type {image.format!r}: send PNG, JPEG, WebP or GIF.",
                                   param=param)
            if expected is not None and image.format != expected:
                raise RequestError(f"The image is {image.format or 'not an image'}, not the {expected} its data "
                                   "URL says.", param=param)
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise RequestError(f"The image is {width}x{height} pixels; at most {MAX_IMAGE_PIXELS:,} pixels are "
                                   "accepted.", param=param)
            image.seek(0)  # a GIF's first frame
            return image.convert("RGB")
    except RequestError:
        raise
    except Image.DecompressionBombError:  # PIL's own limit, past twice its default, refuses at the header
        raise RequestError(f"The image has more than {MAX_IMAGE_PIXELS:,} pixels.", param=param) from None
    except Exception:  # PIL raises OSError, ValueError, SyntaxError, EOFError, DecompressionBombError, ...
        raise RequestError("The image could not be decoded.", param=param) from None


def sized(image: Any, detail: str | None) -> Any:
    """The image as the model gets it: with `detail: low`, scaled down to fit LOW_DETAIL_SIDE pixels a side (its
    aspect kept; fewer image tokens on models that read images at their own size); else as sent, for the model's
    processor to size (`high`, `auto` and `original` alike: the processor knows the model's resolution)."""
    if detail != "low" or max(image.size) <= LOW_DETAIL_SIDE:
        return image
    smaller = image.copy()
    smaller.thumbnail((LOW_DETAIL_SIDE, LOW_DETAIL_SIDE))
    return smaller


def image_parts(request: ResponsesRequest) -> Iterator[tuple[str, Any]]:
    """(param, image_url) for each image in the request's input: in messages and in tool outputs."""
    for index, item in enumerate(request.input_items()):
        if isinstance(item, (MessageItem, ToolOutput)):
            where = "content" if isinstance(item, MessageItem) else "output"
            for position, part in enumerate(item.parts()):
                if part.is_image():
                    yield f"input[{index}].{where}[{position}]", part.image_url


def request_images(request: ResponsesRequest, modalities: tuple[str, ...],
                   fetched: Mapping[str, bytes] = MappingProxyType({})) -> dict[str, Any]:
    """The request's images decoded, by their URL; a RequestError naming the part when the served model does
    not see or an image is bad."""
    images: dict[str, Any] = {}
    for param, url in image_parts(request):
        if "image" not in modalities:
            raise RequestError("The served model reads text only: it cannot take images "
                               f"(its input modalities: {', '.join(modalities)}).", param=param)
        if not isinstance(url, str) or url not in images:
            images[url] = load_image(url, param, fetched)
    return images
