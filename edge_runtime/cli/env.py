"""``edge-runtime env set NAME VALUE [--secret] | list [--json] | remove NAME``: the shared
variables every Run's Attempts get (docs/environment.md). A secret's value is never printed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from edge_runtime.cli.common import CREATE, LOCAL_STORES, READ, WRITE, add_json_flag, print_json, present
from edge_runtime.contract.environment import MASK, VariableError


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = subparsers.add_parser(
        "env", help=help_text,
        description="Shared variables, passed to every Run; a Run's own --env overrides them. A secret's value "
        "is stored in the database (mode 0600) and never shown. See docs/environment.md.",
    )
    commands = parser.add_subparsers(dest="env_command", metavar="COMMAND", required=True)
    setter = commands.add_parser("set", help="create or replace a variable")
    setter.add_argument("name", metavar="NAME")
    setter.add_argument("value", metavar="VALUE")
    setter.add_argument("--secret", action="store_true", help="never show its value; mask it in logs")
    add_json_flag(setter)
    listing = commands.add_parser("list", help="list the variables (secrets without their value)")
    add_json_flag(listing)
    remover = commands.add_parser("remove", help="remove a variable")
    remover.add_argument("name", metavar="NAME")
    add_json_flag(remover)
    parser.set_defaults(run=run, stores=stores)


def run(args: argparse.Namespace) -> int:
    access = {"set": CREATE, "list": READ, "remove": WRITE}[args.env_command]
    with args.stores.open(args, access) as store:
        environment = store.environment
        if environment is None:
            raise VariableError("this store keeps no shared variables")
        if args.env_command == "set":
            record = environment.set(args.name, args.value, secret=args.secret)
            if args.json:
                print_json(record)
            else:
                sys.stdout.write(f"{record.name} set{' (secret)' if record.secret else ''}\n")
        elif args.env_command == "remove":
            environment.remove(args.name)
            if args.json:
                print_json({"removed": args.name})
            else:
                sys.stdout.write(f"{args.name} removed\n")
        else:
            records = environment.list()
            if args.json:
                print_json(records)
            else:
                for record in records:
                    value = MASK + " (secret)" if record.secret else present(record.value)
                    sys.stdout.write(f"{record.name}={value}\n")
    return 0
