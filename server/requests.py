"""The `POST /v1/responses` request body, validated the way real clients (Codex, openai SDK, agents SDK) send it."""

from __future__ import annotations

from typing import Annotated, Any, Iterator, Literal, Union, get_args

from openai.types.responses import ResponseIncludable
from pydantic import (
    AfterValidator,
    BaseModel,
    PrivateAttr,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from parsers.tools import model_name
from server.file_data import check_file
from server.service_tier import SERVED_BY

LOGPROBS_INCLUDE = "message.output_text.logprobs"
UPLOADED_IMAGE = "file_id:"  # an input_image by `file_id`, as its image source is named
TEXT_PARTS = ("input_text", "output_text", "text")  # the content parts that are text alone
ENCRYPTED_REASONING_INCLUDE = "reasoning.encrypted_content"
KNOWN_INCLUDES = frozenset(get_args(ResponseIncludable))
# Content this server does not read: rejected when the request is read, on every path. Images are read by a
# model that sees (and rejected when the run is prepared for one that does not); files are read as text.
_UNREADABLE_CONTENT = ("input_audio",)
# Fields the server cannot honour: a request that sets them is a 400 saying why, never silently served.
_UNSUPPORTED_FIELDS = {
    "moderation": "this server runs no moderation; leave `moderation` out",
}


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("an id must not contain the NUL character")
    return value


ItemId = Annotated[str, AfterValidator(_no_nul)]  # ids are stored and looked up as text, which NUL cannot be


class _Lenient(BaseModel):
    """Unknown fields are accepted and ignored, as clients send more than we use."""

    model_config = ConfigDict(extra="allow")


class ContentPart(_Lenient):
    """A part of a message's content; text parts carry `text`, refusals `refusal`."""

    type: Literal["input_text", "output_text", "text", "refusal", "summary_text", "reasoning_text",
                  "input_image", "input_file", "input_audio", "encrypted_content"]
    text: str | None = None
    refusal: str | None = None
    # An encrypted_content part (Codex's tool outputs and agent messages) is sealed by another server: it reads as
    # nothing, as this server holds no key to it.
    encrypted_content: str | None = None
    image_url: str | None = None  # an input_image's (a data URL or a URL), checked when the image is decoded
    file_id: str | None = None  # an input_image's or input_file's uploaded file (the project's, by the Files API)
    detail: Literal["low", "high", "auto", "original"] | None = None  # an input_image's; see server/attachments/media.py
    _file_text: str | None = PrivateAttr(default=None)  # an input_file's text (the part is stored as sent)

    @field_validator("type")
    @classmethod
    def _readable(cls, kind: str) -> str:
        if kind in _UNREADABLE_CONTENT:
            raise ValueError(f"content of type '{kind}' is not supported by this server")
        return kind

    @model_validator(mode="after")
    def _check_file(self) -> "ContentPart":
        if self.type == "input_file":
            check_file(getattr(self, "file_data", None), getattr(self, "filename", None), self.file_id,
                       getattr(self, "file_url", None))
        return self

    def read_as(self, text: str) -> None:
        """An input_file's text, once read (server/attachments/files.py): what the model sees of it."""
        self._file_text = text

    def as_text(self) -> str:
        if self.type == "input_file":
            assert self._file_text is not None, "files are read before the prompt is rendered"
            return self._file_text
        return self.text if self.text is not None else (self.refusal or "")

    def is_image(self) -> bool:
        return self.type == "input_image"

    @property
    def image_source(self) -> str | None:
        """Where an input_image's bytes come from: its URL, else its uploaded file (`file_id:<id>`)."""
        return self.image_url or (UPLOADED_IMAGE + self.file_id if self.file_id else None)

    def is_text(self) -> bool:
        """A part that is text alone (the user's, an assistant's, or a tool output's)."""
        return self.type in TEXT_PARTS


class MessageItem(_Lenient):
    """A message: the user's, the developer's, or an assistant's earlier answer."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Union[str, list[ContentPart]]
    id: ItemId | None = None
    status: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.as_text() for part in self.content)

    def parts(self) -> list[ContentPart]:
        return [ContentPart(type="input_text", text=self.content)] if isinstance(self.content, str) else self.content


class FunctionCallItem(_Lenient):
    """An earlier function call by the model."""

    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str = ""
    namespace: str | None = None
    id: ItemId | None = None
    status: str | None = None

    @property
    def model_name(self) -> str:
        """The name the model wrote (namespace members are flattened, as the tools are offered)."""
        return model_name(self.name, self.namespace)


class ToolOutput(_Lenient):
    """The client's result for an earlier tool call, text or content parts."""

    call_id: str
    output: Union[str, list[ContentPart]]
    id: ItemId | None = None
    status: str | None = None

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(p.as_text() for p in self.output)

    def parts(self) -> list[ContentPart]:
        return [ContentPart(type="input_text", text=self.output)] if isinstance(self.output, str) else self.output


class FunctionCallOutputItem(ToolOutput):
    """The client's result for a function call; or a tool's output given unasked (Codex's goal objective): named by
    `name` and `namespace`, with no `call_id`."""

    type: Literal["function_call_output"]
    call_id: str | None = None  # type: ignore[assignment]
    name: str | None = None
    namespace: str | None = None

    @model_validator(mode="after")
    def _answers_a_call_or_names_its_tool(self) -> "FunctionCallOutputItem":
        if self.call_id is None and not self.name:
            raise ValueError("a function_call_output needs the call_id of its call (or the name of its tool)")
        return self

    @property
    def tool_name(self) -> str | None:
        """The name the model knows its tool by, for an output given unasked (None: it answers `call_id`)."""
        return model_name(self.name, self.namespace) if self.call_id is None and self.name else None


class CustomToolCallItem(_Lenient):
    """An earlier call of a freeform (custom) tool by the model."""

    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    input: str = ""
    id: ItemId | None = None
    namespace: str | None = None

    @property
    def model_name(self) -> str:
        """The name the model wrote (namespace members are flattened, as the tools are offered)."""
        return model_name(self.name, self.namespace)


class CustomToolCallOutputItem(ToolOutput):
    """The client's result for a custom tool call."""

    type: Literal["custom_tool_call_output"]


class ReasoningItem(_Lenient):
    """An earlier reasoning item sent back by the client."""

    type: Literal["reasoning"]
    id: ItemId | None = None
    summary: list[ContentPart] = Field(default_factory=list)
    content: list[ContentPart] | None = None
    encrypted_content: str | None = None

    def text(self) -> str:
        parts = self.content or self.summary
        return "".join(p.text or "" for p in parts)


class CompactionItem(_Lenient):
    """A compaction made by `POST /v1/responses/compact`: sealed context, opened before the prompt is rendered."""

    type: Literal["compaction"]
    encrypted_content: str
    id: ItemId | None = None


class McpListToolsItem(_Lenient):
    """An MCP server's tools as an earlier response listed them: a later turn calls them without listing again."""

    type: Literal["mcp_list_tools"]
    server_label: str
    tools: list[dict[str, Any]] = Field(default_factory=list)
    error: str | None = None
    id: ItemId | None = None


class McpCallItem(_Lenient):
    """An earlier call the server made to an MCP server, with its output or error."""

    type: Literal["mcp_call"]
    server_label: str
    name: str
    arguments: str = ""
    output: str | None = None
    error: Any = None  # a string, or one of the SDK's McpToolCallError shapes
    approval_request_id: str | None = None
    id: ItemId | None = None
    status: str | None = None


class McpApprovalRequestItem(_Lenient):
    """An earlier call of an MCP tool that waited for the client's approval."""

    type: Literal["mcp_approval_request"]
    id: ItemId
    server_label: str
    name: str
    arguments: str = ""


class McpApprovalResponseItem(_Lenient):
    """The client's answer to an approval request: the call is run (approve) or never run."""

    type: Literal["mcp_approval_response"]
    approval_request_id: ItemId
    approve: bool
    reason: str | None = None
    id: ItemId | None = None


class ShellCallItem(_Lenient):
    """An earlier `shell` call by the model (the client ran its commands)."""

    type: Literal["shell_call"]
    call_id: str
    action: dict[str, Any]
    id: ItemId | None = None
    status: str | None = None


class ShellCallOutputItem(_Lenient):
    """What the client's shell printed for a `shell` call, command by command."""

    type: Literal["shell_call_output"]
    call_id: str
    output: list[dict[str, Any]]
    id: ItemId | None = None


class ApplyPatchCallItem(_Lenient):
    """An earlier `apply_patch` call by the model."""

    type: Literal["apply_patch_call"]
    call_id: str
    operation: dict[str, Any]
    id: ItemId | None = None
    status: str | None = None


class ApplyPatchCallOutputItem(_Lenient):
    """How the client's patch went (`completed` or `failed`), with its log."""

    type: Literal["apply_patch_call_output"]
    call_id: str
    status: Literal["completed", "failed"]
    output: str | None = None
    id: ItemId | None = None


class WebSearchCallItem(_Lenient):
    """An earlier browser call the server ran for gpt-oss (search, open a page, find in it), or a search another
    server ran (Codex sends those back without an id)."""

    type: Literal["web_search_call"]
    id: ItemId | None = None
    action: dict[str, Any] = Field(default_factory=dict)
    status: str | None = None


class CodeInterpreterCallItem(_Lenient):
    """An earlier python call the server ran for gpt-oss, with its output logs."""

    type: Literal["code_interpreter_call"]
    id: ItemId
    code: str | None = None
    outputs: list[dict[str, Any]] | None = None
    container_id: str | None = None
    status: str | None = None


class FileSearchCallItem(_Lenient):
    """An earlier `file_search` call the server ran, with its results when the request that made it included them."""

    type: Literal["file_search_call"]
    id: ItemId
    queries: list[str] = Field(default_factory=list)
    results: list[dict[str, Any]] | None = None
    status: str | None = None


class LocalShellCallItem(_Lenient):
    """An earlier call of the `local_shell` tool (Codex's older shell): the client ran `action.command`."""

    type: Literal["local_shell_call"]
    call_id: str | None = None  # the Responses API's; Chat Completions' histories have only `id`
    id: ItemId | None = None
    status: str | None = None
    action: dict[str, Any] = Field(default_factory=dict)

    @property
    def answered_by(self) -> str:
        """The id its output names."""
        return self.call_id or self.id or ""


class LocalShellCallOutputItem(_Lenient):
    """What the client's shell printed for a `local_shell` call (`id` is the call's, as the Responses API has it)."""

    type: Literal["local_shell_call_output"]
    id: ItemId
    output: str = ""
    status: str | None = None


class ToolSearchCallItem(_Lenient):
    """An earlier search for tools by the model (Codex's `tool_search`), run by the client or another server."""

    type: Literal["tool_search_call"]
    call_id: str | None = None
    id: ItemId | None = None
    status: str | None = None
    execution: str = ""
    arguments: Any = None


class ToolSearchOutputItem(_Lenient):
    """The tools a tool search found: their definitions."""

    type: Literal["tool_search_output"]
    call_id: str | None = None
    id: ItemId | None = None
    status: str | None = None
    execution: str = ""
    tools: list[Any] = Field(default_factory=list)


class ImageGenerationCallItem(_Lenient):
    """An image another server generated: `result` is the image (base64), `revised_prompt` what it shows."""

    type: Literal["image_generation_call"]
    id: ItemId | None = None
    status: str | None = None
    revised_prompt: str | None = None
    result: str | None = None


class ItemReferenceItem(_Lenient):
    """An earlier item sent back by its id (OpenAI's conversation-state guide): the project's stored item with that
    id takes its place (server/history/references.py)."""

    type: Literal["item_reference"]
    id: ItemId


class AgentMessageItem(_Lenient):
    """A message between Codex's agents (`author` to `recipient`), in text or sealed parts."""

    type: Literal["agent_message"]
    id: ItemId | None = None
    author: str = ""
    recipient: str = ""
    content: list[ContentPart] = Field(default_factory=list)


class ContextCompactionItem(_Lenient):
    """A compaction as OpenAI's newer servers name it; Codex may send it back with no content."""

    type: Literal["context_compaction"]
    id: ItemId | None = None
    encrypted_content: str | None = None


class CompactionTriggerItem(_Lenient):
    """Codex's request control: compact the input before it into one `compaction` item (the response's output)."""

    type: Literal["compaction_trigger"]
    id: ItemId | None = None


class AdditionalToolsItem(_Lenient):
    """Tools Codex added to its history after a tool search."""

    type: Literal["additional_tools"]
    id: ItemId | None = None
    role: str | None = None
    tools: list[Any] = Field(default_factory=list)


class ConfigurationUpdateItem(_Lenient):
    """Codex's control for the backend at its place in the history (a reasoning effort from there on)."""

    type: Literal["configuration_update"]
    id: ItemId | None = None
    reasoning: dict[str, Any] | None = None


_ITEM_TYPES: dict[str, type[BaseModel]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
    "custom_tool_call": CustomToolCallItem,
    "custom_tool_call_output": CustomToolCallOutputItem,
    "reasoning": ReasoningItem,
    "compaction": CompactionItem,
    "mcp_list_tools": McpListToolsItem,
    "mcp_call": McpCallItem,
    "mcp_approval_request": McpApprovalRequestItem,
    "mcp_approval_response": McpApprovalResponseItem,
    "shell_call": ShellCallItem,
    "shell_call_output": ShellCallOutputItem,
    "apply_patch_call": ApplyPatchCallItem,
    "apply_patch_call_output": ApplyPatchCallOutputItem,
    "web_search_call": WebSearchCallItem,
    "code_interpreter_call": CodeInterpreterCallItem,
    "file_search_call": FileSearchCallItem,
    "local_shell_call": LocalShellCallItem,
    "local_shell_call_output": LocalShellCallOutputItem,
    "tool_search_call": ToolSearchCallItem,
    "tool_search_output": ToolSearchOutputItem,
    "image_generation_call": ImageGenerationCallItem,
    "agent_message": AgentMessageItem,
    "item_reference": ItemReferenceItem,
    "context_compaction": ContextCompactionItem,
    "compaction_trigger": CompactionTriggerItem,
    "additional_tools": AdditionalToolsItem,
    "configuration_update": ConfigurationUpdateItem,
}


# Input item types of OpenAI's API (the SDK types them) that this server cannot render, and why.
_REFUSED_ITEMS = {
    "computer_call": "OpenAI's computer-use tool, which this server does not run",
    "computer_call_output": "OpenAI's computer-use tool, which this server does not run",
    "program": "OpenAI's programmatic tool calling, which this server does not run",
    "program_output": "OpenAI's programmatic tool calling, which this server does not run",
}


class RefusedItem(BaseModel):
    """An input item of a type this server does not render: refused at its `type`, naming it and why."""

    type: Any = Field(default=None, validate_default=True)

    @field_validator("type")
    @classmethod
    def _refused(cls, kind: Any) -> Any:
        if isinstance(kind, str) and kind in _REFUSED_ITEMS:
            raise PydanticCustomError("refused_input_item", "`{kind}` items belong to {why}; send the input without "
                                      "them", {"kind": kind, "why": _REFUSED_ITEMS[kind]})
        known = ", ".join(_ITEM_TYPES)
        if isinstance(kind, str):
            raise PydanticCustomError("invalid_input_item", "`{kind}` is not an input item type this server takes "
                                      "({known})", {"kind": kind, "known": known})
        raise PydanticCustomError("invalid_input_item", "an input item needs a string `type` (or a `role`: a "
                                  "message); the types this server takes: {known}", {"known": known})


def _item_class_name(item: Any) -> str | None:
    """The class an input item validates as (messages may omit `type`), named as its union tag."""
    if not isinstance(item, dict) and not isinstance(item, BaseModel):
        return None
    kind = item.get("type") or ("message" if "role" in item else None) if isinstance(item, dict) else getattr(item, "type", None)
    item_class = _ITEM_TYPES.get(kind) if isinstance(kind, str) else None
    return item_class.__name__ if item_class else RefusedItem.__name__


InputItem = Annotated[
    Union[tuple(Annotated[cls, Tag(cls.__name__)] for cls in (*_ITEM_TYPES.values(), RefusedItem))],  # type: ignore[misc]
    Discriminator(
        _item_class_name,
        custom_error_type="invalid_input_item",
        custom_error_message="an input item must be a JSON object with a `type` (or a `role`: a message)",
    ),
]


def _check_tool(tool: dict[str, Any], where: str) -> None:
    """The shapes the server reads of a tool: its type, a function's schema, a namespace's member tools."""
    if not isinstance(tool.get("type"), str):
        raise ValueError(f"{where} needs a string 'type'")
    parameters = tool.get("parameters")
    if tool["type"] == "function" and parameters is not None:
        if not isinstance(parameters, dict):
            raise ValueError(f"{where}.parameters must be a JSON schema object")
        if not isinstance(parameters.get("properties", {}), dict):
            raise ValueError(f"{where}.parameters.properties must be an object")
    if tool["type"] == "namespace":
        members = tool.get("tools", [])
        if not isinstance(members, list) or not all(isinstance(member, dict) for member in members):
            raise ValueError(f"{where}.tools must be a list of tool objects")
        for position, member in enumerate(members):
            _check_tool(member, f"{where}.tools[{position}]")


class ContextManagement(_Lenient):
    """An entry of `context_management`: compact the context once the rendered input passes the threshold."""

    type: Literal["compaction"]
    compact_threshold: int | None = Field(default=None, ge=1000)


class StreamOptions(_Lenient):
    """How a streamed response is sent: `include_obfuscation` pads each delta to hide its length (on unless false)."""

    include_obfuscation: bool = True


class PromptReference(_Lenient):
    """A reusable prompt a request uses (server/saved_prompts): its id, its version (the latest when not given),
    and the values of its `{{variables}}`: strings, or input_text, input_image and input_file parts."""

    id: str = Field(min_length=1, max_length=256)
    version: str | None = Field(default=None, pattern=r"^[1-9][0-9]{0,8}$")
    variables: dict[str, str | dict[str, Any]] | None = None

    @field_validator("variables")
    @classmethod
    def _parts(cls, variables: dict[str, str | dict[str, Any]] | None) -> dict[str, str | dict[str, Any]] | None:
        for name, value in (variables or {}).items():
            if isinstance(value, dict):
                if value.get("type") not in ("input_text", "input_image", "input_file"):
                    raise ValueError(f"variable '{name}' must be a string or an input_text, input_image or "
                                     "input_file part")
                ContentPart.model_validate(value)  # an image's or a file's part checked as in a message
        return variables


class ResponsesRequest(_Lenient):
    """The request fields the server acts on; everything else a client sends is accepted and ignored.

    An explicit `null` is "not given", as the SDK's types allow.
    """

    model: str | None = None
    input: Union[str, list[InputItem]] = ""
    instructions: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    seed: int | None = Field(default=None, ge=0, lt=2**63)  # not OpenAI's: vLLM's, so that sampling is repeatable
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: Any = "auto"  # checked against the tools when the output rules are made
    parallel_tool_calls: bool = True
    max_tool_calls: int | None = Field(default=None, ge=1)
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None
    store: bool = True
    background: bool = False
    metadata: dict[str, str] | None = None
    previous_response_id: ItemId | None = None
    text: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: str | None = None
    conversation: ItemId | None = None  # a conversation id (sent as "conv_..." or {"id": "conv_..."})
    context_management: list[ContextManagement] | None = None
    prompt: PromptReference | None = None  # a reusable prompt (server/saved_prompts)
    moderation: Any = None  # rejected when given (_UNSUPPORTED_FIELDS)
    # The reusable prompt's items a response echoes in `instructions`, once the prompt is filled (with_prompt)
    _prompt_instructions: list[dict[str, Any]] | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _null_is_not_given(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data

    @field_validator("service_tier")
    @classmethod
    def _known_tier(cls, tier: str | None) -> str | None:
        if tier is not None and tier not in SERVED_BY:
            raise ValueError(f"`{tier}` is not a service tier (one of: {', '.join(SERVED_BY)})")
        return tier

    @field_validator("conversation", mode="before")
    @classmethod
    def _conversation_id(cls, value: Any) -> Any:
        return value.get("id") if isinstance(value, dict) else value

    @field_validator("moderation")
    @classmethod
    def _not_supported(cls, value: Any, info: ValidationInfo) -> Any:
        raise ValueError(_UNSUPPORTED_FIELDS[info.field_name])

    @field_validator("include")
    @classmethod
    def _known_includes(cls, include: list[str]) -> list[str]:
        for value in include:
            if value not in KNOWN_INCLUDES:
                raise ValueError(f"unknown include value {value!r}; known: {', '.join(sorted(KNOWN_INCLUDES))}")
        return include

    @field_validator("tools")
    @classmethod
    def _tools_have_types(cls, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for index, tool in enumerate(tools):
            _check_tool(tool, f"tools[{index}]")
        return tools

    def compact_threshold(self, context_length: int) -> int | None:
        """The rendered input's size in tokens past which the context is compacted first (`context_management`;
        three quarters of the context when no threshold is given); None: never."""
        if not self.context_management:  # every entry is a compaction (the only type there is)
            return None
        given = [entry.compact_threshold for entry in self.context_management if entry.compact_threshold is not None]
        return min(given) if given else context_length * 3 // 4

    def content_parts(self) -> Iterator[tuple[str, ContentPart]]:
        """(param, part) for each content part the input sends as a list of parts, in messages and tool outputs:
        where files and images are (content sent as a string is text alone, and is not made into a part: a long
        history's every turn would copy it)."""
        for index, item in enumerate(self.input_items()):
            if isinstance(item, MessageItem) and isinstance(item.content, list):
                yield from ((f"input[{index}].content[{position}]", part) for position, part in enumerate(item.content))
            elif isinstance(item, ToolOutput) and isinstance(item.output, list):
                yield from ((f"input[{index}].output[{position}]", part) for position, part in enumerate(item.output))

    def with_prompt(self, reference: PromptReference, echoed: list[dict[str, Any]]) -> "ResponsesRequest":
        """The request as sent, naming the prompt version it used, and echoing the prompt filled in `instructions`
        (as OpenAI echoes a reusable prompt)."""
        copy = self.model_copy(update={"prompt": reference})
        copy._prompt_instructions = echoed
        return copy

    def echoed_instructions(self) -> str | list[dict[str, Any]] | None:
        """`instructions` as a response echoes them: the filled prompt's items, else the request's own."""
        return self._prompt_instructions if self._prompt_instructions is not None else self.instructions

    def input_items(self) -> list[Any]:
        """The input as a list of items (a string input is one user message; an empty one, none)."""
        if isinstance(self.input, str):
            return [MessageItem(role="user", content=self.input)] if self.input else []
        return list(self.input)

    def asks_compaction(self) -> bool:
        """The input ends with Codex's `compaction_trigger`: the response is the input before it, compacted."""
        items = self.input_items()
        return bool(items) and isinstance(items[-1], CompactionTriggerItem)

    def wants_logprobs(self) -> bool:
        return LOGPROBS_INCLUDE in (self.include or []) or bool(self.top_logprobs)

    def wants_encrypted_reasoning(self) -> bool:
        return ENCRYPTED_REASONING_INCLUDE in (self.include or [])

    def wants_reasoning_summary(self) -> bool:
        """`reasoning.summary` (or the older `generate_summary`) set to auto, concise or detailed."""
        reasoning = self.reasoning or {}
        return (reasoning.get("summary") or reasoning.get("generate_summary")) in ("auto", "concise", "detailed")
