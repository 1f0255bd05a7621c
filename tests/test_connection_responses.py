"""What a WebSocket connection keeps for `previous_response_id`: each lane's latest response, the chain behind it,
and the chains that responses being prepared or run continue."""

from __future__ import annotations

from server.runs.connection_responses import MAX_LANES_KEPT, ConnectionResponses
from server.responses.records import StoredResponse


def record(response_id: str, previous: str | None = None) -> StoredResponse:
    return StoredResponse(id=response_id, created_at=0.0, status="completed", response={}, input_items=[],
                          previous_response_id=previous)


def ended(kept: ConnectionResponses, lane: str | None, response_id: str, previous: str | None = None,
          continued: tuple[str, ...] = ()) -> None:
    kept[response_id] = record(response_id, previous)
    kept.ended(lane, response_id, continued)


def test_a_lanes_latest_keeps_its_chain_and_lets_the_rest_go() -> None:
    kept = ConnectionResponses()
    ended(kept, None, "r1")
    ended(kept, None, "r2", "r1")
    ended(kept, None, "r3", "r2")
    assert set(kept) == {"r1", "r2", "r3"}
    ended(kept, None, "r4", "r1")  # back to an ancestor: the branch it left goes
    assert set(kept) == {"r1", "r4"}
    ended(kept, None, "r5")
    assert set(kept) == {"r5"}


def test_a_chain_that_a_running_response_continues_stays_until_that_one_ends() -> None:
    kept = ConnectionResponses()
    ended(kept, "a", "p1")
    ended(kept, "a", "p2", "p1")
    ended(kept, "a", "q1", continued=("p2",))  # lane b is running a fork of p2 meanwhile
    assert set(kept) == {"p1", "p2", "q1"}
    ended(kept, "b", "fork", "p2")
    assert set(kept) == {"p1", "p2", "q1", "fork"}
    ended(kept, "b", "fresh")
    assert set(kept) == {"q1", "fresh"}


def test_the_lane_used_longest_ago_goes_past_the_limit() -> None:
    kept = ConnectionResponses()
    for lane in range(MAX_LANES_KEPT):
        ended(kept, str(lane), f"r{lane}")
    ended(kept, "0", "r0b", "r0")  # lane 0 used again: lane 1 is now the one used longest ago
    ended(kept, "new", "rn")
    assert "r1" not in kept and {"r0", "r0b", "r2", "rn"} <= set(kept) and len(kept) == MAX_LANES_KEPT + 1


def test_a_response_that_ended_without_a_record_changes_nothing() -> None:
    kept = ConnectionResponses()
    ended(kept, None, "r1")
    kept.ended(None, "never-recorded")
    assert set(kept) == {"r1"}
