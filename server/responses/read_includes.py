"""What the read routes show of stored items under `include`: an input image's URL only when it is asked for."""

from __future__ import annotations

from typing import Any, Collection

INPUT_IMAGE_URLS = "message.input_image.image_url"


def shown_items(items: list[dict[str, Any]], include: Collection[str]) -> list[dict[str, Any]]:
    """Stored items as a read route lists them under `include` (OpenAI's: an input image's URL, often the whole
    image as a data URL, is left out unless `message.input_image.image_url` is included; its `file_id` stays)."""
    if INPUT_IMAGE_URLS in include:
        return items
    return [shown_item(item, include) for item in items]


def shown_item(item: dict[str, Any], include: Collection[str]) -> dict[str, Any]:
    """One stored item as a read route shows it under `include`."""
    content = item.get("content")
    if INPUT_IMAGE_URLS in include or item.get("type") != "message" or not isinstance(content, list):
        return item
    if not any(isinstance(part, dict) and part.get("type") == "input_image" for part in content):
        return item
    return {**item, "content": [{**part, "image_url": None}
                                if isinstance(part, dict) and part.get("type") == "input_image" else part
                                for part in content]}
