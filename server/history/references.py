"""Item references (`{"type": "item_reference", "id": ...}`): each replaced by the project's stored item with that id,
an input or output item of one of its responses or an item of one of its conversations."""

from __future__ import annotations

from pydantic import TypeAdapter, ValidationError

from server.errors import NotFound
from server.requests import InputItem, ItemReferenceItem, ResponsesRequest
from server.responses.project_store import ProjectStore

_ITEM: TypeAdapter[InputItem] = TypeAdapter(InputItem)


async def resolved_references(request: ResponsesRequest, store: ProjectStore | None) -> ResponsesRequest:
    """The request with each item reference in its input replaced by the item it names; an id the project has no
    item for (or another project's) is a 404 naming it, as a random id is."""
    items = request.input_items()
    if not any(isinstance(item, ItemReferenceItem) for item in items):
        return request
    resolved = []
    for index, item in enumerate(items):
        if isinstance(item, ItemReferenceItem):
            item = await _stored(item.id, store, f"input[{index}].id")
        resolved.append(item)
    return request.model_copy(update={"input": resolved})


async def _stored(item_id: str, store: ProjectStore | None, param: str) -> InputItem:
    found = await store.stored_item(item_id) if store is not None else None
    try:
        if found is not None and found.get("type") != "item_reference":
            return _ITEM.validate_python(found)
    except ValidationError:
        pass  # an output item no request could send back (none is stored so): as if it were not there
    raise NotFound(f"Item with id '{item_id}' not found.", param=param)
