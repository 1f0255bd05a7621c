"""`responses-server keys create | list | revoke`: the keys kept in the store, each change written to the audit log."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from server.tenancy.key_records import KeyRecords
from server.tenancy.keys import DEFAULT_PROJECT, ApiKey, key_hash, new_key, new_key_id

audit = logging.getLogger("responses_server.audit")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


async def create_key(store: Any, project: str, name: str, admin: bool = False) -> tuple[str, ApiKey]:
    """A new key for `project`: the key (to show once) and what the store keeps of it (its hash)."""
    if not _NAME.fullmatch(project) or not _NAME.fullmatch(name):
        raise ValueError("a project's and a key's names are 1-64 letters, digits, '_', '.' or '-'")
    secret = new_key()
    record = ApiKey(id=new_key_id(), name=name, project=project, hash=key_hash(secret), admin=admin,
                    created_at=time.time())
    await store.add_key(record)
    audit.info("key %s (%s) created for %s", record.id, name, "admins" if admin else f"project {project}")
    return secret, record


async def revoke_key(store: Any, key_id: str) -> bool:
    """Revoke a key: every replica refuses it from its next request. False: no such key, or already revoked."""
    revoked = await store.revoke_key(key_id, time.time())
    if revoked:
        audit.info("key %s revoked", key_id)
    return bool(revoked)


# Opens the key records in the `--store` database (its URL, the default SQLite file); None for `none`. The command
# line passes the server's own opener, which knows every room's migrations.
OpenKeys = Callable[[str | None, Path], KeyRecords | None]


def main(argv: Sequence[str], default_store: Path, open_keys: OpenKeys) -> int:
    parser = argparse.ArgumentParser(prog="responses-server keys", description="API keys kept in the store.")
    parser.add_argument("--store", default=None, metavar="URL", help="the server's --store (default: its SQLite file)")
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", help="make a key; it is printed once, and only its SHA-256 is kept")
    create.add_argument("--project", default=DEFAULT_PROJECT)
    create.add_argument("--name", default="key")
    create.add_argument("--admin", action="store_true", help="a key that manages keys and reads usage, no inference")
    commands.add_parser("list", help="the keys: id, name, project, created, last used, revoked (never the key)")
    revoke = commands.add_parser("revoke", help="refuse a key from now on, on every replica")
    revoke.add_argument("key_id")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(_run(args, default_store, open_keys))
    except ValueError as exc:
        parser.error(str(exc))
    return 2


async def _run(args: argparse.Namespace, default_store: Path, open_keys: OpenKeys) -> int:
    store = open_keys(args.store, default_store)
    if store is None:
        raise ValueError("keys are kept in a store: --store none has none")
    try:
        if args.command == "create":
            secret, record = await create_key(store, args.project, args.name, args.admin)
            print(secret)
            print(f"{record.id} {record.name} {'admin' if record.admin else record.project}: shown once, "
                  "keep it now", file=sys.stderr)
        elif args.command == "list":
            for key in await store.list_keys():
                print("\t".join([key.id, key.name, "(admin)" if key.admin else key.project, _when(key.created_at),
                                 _when(key.last_used_at), "revoked " + _when(key.revoked_at) if key.revoked_at else
                                 "active"]))
        elif not await revoke_key(store, args.key_id):
            print(f"no active key {args.key_id}", file=sys.stderr)
            return 1
        return 0
    finally:
        await store.database.close()


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)) if at else "-"
