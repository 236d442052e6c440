"""One module per `bench` subcommand: each owns its parser (`register`) and its run.

`register(subparsers)` adds the subcommand and sets `run(args, extra, console) -> exit
code` (and `takes_extra` when arguments after `--` are for the servers it starts).
"""
