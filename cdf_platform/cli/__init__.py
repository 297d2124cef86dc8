"""`cdf-platform`: the command line entry point (`main`); the commands in `commands`, their
arguments in `arguments`, what they print in `text`. `python -m cdf_platform.cli` runs it too."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from cdf_platform.cli.arguments import build_parser
from cdf_platform.core.errors import CdfPlatformError

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # Dagster's SQLite instance logs its schema migration checks at INFO each time it opens, and
    # py4j each connection to the JVM it opens and closes: neither says anything to a user.
    for chatty in ("alembic", "py4j"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CdfPlatformError as err:
        sys.stderr.write(f"{err}\n")
        return 2
