"""vLLM's scale-out protocol (server/engine/scale_out.py): the generate body an engine request becomes, and the
worker's SSE payloads read back as engine steps."""

from __future__ import annotations

import json

import pytest

from server.engine.interface import EngineRequest, EngineStep, SamplingSettings
from server.engine.scale_out import ChunkReader, WorkerError, generate_body


def test_the_body_carries_the_token_ids_first_and_every_setting_the_worker_takes() -> None:
    sampling = SamplingSettings(max_tokens=9, temperature=0.5, seed=3, logprobs=2, stop_token_ids=(7,),
                                banned_token_ids=(5, 200, 201), structural_tag='{"type": "structural_tag"}')
    body = generate_body(EngineRequest("resp_1", [1, 2, 3], sampling, cache_salt="salt", priority=-1),
                         vocab_size=201)
    assert next(iter(body)) == "token_ids" and json.dumps(body).startswith('{"token_ids": [1, 2, 3]')
    params = body["sampling_params"]
    assert params["logit_bias"] == {"5": -100.0, "200": -100.0}  # 201 is past the vocabulary: the worker refuses it
    assert (params["max_tokens"], params["temperature"], params["seed"], params["logprobs"]) == (9, 0.5, 3, 2)
    assert params["stop_token_ids"] == [7] and params["structured_outputs"] == {"structural_tag": sampling.structural_tag}
    assert params["detokenize"] is False  # the gateway decodes
    assert (body["cache_salt"], body["priority"], body["request_id"]) == ("salt", -1, "resp_1")
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def _chunk(tokens: list[int], finish: str | None = None) -> str:
    return json.dumps({"choices": [{"index": 0, "finish_reason": finish, "token_ids": tokens}], "usage": None})


def test_the_finishing_step_waits_for_the_usage_and_carries_the_prompts_cached_tokens() -> None:
    reader = ChunkReader()
    assert reader.read(_chunk([1, 2])) == [EngineStep([1, 2])]
    assert reader.read(_chunk([3], "length")) == []  # held for the usage chunk
    usage = {"choices": [], "usage": {"prompt_tokens": 40, "prompt_tokens_details": {"cached_tokens": 32}}}
    assert reader.read(json.dumps(usage)) == []
    assert reader.read("[DONE]") == [EngineStep([3], "length", cached_tokens=32, prompt_tokens=40)]
    assert reader.done


def test_a_stream_without_usage_still_ends_with_its_finishing_step_and_an_error_payload_raises() -> None:
    reader = ChunkReader()
    reader.read(_chunk([4], "stop"))
    assert reader.read("[DONE]") == [EngineStep([4], "stop")]
    with pytest.raises(WorkerError, match="grammar"):
        ChunkReader().read(json.dumps({"error": {"message": "the grammar could not be compiled", "code": 400}}))


def test_logprobs_are_the_sampled_token_and_the_top_k_by_rank() -> None:
    reader = ChunkReader(top_logprobs=2)
    entry = {"token_id": 9, "logprob": -4.0, "rank": 8,
             "top_logprobs": [{"token_id": 9, "logprob": -4.0, "rank": 8}, {"token_id": 1, "logprob": -0.5, "rank": 1},
                              {"token_id": 2, "logprob": -1.0, "rank": 2}]}
    chunk = {"choices": [{"index": 0, "finish_reason": None, "token_ids": [9], "logprobs": {"content": [entry]}}]}
    (step,) = reader.read(json.dumps(chunk))
    assert step.logprobs[0].token_id == 9 and step.logprobs[0].logprob == -4.0
    assert step.logprobs[0].top == ((1, -0.5), (2, -1.0))
