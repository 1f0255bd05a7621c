"""The watch on a worker's stream: the first piece's limit, then the idle limit between pieces."""

import asyncio

import pytest

from server.engine.stall import StallLimits, StallWatch


def _silent_after_first_piece(limits: StallLimits) -> float:
    """Seconds until the watch stops a stream that sent one piece and then nothing."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            async with StallWatch(limits) as watch:
                heard = loop.time()
                watch.heard()
                await asyncio.sleep(limits.first_token_seconds * 2)
        return loop.time() - heard

    return asyncio.run(main())


def test_a_stream_silent_after_its_first_piece_is_stopped_by_the_idle_limit_not_the_first() -> None:
    """A worker hung after its first tokens is found after `idle_seconds` (60 s by default), not after what is
    left of `first_token_seconds` (300 s): the test's hung worker took the whole first-token limit to be found."""
    assert _silent_after_first_piece(StallLimits(first_token_seconds=20, idle_seconds=0.2)) < 10
