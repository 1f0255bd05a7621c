"""`responses-server prompts create | list | show`: a project's reusable prompts, kept in the store."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from server.errors import RequestError
from server.tenancy.keys import DEFAULT_PROJECT
from server.saved_prompts.project_prompts import ProjectPrompts
from server.saved_prompts.records import PromptRecords
from server.saved_prompts.use import checked_content

# Opens the prompt records in the `--store` database (its URL, the default SQLite file); None for `none`. The command
# line passes the server's own opener, which knows every room's migrations.
OpenPrompts = Callable[[str | None, Path], PromptRecords | None]


def main(argv: Sequence[str], default_store: Path, open_prompts: OpenPrompts) -> int:
    parser = argparse.ArgumentParser(prog="responses-server prompts",
                                     description="Reusable prompts (`prompt: {id, version, variables}`), kept in the "
                                                 "store, each a project's.")
    parser.add_argument("--store", default=None, metavar="URL", help="the server's --store (default: its SQLite file)")
    parser.add_argument("--project", default=DEFAULT_PROJECT, help="whose prompts (default: %(default)s)")
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", help="make a prompt (or, with --id, its next version); prints it as JSON")
    create.add_argument("--instructions", help="the instructions, with {{name}} variables")
    create.add_argument("--instructions-file", type=Path, help="the instructions, read from a file")
    create.add_argument("--input", help="input: a user message, or a JSON list of input items")
    create.add_argument("--input-file", type=Path, help="input, read from a file (as --input)")
    create.add_argument("--id", dest="prompt_id", help="add a version to this prompt instead of making one")
    commands.add_parser("list", help="the project's prompts: id, latest version, created, variables")
    show = commands.add_parser("show", help="one prompt as JSON (its latest version, or --version)")
    show.add_argument("prompt_id")
    show.add_argument("--version", type=int)
    args = parser.parse_args(argv)
    try:
        return asyncio.run(_run(args, default_store, open_prompts))
    except (ValueError, OSError, RequestError) as exc:
        parser.error(str(exc))
    return 2


async def _run(args: argparse.Namespace, default_store: Path, open_prompts: OpenPrompts) -> int:
    records = open_prompts(args.store, default_store)
    if records is None:
        raise ValueError("prompts are kept in a store: --store none has none")
    prompts = ProjectPrompts(records, args.project)
    try:
        if args.command == "create":
            return await _create(args, prompts)
        if args.command == "list":
            for prompt in (await prompts.latest(None, 100, "desc"))[0]:
                print("\t".join([prompt.id, str(prompt.version), str(prompt.created_at),
                                 ",".join(prompt.variables()) or "-"]))
            return 0
        found = await prompts.get(args.prompt_id, args.version)
        if found is None:
            print(f"no prompt {args.prompt_id}" + (f" version {args.version}" if args.version else ""),
                  file=sys.stderr)
            return 1
        print(json.dumps(found.to_api(), indent=2))
        return 0
    finally:
        await records.database.close()


async def _create(args: argparse.Namespace, prompts: ProjectPrompts) -> int:
    instructions = args.instructions_file.read_text() if args.instructions_file else args.instructions
    given = args.input_file.read_text() if args.input_file else args.input
    items: Any = given
    if isinstance(given, str) and given.lstrip().startswith("["):
        items = json.loads(given)
    instructions, checked = checked_content(instructions, items)
    made = await (prompts.add_version(args.prompt_id, instructions, checked) if args.prompt_id
                  else prompts.create(instructions, checked))
    if made is None:
        print(f"no prompt {args.prompt_id} in project {args.project}", file=sys.stderr)
        return 1
    print(json.dumps(made.to_api(), indent=2))
    return 0
