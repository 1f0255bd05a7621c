"""Batches and their lines' results in the shared database. Every read of a batch names its project
(server/batches/project_batches.py is how routes call them); a runner takes a batch under a lease, and only the
lease's holder writes its results, each line's once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from server.batches.batch import FINAL, RUNNABLE, Batch, Counts
from server.store.database import Database, Order, Session

_COLUMNS = "id, project, api_key_id, endpoint, input_file_id, completion_window, created_at, status"
# A batch's columns, its details, and its lines answered 200 and not (parameters: none; the batch is `b`)
_SELECT = (f"SELECT {', '.join('b.' + name for name in _COLUMNS.split(', '))}, b.details, "
           "(SELECT COUNT(*) FROM batch_results r WHERE r.batch_id = b.id AND r.ok = 1), "
           "(SELECT COUNT(*) FROM batch_results r WHERE r.batch_id = b.id AND r.ok = 0) FROM batches b")
_RUNNABLE = "(" + ", ".join(f"'{status}'" for status in RUNNABLE) + ")"
RESULTS_PAGE = 500  # result lines read at once while a batch's files are written


@dataclass(frozen=True)
class Result:
    """One line's result: whether it goes to the output file (answered 200) or the error file, and its JSON line."""

    line: int
    ok: bool
    text: str


@dataclass
class BatchRecords:
    """The batches in `database`."""

    database: Database

    async def create(self, batch: Batch) -> None:
        await self.database.run("create_batch", lambda db: db.execute(
            f"INSERT INTO batches ({_COLUMNS}, details) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (batch.id, batch.project, batch.api_key_id or "", batch.endpoint, batch.input_file_id,
             batch.completion_window, batch.created_at, batch.status, json.dumps(batch.details()))))

    async def get(self, batch_id: str, project: str) -> Batch | None:
        row = await self.database.run("get_batch", lambda db: db.execute(
            f"{_SELECT} WHERE b.id = ? AND b.project = ?", (batch_id, project)).fetchone())
        return _batch(row) if row else None

    async def list(self, project: str, after: str | None, limit: int, order: Order) -> tuple[list[Batch], bool]:
        """A page of the project's batches, newest first (or oldest), after the batch `after`."""
        direction, compare = ("DESC", "<") if order == "desc" else ("ASC", ">")
        where, parameters = "b.project = ?", [project]
        if after is not None:
            where += (f" AND (b.created_at, b.id) {compare} (SELECT created_at, id FROM batches WHERE id = ? AND "
                      "project = ?)")
            parameters += [after, project]
        sql = f"{_SELECT} WHERE {where} ORDER BY b.created_at {direction}, b.id {direction} LIMIT ?"
        rows = await self.database.run("list_batches", lambda db: db.execute(sql, (*parameters, limit + 1)).fetchall())
        return [_batch(row) for row in rows[:limit]], len(rows) > limit

    async def cancel(self, batch_id: str, project: str, now: int) -> Batch | None:
        """The project's batch, asked to cancel (cancelling, unless it has ended); None: no such batch."""
        def write(db: Session) -> Batch | None:
            row = db.execute(f"{_SELECT} WHERE b.id = ? AND b.project = ?", (batch_id, project)).fetchone()
            if row is None:
                return None
            batch = _batch(row)
            if batch.status in FINAL or batch.status in ("cancelling", "finalizing"):
                return batch
            cancelling = batch.moved("cancelling", now)
            db.execute("UPDATE batches SET status = ?, details = ? WHERE id = ? AND project = ?",
                       (cancelling.status, json.dumps(cancelling.details()), batch_id, project))
            return cancelling

        return await self.database.run("cancel_batch", write)

    # -- a runner's ----------------------------------------------------------------------------

    async def claim(self, owner: str, lease_seconds: float, running: list[str]) -> tuple[str, str] | None:
        """A batch to run, oldest first, now under `owner`'s lease: one whose lease ran out, or that `owner` held
        before it restarted (not one of those it is `running`); (its id, its project), or None."""
        def write(db: Session) -> tuple[str, str] | None:
            dialect = db.dialect
            skip = f" AND id NOT IN ({', '.join('?' for _ in running)})" if running else ""
            row = db.execute(
                f"SELECT id, project FROM batches WHERE status IN {_RUNNABLE} AND (lease_owner IS NULL OR "
                f"lease_until < {dialect.now} OR lease_owner = ?){skip} ORDER BY created_at, id LIMIT 1"
                f"{dialect.skip_locked}", (owner, *running)).fetchone()
            if row is None:
                return None
            db.execute(f"UPDATE batches SET lease_owner = ?, lease_until = {dialect.now} + ? WHERE id = ?",
                       (owner, lease_seconds, row[0]))
            return str(row[0]), str(row[1])

        return await self.database.run("claim_batch", write)

    async def renew(self, owner: str, batch_ids: list[str], lease_seconds: float) -> list[str]:
        """The batches whose lease `owner` still holds, renewed (the others were taken over)."""
        def write(db: Session) -> list[str]:
            held = []
            for batch_id in batch_ids:
                if db.execute(f"UPDATE batches SET lease_until = {db.dialect.now} + ? WHERE id = ? AND "
                              "lease_owner = ?", (lease_seconds, batch_id, owner)).rowcount:
                    held.append(batch_id)
            return held

        return await self.database.run("renew_batches", write)

    async def release(self, owner: str, batch_id: str) -> None:
        await self.database.run("release_batch", lambda db: db.execute(
            "UPDATE batches SET lease_owner = NULL, lease_until = NULL WHERE id = ? AND lease_owner = ?",
            (batch_id, owner)))

    async def save(self, owner: str, batch: Batch) -> bool:
        """Write the batch's status and details, if `owner` still holds its lease (False: another took it over). A
        batch asked to cancel meanwhile stays cancelling until it is cancelled."""
        def write(db: Session) -> bool:
            row = db.execute(f"SELECT status FROM batches WHERE id = ? AND project = ? AND lease_owner = ?"
                             f"{db.dialect.share_lock}", (batch.id, batch.project, owner)).fetchone()
            if row is None:
                return False
            status = batch.status
            if row[0] == "cancelling" and status not in FINAL:
                return True  # the runner reads it again and cancels
            db.execute("UPDATE batches SET status = ?, details = ? WHERE id = ?",
                       (status, json.dumps(batch.details()), batch.id))
            return True

        return await self.database.run("save_batch", write)

    async def add_result(self, owner: str, batch_id: str, result: Result) -> bool:
        """Keep a line's result once, if `owner` still holds the batch's lease (False: it does not)."""
        def write(db: Session) -> bool:
            if db.execute(f"SELECT 1 FROM batches WHERE id = ? AND lease_owner = ?{db.dialect.share_lock}",
                          (batch_id, owner)).fetchone() is None:
                return False
            db.execute("INSERT INTO batch_results (batch_id, line, ok, result) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT (batch_id, line) DO NOTHING", (batch_id, result.line, int(result.ok),
                                                                     result.text))
            return True

        return await self.database.run("add_batch_result", write)

    async def done_lines(self, batch_id: str) -> set[int]:
        rows = await self.database.run("batch_done_lines", lambda db: db.execute(
            "SELECT line FROM batch_results WHERE batch_id = ?", (batch_id,)).fetchall())
        return {int(line) for (line,) in rows}

    async def results_page(self, batch_id: str, after: int, limit: int = RESULTS_PAGE) -> list[Result]:
        """The batch's results after line `after`, in the order of its input file."""
        rows = await self.database.run("batch_results", lambda db: db.execute(
            "SELECT line, ok, result FROM batch_results WHERE batch_id = ? AND line > ? ORDER BY line LIMIT ?",
            (batch_id, after, limit)).fetchall())
        return [Result(int(line), bool(ok), str(text)) for line, ok, text in rows]


def _batch(row: Any) -> Batch:
    *columns, details, completed, failed = row
    return Batch.of_details(tuple(columns), json.loads(details), Counts(0, int(completed), int(failed)))
