"""One module per `bench` subcommand: each owns its parser (`register`), the reading
of its flags into one typed options object, and its run.

`register(subparsers)` adds the subcommand and sets `read(args) -> options` (the only
place its flags are read: declared_flags.read_options, which reads the shared option
groups too and checks every value) and `run(options, extra, console) -> exit code` (and `takes_extra` when
arguments after `--` are for the servers it starts). Below commands/ every function
takes those typed options, or plain values, never the namespace
(tests/test_typed_options.py).
"""
