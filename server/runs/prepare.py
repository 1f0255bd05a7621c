"""Assembling runs from requests: history, sealed items, the prompt rendered to fit, output rules and grammar,
sampling and the builder. Everything that can reject a request happens here, before any byte of a stream is sent."""

from __future__ import annotations

import asyncio
import math
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, MutableMapping, TypeVar

from openai.types.responses import Response, ResponseCompactionItem, ResponseOutputItem

from server.history.references import resolved_references
from server.history.codex_items import rendered_codex_items, without_image_tool
from server.history.compaction import compacted_response, summary_request
from server.constraints.rules import OutputRules, carries_schemas, check_schemas, output_rules
from server.history.conversation import since_last_compaction, stored_input_items, validated_items, with_history
from server.engine.interface import PENALTIES, SAMPLING_KEYS, EngineRequest, SamplingSettings
from server.errors import DependencyFailed, GenerationFailed, RequestError
from server.attachments.files import FetchFile, LoadFile, read_files
from server.attachments.media import checked_images, decoded_images, uploaded_images
from server.attachments.media_fetch import fetch_file, fetch_images
from server.file_data import MAX_FILE_BYTES
from server.models.registry import Model
from server.model_settings import ModelSettings
from server.paths.base import ModelPath, RenderedPrompt
from server.paths.tools import tool_definitions
from server.requests import UPLOADED_IMAGE, CompactionItem, ResponsesRequest
from server.runs.echoed_settings import response_settings
from server.runs.generation import ApprovedCall, Continuation, ResponseRun
from server.runs.placement import Placement, placement
from server.tools.file_search import FileSearch, file_search_tool
from server.tools.hosted import HostedTools, hosted_tools
from server.runs.stored_run import ConversationLink, StoredRun
from server.history.sealed_items import open_sealed_items, reasoning_sealer
from server.runs.context import ServingContext
from server.responses.records import StoredResponse
from server.tenancy.keys import Caller
from server.tenancy.limiter import Ticket
from server.history.truncation import check_expanded_fits, fewest_items
from server.prompts.known import PromptKeys
from server.saved_prompts.use import with_saved_prompt
from server import tracing
from server.logs import name_request
from server.metrics import ADMISSION_WAIT
from server.runs.admission import Slot
from server.runs.timeline import Timeline
from server.runs.rendering import remember_prompt, rendered_prompt
from server.service_tier import served_tier, tier_priority
from streaming.builder import ResponseBuilder
from streaming.items import ListedTools, ToolResult
from streaming.outcome import Usage

T = TypeVar("T")


async def prepare_stored_run(context: ServingContext, body: ResponsesRequest, caller: Caller,
                             earlier: MutableMapping[str, StoredResponse] | None = None,
                             generate: bool = True, batch: bool = False) -> StoredRun:
    """The run for `POST /v1/responses` by `caller`, with the conversation behind it (its project's) and where it
    will be stored; it holds its place under the concurrency limit and its project's limits.

    `earlier`: the responses of a WebSocket connection, where `previous_response_id` is looked up first and this
    one is kept when it ends. `generate` False: it completes with no output, as a warm-up. `batch`: a batch's
    request (server/batches), behind every other in the engine, its usage counted apart."""
    model = context.model(body.model)  # an unknown model is a 404, and one whose workers are all down a 503, first
    model.check_up()
    async with _limited(context, caller, model, batch) as ticket:
        stored = await _stored_run(context, body, caller, earlier, generate, batch)
        stored.run.ticket = ticket
        return stored


@asynccontextmanager
async def _limited(context: ServingContext, caller: Caller, model: Model, batch: bool = False) -> AsyncIterator[Ticket]:
    """The caller's ticket under its project's and key's limits, taken first (a project past a limit costs the
    server no preparation, so it does not slow another); given back if the preparation fails. A batch's request
    is held to its batch's bounds instead."""
    ticket = context.limiter.admit_batch(caller, model.name) if batch else await context.limiter.admit(caller,
                                                                                                        model.name)
    try:
        yield ticket
    except BaseException:
        ticket.finish(None)
        raise


async def _stored_run(context: ServingContext, body: ResponsesRequest, caller: Caller,
                      earlier: MutableMapping[str, StoredResponse] | None, generate: bool,
                      batch: bool = False) -> StoredRun:
    timeline = Timeline()  # from the request's arrival
    project = caller.project
    project_store = context.project_store(project)
    store = project_store if body.store else None
    if body.background and store is None:
        raise RequestError("Background responses must be stored (store: true, and a server with a store).",
                           param="background")
    with tracing.span("history", attributes={"responses_server.project": project}) as history:
        conversation, history_start = await conversation_of(context, body, project, earlier)
        conversation, body = await with_saved_prompt(conversation, body, context.project_prompts(project))
        tracing.set_attributes(history, {"responses_server.history.items": len(conversation.input_items())})
    hosted = await hosted_tools(conversation, body, context.config.mcp, await _file_search(context, body, project),
                                context.tool_search_embedding())
    unavailable = hosted.unavailable
    if unavailable is not None and not (body.stream or body.background or earlier is not None):
        raise DependencyFailed(unavailable.error or "", param="tools")  # a stream says it with its events
    fetched = await images_fetched(context, conversation, body, project)
    compacting = body.asks_compaction()  # the response is one compaction item (the run is never generated from)
    keys = prompt_keys(body, project, continuable=store is not None or earlier is not None)
    placed = _placement(context, body, caller, history_start, batch)
    run, overflowed = await _first_run(context, conversation, body, fetched, hosted, compacting, keys, placed)
    tracing.annotate({"gen_ai.response.id": run.response_id, "gen_ai.request.model": run.builder.model,
                      "responses_server.project": project})
    name_request(run.response_id, project)
    placed = Placement(placed.cache_salt, placed.priority, run.request.affinity, placed.project)  # where the first ran
    loop = HostedLoop(context, hosted, conversation, body, fetched, keys, placed) if hosted.runs_tools else None
    run.hosted = loop
    engine = context.model(body.model).engine
    if run.request.images and not (compacting or overflowed):  # (a stand-in's are not the run's)
        check_expanded_fits(await engine.prompt_length(run.request), engine.max_model_len)
    run.generate = generate and not compacting
    threshold = body.compact_threshold(engine.max_model_len)
    if compacting or overflowed or (threshold is not None and len(run.request.prompt_token_ids) > threshold):
        run.before = _compacting(context, conversation, body, fetched, hosted, loop, keys, placed)
    link = ConversationLink(project_store, body.conversation) if body.conversation and project_store else None
    keep_items = store is not None or link is not None or earlier is not None
    input_items = stored_input_items(body, context.ids) if keep_items else []
    # last: a request refused for any other reason takes no place (nor waits for one); a background one is
    # accepted at once, queued until it has its place
    if body.background:
        run.queue_for(partial(admitted, context, math.inf))
    else:
        run.slot = await admitted(context)
    run.timeline = timeline
    timeline.mark("prepared")
    keep_log = store is not None and (body.stream or body.background)  # the log is for stored streams
    mode = "background" if body.background else "stream" if body.stream else "json"
    mode = "websocket" if earlier is not None else mode
    run.read_at_end = mode == "json"
    obfuscate = mode != "json" and (body.stream_options is None or body.stream_options.include_obfuscation)
    return StoredRun(run, store, input_items, body.previous_response_id, keep_event_log=keep_log,
                     background=body.background, conversation=link, mode=mode, obfuscate=obfuscate,
                     tools_not_offered=hosted.not_offered, retry_later=context.pending_saves.add,
                     kept_in=earlier, replica=context.replicas.replica_id if context.replicas else None)


async def admitted(context: ServingContext, wait_seconds: float | None = None) -> Slot:
    """A place under the concurrency limit, waited for up to `wait_seconds` (else --admission-wait; traced: its wait
    is the admission's)."""
    started = time.monotonic()
    with tracing.span("admission"):
        slot = await context.admission.admit_within(context.config.admission_wait_seconds if wait_seconds is None
                                                    else wait_seconds)
    ADMISSION_WAIT.observe(time.monotonic() - started, tracing.exemplar())
    return slot


def _placement(context: ServingContext, body: ResponsesRequest, caller: Caller,
               history_start: str | None, batch: bool) -> Placement:
    priority = tier_priority(context.config.projects.priority(caller.project, caller.key_id),
                             served_tier(body.service_tier), batch)
    return placement(body, caller.project, history_start, context.sealer, context.config.isolate_prefix_cache,
                     priority)


async def _file_search(context: ServingContext, body: ResponsesRequest, project: str) -> FileSearch | None:
    """The request's file_search tool, on the project's vector stores (checked: 400s, 404s)."""
    return await file_search_tool(body.tools, body.include, context.project_retrieval(project))


async def _first_run(context: ServingContext, conversation: ResponsesRequest, body: ResponsesRequest,
                     fetched: Mapping[str, bytes], hosted: HostedTools, compacting: bool,
                     keys: PromptKeys, placed: Placement) -> tuple[ResponseRun, bool]:
    """The run as asked, and whether the conversation overflowed the context and is to be compacted first
    (`--compact-on-overflow`, truncation unset). A run to be compacted first stands in until the compacted one
    replaces it, and is never generated from: it is rendered from the least of the conversation a prompt holds (the
    instructions, system and developer messages, the last user message), not from its whole history again."""
    stand_in = fewest_items(conversation)
    if compacting:
        return await prepare_run(context, stand_in, body, fetched, hosted, keys=keys, placed=placed), False
    try:
        return await prepare_run(context, conversation, body, fetched, hosted, keys=keys, placed=placed), False
    except RequestError as error:
        if not (error.code == "context_length_exceeded" and body.truncation is None
                and context.config.compact_on_overflow):
            raise
        overflow = error
    try:
        return await prepare_run(context, stand_in, body, fetched, hosted, keys=keys, placed=placed), True
    except RequestError:
        raise overflow from None  # not even the newest items fit: the summary would not either


async def input_token_count(context: ServingContext, body: ResponsesRequest, project: str) -> int:
    """The `usage.input_tokens` a response to `body` by `project` would report: its run is prepared, not started."""
    conversation, _ = await conversation_of(context, body, project)
    conversation, body = await with_saved_prompt(conversation, body, context.project_prompts(project))
    hosted = await hosted_tools(conversation, body, context.config.mcp, await _file_search(context, body, project),
                                context.tool_search_embedding())
    if hosted.unavailable is not None:
        raise DependencyFailed(hosted.unavailable.error or "", param="tools")
    fetched = await images_fetched(context, conversation, body, project)
    run = await prepare_run(context, conversation, body, fetched, hosted, keys=prompt_keys(body, project,
                                                                                           continuable=False))
    return await context.model(body.model).engine.prompt_length(run.request)


@dataclass
class CompactionRun:
    """The model summarizing a conversation; once its run has ended, `result()` is the compacted response."""

    stored: StoredRun
    conversation: ResponsesRequest
    context: ServingContext

    def result(self) -> dict[str, Any]:
        """The SDK's `CompactedResponse`: one sealed `compaction` item to continue from."""
        return self.from_summary(self.stored.response(), self.conversation, self.context)

    @staticmethod
    def from_summary(summary: Response, conversation: ResponsesRequest, context: ServingContext) -> dict[str, Any]:
        """The compacted response of a finished summary (GenerationFailed when there is none)."""
        if summary.status not in ("completed", "incomplete"):
            message = summary.error.message if summary.error else "the summary could not be generated"
            raise GenerationFailed(f"Compaction failed: {message}.")
        window = context.model(conversation.model).engine.max_model_len
        return compacted_response(summary, conversation, context.sealer, context.ids, window)


async def prepare_compaction(context: ServingContext, body: ResponsesRequest, caller: Caller) -> CompactionRun:
    """The summarizing run for `POST /v1/responses/compact` by `caller`, holding its place under the concurrency
    limit and its project's limits."""
    if body.model is None:
        raise RequestError("model is required.", param="model")
    model = context.model(body.model)
    model.check_up()
    async with _limited(context, caller, model) as ticket:
        conversation, history_start = await conversation_of(context, body, caller.project)
        if not conversation.input_items():
            raise RequestError("There is nothing to compact: give input or previous_response_id.", param="input")
        summarizing = summary_request(conversation)
        run = await prepare_run(context, summarizing, summarizing,
                                await images_fetched(context, summarizing, summarizing, caller.project),
                                placed=_placement(context, body, caller, history_start, False))
        run.slot = await admitted(context)
        run.ticket = ticket
        return CompactionRun(StoredRun(run, None, keep_event_log=False), conversation, context)


async def conversation_of(context: ServingContext, body: ResponsesRequest, project: str,
                          earlier: Mapping[str, StoredResponse] | None = None) -> tuple[ResponsesRequest, str | None]:
    """The request with its stored history before it (from its last compaction on; `project`'s only) and sealed
    items opened: what the model sees; and where its history starts (`with_history`)."""
    store = context.project_store(project)
    history, start = await with_history(await resolved_references(body, store), store, earlier,
                                        context.known_chains, project)
    history = await resolved_references(history, store)  # a chain's earlier turns may have sent references too
    conversation = open_sealed_items(since_last_compaction(rendered_codex_items(history)), context.sealer)
    await read_files(conversation, body, context.file_texts, _file_loader(context, project), _file_fetcher(context))
    return conversation, start


def _file_fetcher(context: ServingContext) -> FetchFile:
    """How the request's `input_file` parts read a `file_url`: from the hosts the operator allows, as images."""
    async def fetch(url: str, param: str) -> bytes:
        return await fetch_file(url, param, context.config.allowed_media_domains, MAX_FILE_BYTES)
    return fetch


def _file_loader(context: ServingContext, project: str) -> LoadFile | None:
    """How the request's `input_file` parts read the project's uploaded files (None: no store)."""
    files = context.project_files(project)
    return files.loader() if files is not None else None


def _compacting(context: ServingContext, conversation: ResponsesRequest, body: ResponsesRequest,
                fetched: Mapping[str, bytes], hosted: HostedTools, loop: HostedLoop | None,
                keys: PromptKeys, placed: Placement) -> Callable[[], Awaitable[Continuation]]:
    """The step before an automatically compacted response's answer: the model summarizes the conversation, as for
    `POST /v1/responses/compact`, and the answer comes from the compaction item alone (as do the passes after
    hosted calls, through `loop`)."""

    async def compact() -> Continuation:
        with tracing.span("compaction", attributes={"responses_server.compaction.items":
                                                    len(conversation.input_items())}):
            return await _compacted(context, conversation, body, fetched, hosted, loop, keys, placed)

    return compact


async def _compacted(context: ServingContext, conversation: ResponsesRequest, body: ResponsesRequest,
                     fetched: Mapping[str, bytes], hosted: HostedTools, loop: HostedLoop | None,
                     keys: PromptKeys, placed: Placement) -> Continuation:
    """The automatic compaction: the summary's pass, then the answer's run prepared from the compaction item."""
    summarizing = summary_request(conversation)
    summary = await prepare_run(context, summarizing, summarizing, fetched, placed=placed)
    async for _ in summary.events():
        pass
    result = CompactionRun.from_summary(summary.response(), conversation, context)
    made = result["output"][0]
    item = ResponseCompactionItem.model_validate(made)  # the output item; as input, it opens into the context
    compacted = open_sealed_items(conversation.model_copy(update={"input": [CompactionItem.model_validate(made)]}),
                                  context.sealer)
    await read_files(compacted, body, context.file_texts,  # the files it keeps were read: their texts are kept
                     _file_loader(context, keys.project), _file_fetcher(context))
    if loop is not None:
        loop.conversation = compacted
    return Continuation(item, await prepare_run(context, compacted, body, fetched, hosted, keys=keys,
                                                placed=placed),
                        _usage(summary.response()))


def _usage(response: Response) -> Usage:
    usage = response.usage
    if usage is None:
        return Usage()
    return Usage(input_tokens=usage.input_tokens, cached_tokens=usage.input_tokens_details.cached_tokens,
                 output_tokens=usage.output_tokens, reasoning_tokens=usage.output_tokens_details.reasoning_tokens)


async def images_fetched(context: ServingContext, conversation: ResponsesRequest, body: ResponsesRequest,
                         project: str) -> dict[str, bytes]:
    """The conversation's image URLs fetched, where the operator allows, and its uploaded images read, `project`'s
    only (nothing is fetched for a model that does not see: its request is refused)."""
    if "image" not in context.model(body.model).engine.input_modalities:
        return {}
    params = {part.image_source: param for param, part in body.content_parts() if part.is_image()}
    sources = [(params.get(part.image_source, "previous_response_id"), part.image_source)
               for _, part in conversation.content_parts() if part.is_image()]
    by_file = [(param, source) for param, source in sources if source and source.startswith(UPLOADED_IMAGE)]
    fetched = await fetch_images(sources, context.config.allowed_media_domains)  # (it takes http(s) URLs alone)
    return {**fetched, **await uploaded_images(by_file, _file_loader(context, project))}


async def prepare_run(context: ServingContext, conversation: ResponsesRequest, body: ResponsesRequest,
                      fetched: Mapping[str, bytes] = MappingProxyType({}),
                      hosted: HostedTools | None = None, spent: int = 0, keys: PromptKeys | None = None,
                      placed: Placement = Placement()) -> ResponseRun:
    """The run for `conversation` (the request with its history), echoing `body` (the request as sent), with the
    bytes of its image URLs `fetched`; its MCP servers' tools offered as `hosted` lists them (none: not offered).
    `spent`: the output tokens earlier passes of the response took from its `max_output_tokens`. `keys`: where its
    prompt finds the known prompt it extends, and is kept for the next turn. `placed`: where the engine runs it."""
    model = context.model(body.model)
    if not conversation.input_items():
        raise RequestError("input must not be empty (unless previous_response_id continues a conversation).",
                           param="input")
    conversation = (hosted or HostedTools(context.config.mcp)).view(conversation)
    engine, path = model.engine, model.path
    conversation = without_image_tool(conversation, engine.input_modalities)
    params = checked_images(body, engine.input_modalities, fetched)  # before rendering: a bad image names its part
    await _schema_work(conversation, check_schemas, conversation)  # before rendering, which writes them out
    rendered = await rendered_prompt(context, model, conversation, keys)
    images = await decoded_images(rendered.images, params, context.work_pool, fetched,
                                  context.config.max_request_pixels)  # those the prompt kept
    prompt = rendered.token_ids
    room = engine.max_model_len - len(prompt)
    cap = body.max_output_tokens or model.settings.default_max_output_tokens
    max_tokens = min(cap - spent if cap else room, room)
    rules, structural_tag = await _schema_work(conversation, _constraints, path, conversation, rendered, max_tokens)
    logprobs = (body.top_logprobs or 0) if body.wants_logprobs() else None
    sampling = SamplingSettings(
        max_tokens=max_tokens,
        stop_token_ids=rendered.stop_token_ids,
        banned_token_ids=rendered.banned_token_ids,
        logprobs=logprobs,
        structural_tag=structural_tag,
        thinking_token_budget=path.thinking_budget(rules),
        **sampling_values(body, {**engine.sampling_defaults, **serving_defaults(model.settings, structural_tag)}),
    )
    settings = response_settings(body, model.name, sampling, cap)
    seal = reasoning_sealer(context.sealer) if body.wants_encrypted_reasoning() else None
    builder = ResponseBuilder(settings, ids=context.ids, clock=context.clock, seal_reasoning=seal,
                              summarize_reasoning=body.wants_reasoning_summary())
    parser = path.new_parser(rendered)
    remember_prompt(model, keys, builder.response_id, rendered)
    return ResponseRun(
        engine=engine,
        request=EngineRequest(builder.response_id, prompt, sampling, images, cache_salt=placed.cache_salt,
                              priority=placed.priority, affinity=placed.affinity or builder.response_id,
                              project=placed.project),
        parser=parser,
        decoder=path.new_decoder(),
        builder=builder,
        token_text=path.token_text if logprobs is not None else None,
        max_tool_calls=rules.max_calls,
        closing=path.grammar_closing(rules, max_tokens, parser),
    )


MAX_HOSTED_PASSES = 16  # a response's engine passes between hosted calls; the last may call no tool


@dataclass
class HostedLoop:
    """A run's hosted tools, as the run asks for them (server/runs/generation.py's HostedPasses): each pass after
    a call is prepared on the conversation extended by the response's output so far."""

    context: ServingContext
    tools: HostedTools
    conversation: ResponsesRequest  # the request with its history, as the first pass saw it
    body: ResponsesRequest
    fetched: Mapping[str, bytes]
    keys: PromptKeys | None = None  # where the passes find the prompt they extend
    placed: Placement = Placement()  # where the engine runs them: where the first pass ran
    passes: int = 1

    def listings(self) -> list[ListedTools]:
        return self.tools.listings

    def approved(self) -> list[ApprovedCall]:
        return [ApprovedCall(call.server_label, call.name, call.arguments, call.id) for call in self.tools.approved]

    async def call(self, item_id: str, server_label: str, name: str, arguments: str) -> ToolResult:
        return await self.tools.call(item_id, server_label, name, arguments)

    async def next_pass(self, output: list[ResponseOutputItem], output_tokens: int) -> ResponseRun | None:
        """The next pass: tools are free again, within what is left of `max_tool_calls`, of the passes and of the
        output budget (None: it is spent)."""
        cap = self.body.max_output_tokens or self.context.model(self.body.model).settings.default_max_output_tokens
        if cap is not None and output_tokens >= cap:
            return None
        self.passes += 1
        made = sum(1 for item in output if item.type in ("mcp_call", "file_search_call", "tool_search_call"))
        left = None if self.body.max_tool_calls is None else self.body.max_tool_calls - made
        last = (left is not None and left <= 0) or self.passes >= MAX_HOSTED_PASSES
        items = self.conversation.input_items() + validated_items(
            [item.model_dump(mode="json", exclude_none=True) for item in output if item.type != "compaction"])
        update = {"input": items, "tool_choice": "none" if last else "auto", "max_tool_calls": None if last else left}
        return await prepare_run(self.context, self.conversation.model_copy(update=update), self.body, self.fetched,
                                 self.tools, spent=output_tokens, keys=self.keys, placed=self.placed)


def prompt_keys(body: ResponsesRequest, project: str, continuable: bool) -> PromptKeys:
    """Where a turn of `project` finds the prompt it extends, and files its own (`continuable`: under its
    response's id too, for a next turn naming it)."""
    return PromptKeys(project, body.previous_response_id, body.conversation, body.prompt_cache_key, continuable)


async def _schema_work(request: ResponsesRequest, work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` on the request's schemas: in a thread when it carries one (checking and compiling a schema can
    be heavy), at once when it carries none (a hand-off, 60 to 90 µs here by bench/turn_floor.py, costs more)."""
    if carries_schemas(request):
        return await asyncio.to_thread(work, *args)
    return work(*args)


def _constraints(path: ModelPath, conversation: ResponsesRequest, rendered: RenderedPrompt,
                 budget: int) -> tuple[OutputRules, str | None]:
    """The output rules and their grammar (schema analysis and grammar text: in a thread, off the event loop)."""
    rules = output_rules(conversation, rendered.tools, tool_definitions(conversation), budget=budget)
    return rules, path.structural_tag(rules)


def serving_defaults(config: ModelSettings, structural_tag: str | None) -> dict[str, float]:
    """The server's sampling defaults (--sampling-defaults) for one output: a grammar's (JSON, a forced call) is
    sampled without their penalties, as JSON repeats its quotes and commas by nature (a penalty on them made the
    bundled model's forced python call run on until its budget)."""
    if structural_tag is None:
        return config.sampling_defaults
    return {key: value for key, value in config.sampling_defaults.items() if key not in PENALTIES}


def sampling_values(body: ResponsesRequest, defaults: dict[str, float]) -> dict[str, Any]:
    """The request's own sampling values, else the defaults (the server's, then the model's generation_config.json,
    as vLLM serves them)."""
    values: dict[str, Any] = {key: defaults.get(key) for key in SAMPLING_KEYS}
    for key in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "seed"):
        if getattr(body, key) is not None:
            values[key] = getattr(body, key)
    return values
