"""The option groups several subcommands share, read from the parsed namespace: each
field's check runs as its group is read (declared_flags.read_options), so a bad value
stops the command before anything starts. The flags are declared once, as the fields."""

from __future__ import annotations

import argparse

from sgl_eagle_ext.common.declared_flags import read_options
from sgl_eagle_ext.tools.bench import options
from sgl_eagle_ext.tools.bench import workload as wl


def connection(args: argparse.Namespace) -> options.ConnectionOptions:
    return read_options(options.ConnectionOptions, args)


def requests(args: argparse.Namespace) -> options.RequestOptions:
    return read_options(options.RequestOptions, args)


def records(args: argparse.Namespace) -> options.RecordOptions:
    return read_options(options.RecordOptions, args)


def sweep(args: argparse.Namespace) -> options.SweepOptions:
    """The levels stay as given: levels.load_levels resolves them when the run starts."""
    return read_options(options.SweepOptions, args)


def workload(args: argparse.Namespace) -> wl.WorkloadOptions:
    return read_options(wl.WorkloadOptions, args)
