"""One writer per output item kind: the item's SDK model, and the events only its kind has (a call's input as it
streams and once it is whole). The builder keeps the state machine (items open and close, parts, sequence numbers)
and asks the open item's writer for what differs between kinds."""

from __future__ import annotations

import json
from typing import Any, Callable

from openai.types.responses import (
    ResponseCodeInterpreterCallCodeDeltaEvent,
    ResponseCodeInterpreterCallCodeDoneEvent,
    ResponseCodeInterpreterCallCompletedEvent,
    ResponseCodeInterpreterCallInProgressEvent,
    ResponseCodeInterpreterCallInterpretingEvent,
    ResponseCodeInterpreterToolCall,
    ResponseFileSearchCallCompletedEvent,
    ResponseFileSearchCallInProgressEvent,
    ResponseFileSearchCallSearchingEvent,
    ResponseFileSearchToolCall,
    ResponseFunctionWebSearch,
    ResponseWebSearchCallCompletedEvent,
    ResponseWebSearchCallInProgressEvent,
    ResponseWebSearchCallSearchingEvent,
    ResponseApplyPatchToolCall,
    ResponseCustomToolCall,
    ResponseCustomToolCallInputDeltaEvent,
    ResponseCustomToolCallInputDoneEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionShellToolCall,
    ResponseFunctionToolCall,
    ResponseMcpCallArgumentsDeltaEvent,
    ResponseMcpCallArgumentsDoneEvent,
    ResponseMcpCallCompletedEvent,
    ResponseMcpCallFailedEvent,
    ResponseMcpCallInProgressEvent,
    ResponseMcpListToolsCompletedEvent,
    ResponseMcpListToolsFailedEvent,
    ResponseMcpListToolsInProgressEvent,
    ResponseOutputItem,
    ResponseOutputMessage,
    ResponseReasoningItem,
    ResponseShellCallCommandAddedEvent,
    ResponseShellCallCommandDeltaEvent,
    ResponseShellCallCommandDoneEvent,
    ResponseStreamEvent,
    ResponseToolSearchCall,
    ResponseToolSearchOutputItem,
)
from openai.types.responses.response_output_item import (LocalShellCall, McpApprovalRequest, McpCall, McpListTools,
                                                         McpListToolsTool)

from streaming.client_calls import (local_shell_action, patch_operation, python_code, search_queries, shell_action,
                                    web_search_action)
from streaming.items import ItemKind, ItemRecord, ItemStatus, ListedTools, ToolResult, part_model

CONTAINER_ID = "local"  # python runs on the operator's tool server, not in an OpenAI container
Emit = Callable[..., ResponseStreamEvent]  # an event of this class with these fields, numbered in sequence


class ItemWriter:
    """What every kind has: its model; no events of its own, and no input to stream."""

    calls_tool = False  # a tool call the client runs: it owes the output once the call ends
    takes_input = False  # a call: its input (arguments) streams in while it is open
    awaits_result = False  # a hosted tool's item: once the model's part ends, it waits for the server's result

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        raise NotImplementedError

    def opening(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        """The events of this kind after the item's `output_item.added`."""
        return []

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> list[ResponseStreamEvent]:
        """The events of more input for a call (only calls have input)."""
        raise NotImplementedError

    def closing(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        """The events of this kind when the model's part of the item ends (before `output_item.done`)."""
        return []

    def resulting(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        """The events of a hosted item's result (`item.result`), before its `output_item.done`."""
        return []

    def following(self, item: ItemRecord, new_id: Callable[[str], str]) -> ResponseOutputItem | None:
        """An item of its own that a hosted item's result makes, whole, after it (its id from `new_id`, given its
        type); None: none."""
        return None


class MessageWriter(ItemWriter):
    """An assistant message: its content parts, and its phase once it ends."""

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        if status == "in_progress":
            return ResponseOutputMessage(type="message", id=item.id, role="assistant", status=status, content=[])
        content = [part_model(part, part.final_text) for part in item.parts]
        return ResponseOutputMessage(type="message", id=item.id, role="assistant", status=status, content=content,
                                     phase=item.phase)


class ReasoningWriter(ItemWriter):
    """A reasoning item: its text, its summary when one is asked for, sealed as `encrypted_content` when `seal`."""

    def __init__(self, seal: Callable[[str], str] | None = None) -> None:
        self._seal = seal

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        done = status != "in_progress"
        content = [part_model(part, part.final_text) for part in item.parts] if done else []
        summary = [part_model(item.summary, item.summary.final_text)] if done and item.summary else []
        reasoning = ResponseReasoningItem(type="reasoning", id=item.id, summary=summary, content=content,
                                          status=status)
        if done and self._seal is not None:
            text = "".join(part.final_text or "" for part in item.parts)
            reasoning = reasoning.model_copy(update={"encrypted_content": self._seal(text)})
        return reasoning


class CallWriter(ItemWriter):
    """A call whose input streams: a function's `arguments` (`response.function_call_arguments.*`) or a custom
    tool's `input` (`response.custom_tool_call_input.*`)."""

    calls_tool = True
    takes_input = True

    def __init__(self, kind: ItemKind, model: type[Any], field: str, events: str, delta: type[Any],
                 done: type[Any]) -> None:
        self._kind, self._model, self._field, self._events = kind, model, field, events
        self._delta, self._done = delta, done

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        extra = {"namespace": item.namespace} if item.namespace else {}
        text = "".join(item.arguments) if status != "in_progress" else ""
        # The SDK's custom_tool_call has no `status` field; it is sent anyway, as for every other item.
        return self._model(type=self._kind, id=item.id, call_id=item.call_id, name=item.name, status=status,
                           **{self._field: text}, **extra)

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(self._delta, type=f"{self._events}.delta", item_id=item.id, output_index=item.output_index,
                     delta=text)]

    def closing(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        named = {"name": item.name} if self._kind == "function_call" else {}  # the SDK's done event names a function
        return [emit(self._done, type=f"{self._events}.done", item_id=item.id, output_index=item.output_index,
                     **{self._field: "".join(item.arguments)}, **named)]


class McpCallWriter(ItemWriter):
    """A call the server makes to an MCP server: its arguments stream, then the server runs it and the item ends
    with its `output` or its `error` (`response.mcp_call.completed` or `.failed`)."""

    awaits_result = True
    takes_input = True

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        result = item.result if isinstance(item.result, ToolResult) else ToolResult()
        if result.error is not None and status == "completed":
            status = "failed"  # type: ignore[assignment]
        return McpCall(type="mcp_call", id=item.id, server_label=item.namespace or "", name=item.name,
                       arguments="".join(item.arguments), output=result.output, error=result.error,
                       approval_request_id=item.approval_request_id, status=status)

    def opening(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(ResponseMcpCallInProgressEvent, type="response.mcp_call.in_progress", item_id=item.id,
                     output_index=item.output_index)]

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(ResponseMcpCallArgumentsDeltaEvent, type="response.mcp_call_arguments.delta", item_id=item.id,
                     output_index=item.output_index, delta=text)]

    def closing(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(ResponseMcpCallArgumentsDoneEvent, type="response.mcp_call_arguments.done", item_id=item.id,
                     output_index=item.output_index, arguments="".join(item.arguments))]

    def resulting(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        failed = not isinstance(item.result, ToolResult) or item.result.error is not None
        event, name = (ResponseMcpCallFailedEvent, "failed") if failed else (ResponseMcpCallCompletedEvent, "completed")
        return [emit(event, type=f"response.mcp_call.{name}", item_id=item.id, output_index=item.output_index)]


class McpApprovalWriter(ItemWriter):
    """A call of an MCP tool that needs the client's approval first: the item asks for it, and nothing is run."""

    calls_tool = True  # the client owes an answer (an `mcp_approval_response`)
    takes_input = True

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        return McpApprovalRequest(type="mcp_approval_request", id=item.id, server_label=item.namespace or "",
                                  name=item.name, arguments="".join(item.arguments))

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> list[ResponseStreamEvent]:
        return []  # the request is shown whole, when it is done


class McpListToolsWriter(ItemWriter):
    """An MCP server's tools, as the server listed them (`response.mcp_list_tools.*`)."""

    awaits_result = True

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        listed = item.result if isinstance(item.result, ListedTools) else None
        tools = [McpListToolsTool.model_validate(tool) for tool in listed.tools] if listed else []
        return McpListTools(type="mcp_list_tools", id=item.id, server_label=item.namespace or "", tools=tools,
                            error=listed.error if listed else None)

    def opening(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(ResponseMcpListToolsInProgressEvent, type="response.mcp_list_tools.in_progress",
                     item_id=item.id, output_index=item.output_index)]

    def resulting(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        listed = item.result
        if not isinstance(listed, ListedTools) or listed.error is not None:
            return [emit(ResponseMcpListToolsFailedEvent, type="response.mcp_list_tools.failed", item_id=item.id,
                         output_index=item.output_index)]
        return [emit(ResponseMcpListToolsCompletedEvent, type="response.mcp_list_tools.completed", item_id=item.id,
                     output_index=item.output_index)]


class ShellCallWriter(ItemWriter):
    """A `shell` call the client runs: its `action` read from the model's arguments, each command said once the
    call is whole (`response.shell_call_command.added`, `.delta`, `.done`)."""

    calls_tool = True
    takes_input = True

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        action = shell_action("".join(item.arguments)) if status != "in_progress" else {"commands": []}
        return ResponseFunctionShellToolCall(type="shell_call", id=item.id, call_id=item.call_id, action=action,
                                             status=status)

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> list[ResponseStreamEvent]:
        return []  # the commands are said whole, once the arguments are

    def closing(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        events = []
        for index, command in enumerate(shell_action("".join(item.arguments))["commands"]):
            where = {"output_index": item.output_index, "command_index": index}
            events += [emit(ResponseShellCallCommandAddedEvent, type="response.shell_call_command.added", command="",
                            **where),
                       emit(ResponseShellCallCommandDeltaEvent, type="response.shell_call_command.delta", delta=command,
                            **where),
                       emit(ResponseShellCallCommandDoneEvent, type="response.shell_call_command.done", command=command,
                            **where)]
        return events


class LocalShellCallWriter(ItemWriter):
    """A `local_shell` call the client runs (the Agents SDK's LocalShellTool): its `action`, one command to exec."""

    calls_tool = True
    takes_input = True

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        action = local_shell_action("".join(item.arguments) if status != "in_progress" else "")
        return LocalShellCall(type="local_shell_call", id=item.id, call_id=item.call_id, action=action, status=status)

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> list[ResponseStreamEvent]:
        return []  # the action is said whole, in the item


class ApplyPatchCallWriter(ItemWriter):
    """An `apply_patch` call the client runs: its `operation` read from the model's arguments."""

    calls_tool = True
    takes_input = True

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        done = status != "in_progress"
        operation = patch_operation("".join(item.arguments) if done else "")
        return ResponseApplyPatchToolCall(type="apply_patch_call", id=item.id, call_id=item.call_id,
                                          operation=operation, status="completed" if done else "in_progress")

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> list[ResponseStreamEvent]:
        return []


class WebSearchWriter(ItemWriter):
    """A browser call the server runs (gpt-oss's `browser.search`, `open`, `find`): its `action`; in progress,
    searching once the call is whole, then completed (`response.web_search_call.*`). The results are the model's
    to read, not the item's."""

    awaits_result = True
    takes_input = True

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        failed = isinstance(item.result, ToolResult) and item.result.error is not None
        return ResponseFunctionWebSearch(type="web_search_call", id=item.id, status="failed" if failed else status,
                                         action=web_search_action(item.name, "".join(item.arguments)))

    def opening(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(ResponseWebSearchCallInProgressEvent, type="response.web_search_call.in_progress",
                     item_id=item.id, output_index=item.output_index)]

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> list[ResponseStreamEvent]:
        return []

    def closing(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(ResponseWebSearchCallSearchingEvent, type="response.web_search_call.searching",
                     item_id=item.id, output_index=item.output_index)]

    def resulting(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(ResponseWebSearchCallCompletedEvent, type="response.web_search_call.completed",
                     item_id=item.id, output_index=item.output_index)]


class CodeInterpreterWriter(ItemWriter):
    """A python call the server runs (gpt-oss's `python`): its code, said once whole
    (`response.code_interpreter_call_code.delta` and `.done`), then interpreting, then its output as logs."""

    awaits_result = True
    takes_input = True

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        result = item.result if isinstance(item.result, ToolResult) else None
        outputs = None
        if result is not None:
            logs = result.output if result.error is None else str(result.error.get("message") or result.error)
            outputs = [{"type": "logs", "logs": logs or ""}]
            status = "failed" if result.error is not None else status  # type: ignore[assignment]
        code = python_code("".join(item.arguments)) if status != "in_progress" or item.arguments else None
        return ResponseCodeInterpreterToolCall(type="code_interpreter_call", id=item.id, code=code,
                                               container_id=CONTAINER_ID, outputs=outputs, status=status)

    def opening(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(ResponseCodeInterpreterCallInProgressEvent, type="response.code_interpreter_call.in_progress",
                     item_id=item.id, output_index=item.output_index)]

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> list[ResponseStreamEvent]:
        return []  # the arguments may be JSON around the code: the code is said whole

    def closing(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        code = python_code("".join(item.arguments))
        where = {"item_id": item.id, "output_index": item.output_index}
        return [emit(ResponseCodeInterpreterCallCodeDeltaEvent, type="response.code_interpreter_call_code.delta",
                     delta=code, **where),
                emit(ResponseCodeInterpreterCallCodeDoneEvent, type="response.code_interpreter_call_code.done",
                     code=code, **where),
                emit(ResponseCodeInterpreterCallInterpretingEvent, type="response.code_interpreter_call.interpreting",
                     **where)]

    def resulting(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(ResponseCodeInterpreterCallCompletedEvent, type="response.code_interpreter_call.completed",
                     item_id=item.id, output_index=item.output_index)]


class FileSearchWriter(ItemWriter):
    """A `file_search` call the server runs: its queries; in progress, searching once the call is whole, then
    completed (`response.file_search_call.*`), with its results when the request includes them."""

    awaits_result = True
    takes_input = True

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        result = item.result if isinstance(item.result, ToolResult) else None
        failed = result is not None and result.error is not None
        results = result.data if result is not None and not failed else None
        queries = search_queries("".join(item.arguments)) if status != "in_progress" or item.arguments else []
        return ResponseFileSearchToolCall(type="file_search_call", id=item.id, queries=queries,
                                          status="failed" if failed else status, results=results)

    def opening(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(ResponseFileSearchCallInProgressEvent, type="response.file_search_call.in_progress",
                     item_id=item.id, output_index=item.output_index)]

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> list[ResponseStreamEvent]:
        return []

    def closing(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(ResponseFileSearchCallSearchingEvent, type="response.file_search_call.searching",
                     item_id=item.id, output_index=item.output_index)]

    def resulting(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        return [emit(ResponseFileSearchCallCompletedEvent, type="response.file_search_call.completed",
                     item_id=item.id, output_index=item.output_index)]


class ToolSearchWriter(ItemWriter):
    """A tool search, its call (`tool_search_call`, its arguments an object) run by the server, which then adds
    what it found (`tool_search_output`); or run by the client (`by_client`), which owes its output."""

    takes_input = True

    def __init__(self, by_client: bool = False) -> None:
        self.by_client = by_client
        self.calls_tool = by_client
        self.awaits_result = not by_client

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        text = "".join(item.arguments)
        try:
            arguments: Any = json.loads(text) if text else {}
        except ValueError:
            arguments = text
        return ResponseToolSearchCall(type="tool_search_call", id=item.id, call_id=item.call_id, arguments=arguments,
                                      execution="client" if self.by_client else "server", status=status)

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> list[ResponseStreamEvent]:
        return []

    def following(self, item: ItemRecord, new_id: Callable[[str], str]) -> ResponseOutputItem | None:
        found = item.result.data if isinstance(item.result, ToolResult) else None
        return ResponseToolSearchOutputItem.model_validate({
            "type": "tool_search_output", "id": new_id("tool_search_output"), "call_id": item.call_id, "execution": "server",
            "status": "completed", "tools": found or []})


def item_writers(seal_reasoning: Callable[[str], str] | None = None) -> dict[ItemKind, ItemWriter]:
    """The writer of each kind the builder streams (a reasoning item sealed with `seal_reasoning`, when given)."""
    return {"message": MessageWriter(), "reasoning": ReasoningWriter(seal_reasoning),
            "function_call": CallWriter("function_call", ResponseFunctionToolCall, "arguments",
                                        "response.function_call_arguments", ResponseFunctionCallArgumentsDeltaEvent,
                                        ResponseFunctionCallArgumentsDoneEvent),
            "custom_tool_call": CallWriter("custom_tool_call", ResponseCustomToolCall, "input",
                                           "response.custom_tool_call_input", ResponseCustomToolCallInputDeltaEvent,
                                           ResponseCustomToolCallInputDoneEvent),
            "mcp_call": McpCallWriter(), "mcp_approval_request": McpApprovalWriter(),
            "mcp_list_tools": McpListToolsWriter(), "shell_call": ShellCallWriter(),
            "local_shell_call": LocalShellCallWriter(),
            "apply_patch_call": ApplyPatchCallWriter(), "web_search_call": WebSearchWriter(),
            "code_interpreter_call": CodeInterpreterWriter(), "file_search_call": FileSearchWriter(),
            "tool_search_call": ToolSearchWriter(), "client_tool_search_call": ToolSearchWriter(by_client=True)}
