"""The responses a WebSocket connection keeps for `previous_response_id`: each lane's latest and what it continues."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Iterator, MutableMapping

from server.responses.records import StoredResponse

MAX_LANES_KEPT = 64  # lanes (stream_ids) whose latest response a connection keeps; the least recently used goes


@dataclass
class ConnectionResponses(MutableMapping[str, StoredResponse]):
    """Responses made on one connection, by id (a run adds its record when it ends).

    OpenAI keeps the most recent response of a connection in memory; this keeps each lane's latest and the chain
    behind it (a turn may go back to an ancestor, and a prompt needs them all), so an hour-long connection holds its
    live chains, not every response it made. Stored responses are in the store besides.
    """

    _records: dict[str, StoredResponse] = field(default_factory=dict)
    _latest: OrderedDict[str | None, str] = field(default_factory=OrderedDict)  # lane -> id, least recent first

    def __getitem__(self, response_id: str) -> StoredResponse:
        return self._records[response_id]

    def __setitem__(self, response_id: str, record: StoredResponse) -> None:
        self._records[response_id] = record

    def __delitem__(self, response_id: str) -> None:
        del self._records[response_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def ended(self, lane: str | None, response_id: str, continued: Iterable[str] = ()) -> None:
        """`response_id` has ended on `lane`: it is the lane's latest, and what neither a lane's latest nor a
        response being prepared or run (`continued`: the ids they continue) leads back to goes."""
        if response_id not in self._records:  # it ended without a record (its connection went away)
            return
        self._latest[lane] = response_id
        self._latest.move_to_end(lane)
        while len(self._latest) > MAX_LANES_KEPT:
            self._latest.popitem(last=False)
        kept: set[str] = set()
        for root in (*self._latest.values(), *continued):
            kept.update(self._chain(root))
        for gone in self._records.keys() - kept:
            del self._records[gone]

    def _chain(self, response_id: str | None) -> Iterator[str]:
        """The response and those it continues, newest first, as far as this connection holds them."""
        while response_id is not None and response_id in self._records:
            yield response_id
            response_id = self._records[response_id].previous_response_id
