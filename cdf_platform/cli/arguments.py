"""The arguments of `cdf-platform`: the lake's options every pipeline command takes, and each
command's parser, bound to its function in `commands`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from cdf_platform.cli import commands
from cdf_platform.core.config import RUN_WORKER_ENV

if TYPE_CHECKING:
    # What `add_subparsers` returns: the collection each command's parser is added to.
    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def _conf_entry(value: str) -> str:
    if "=" not in value or not value.split("=", 1)[0].strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return value


def _lake_options() -> argparse.ArgumentParser:
    """The options every command on the lake's pipelines takes: where the pipelines file, the
    lake and the control tables are, and whether to print JSON."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--pipelines",
        default=None,
        help="pipelines YAML file (default: $CDF_PIPELINES_FILE or ./pipelines.yaml)",
    )
    common.add_argument(
        "--lake-root",
        default=None,
        help="lake root for relative locations (default: $CDF_LAKE_ROOT or ./lake; relative: "
        "to the working directory)",
    )
    common.add_argument(
        "--control-root",
        default=None,
        help="control tables folder (default: $CDF_CONTROL_ROOT or <lake root>/_control)",
    )
    common.add_argument("--json", action="store_true", help="print JSON")
    return common


def _add_pipeline_commands(sub: _Commands, common: argparse.ArgumentParser) -> None:
    """`run`, `rebuild` (one pipeline), `status` and `verify` (every pipeline, or those
    named)."""
    for name, text in (
        ("run", "one incremental run of a pipeline, with its configured fallback"),
        ("rebuild", "reconcile silver from a pinned bronze snapshot and stamp that watermark"),
    ):
        command = sub.add_parser(name, parents=[common], help=text, description=text)
        command.add_argument("pipeline_id")
        command.set_defaults(func=commands.cmd_run)
    status = sub.add_parser(
        "status",
        parents=[common],
        help="per-pipeline watermark, lag, replay window and headroom (no JVM)",
    )
    status.set_defaults(func=commands.cmd_status)
    text = "compare silver with its spec applied to a pinned bronze version; --repair reconciles"
    verify = sub.add_parser("verify", parents=[common], help=text, description=text)
    verify.add_argument(
        "--pipeline",
        action="append",
        default=[],
        metavar="ID",
        help="a pipeline to verify (repeatable; default: every pipeline whose spec has verify)",
    )
    verify.add_argument(
        "--bronze-version",
        type=int,
        default=None,
        metavar="N",
        help="compare with bronze at N (one pipeline; default: silver's watermark)",
    )
    verify.add_argument(
        "--repair",
        action="store_true",
        help="reconcile a silver that differs (only the differing keys change)",
    )
    verify.set_defaults(func=commands.cmd_verify)


def _add_engine_command(sub: _Commands, common: argparse.ArgumentParser) -> None:
    """`engine`: the warm Spark Connect server."""
    engine = sub.add_parser(
        "engine",
        parents=[common],
        help="run the warm engine: a Spark Connect server with Delta for the lake's runs",
        description="Run Spark's Spark Connect server with Delta and the lake's object-store "
        "connectors, in the foreground (the process becomes the server's JVM). Every process "
        "with $CDF_SPARK_REMOTE pointing at it runs its Spark work there.",
    )
    engine.add_argument(
        "--remote",
        default=None,
        help="the URL to serve, sc://host:port (default: $CDF_SPARK_REMOTE, else "
        "sc://127.0.0.1:15002)",
    )
    engine.add_argument(
        "--master",
        default=None,
        help="the engine's Spark master (default: $CDF_SPARK_MASTER or local[*])",
    )
    engine.add_argument("--driver-memory", default="4g", help="the engine's heap (default 4g)")
    engine.add_argument(
        "--conf",
        action="append",
        default=[],
        type=_conf_entry,
        metavar="KEY=VALUE",
        help="a Spark conf entry for the engine (repeatable); wins over everything else",
    )
    engine.add_argument(
        "--print", action="store_true", help="print the engine's conf (secrets masked) and exit"
    )
    engine.set_defaults(func=commands.cmd_engine)


def _add_run_worker_command(sub: _Commands) -> None:
    """`run-worker`: the warm run worker Dagster's runs are forked from."""
    worker = sub.add_parser(
        "run-worker",
        help="run the warm run worker: starts each Dagster run by forking a warm process",
        description="Start each Dagster run that the instance's WarmRunLauncher hands it by "
        "forking this process, which has Dagster, the platform and the Spark Connect client "
        "imported (deploy/dagster.yaml names the launcher).",
    )
    worker.add_argument(
        "--address",
        default=None,
        help=f"host:port to listen on (default: ${RUN_WORKER_ENV}, else 127.0.0.1:4010)",
    )
    worker.set_defaults(func=commands.cmd_run_worker)


def _add_serve_command(sub: _Commands) -> None:
    """`serve`: the whole production deployment on one machine, under supervisord."""
    from cdf_platform.supervised import SUPERVISORD_CONF

    text = "run the production deployment on this machine under supervisord"
    serve = sub.add_parser(
        "serve",
        help=text,
        description="Check the deployment's environment (docs/production.md), then run "
        "supervisord in the foreground (the process becomes it): it starts the warm engine, the "
        "run worker, the code server, the webserver and the daemon, restarts any that exits, "
        "and stops them all on SIGTERM. Logs and the control socket are in "
        "$DAGSTER_HOME/supervisor.",
    )
    serve.add_argument(
        "--config",
        default=str(SUPERVISORD_CONF),
        help="supervisord's configuration (default: the checkout's deploy/supervisord.conf)",
    )
    serve.set_defaults(func=commands.cmd_serve)


def _add_demo_command(sub: _Commands) -> None:
    """`demo`: the end-to-end demo on a lake of its own."""
    demo = sub.add_parser("demo", help="run the end-to-end demo on a local (or local S3) lake")
    demo.add_argument("--batch-size", type=int, default=200, help="rows per bronze batch")
    demo.add_argument(
        "--workdir", default=".demo", help="the demo's lake and Dagster instance (wiped first)"
    )
    demo.add_argument(
        "--retention-seconds",
        type=int,
        default=150,
        help="bronze deletedFileRetentionDuration during the outage, the demo's compression of "
        "a week: at least 120 for the headroom plot to shrink visibly (hours, 2 decimals)",
    )
    demo.add_argument(
        "--local-s3",
        action="store_true",
        help="keep the demo's lake in a local S3 server (moto, from the dev extras)",
    )
    demo.set_defaults(func=commands.cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `cdf-platform`."""
    parser = argparse.ArgumentParser(
        prog="cdf-platform",
        description="Keep Delta silver tables in step with bronze through Change Data Feed.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    common = _lake_options()
    _add_pipeline_commands(sub, common)
    _add_engine_command(sub, common)
    _add_run_worker_command(sub)
    _add_serve_command(sub)
    _add_demo_command(sub)
    return parser
