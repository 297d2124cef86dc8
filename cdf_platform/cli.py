"""`cdf-platform`: the command line entry point."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from cdf_platform.engine.errors import CdfPlatformError

logger = logging.getLogger("cdf_platform")

DAGSTER_HOME_ENV = "DAGSTER_HOME"


def _ensure_dagster_home() -> Path:
    """Use $DAGSTER_HOME, else `.dagster_home/` under the working directory."""
    home = Path(os.environ.get(DAGSTER_HOME_ENV) or Path.cwd() / ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ[DAGSTER_HOME_ENV] = str(home)
    return home


def _cmd_demo(args: argparse.Namespace) -> int:
    home = _ensure_dagster_home()
    from cdf_platform.demo import run_demo

    return run_demo(dagster_home=home, batch_size=args.batch_size)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `cdf-platform`."""
    parser = argparse.ArgumentParser(
        prog="cdf-platform",
        description="Keep Delta silver tables in step with bronze through Change Data Feed.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the end-to-end demo on a local lake")
    demo.add_argument("--batch-size", type=int, default=500, help="rows per bronze batch")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CdfPlatformError as err:
        sys.stderr.write(f"{err}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
