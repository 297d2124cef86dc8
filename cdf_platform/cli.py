"""`cdf-platform`: the command line entry point."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdf_platform.core.config import RUN_WORKER_ENV, default_spark_log
from cdf_platform.core.errors import CdfPlatformError, RuntimeEnvironmentError
from cdf_platform.core.lake import Lake
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_file import find_spec
from cdf_platform.planning.run_result import RunResult
from cdf_platform.planning.status import pipeline_statuses
from cdf_platform.run import PipelineRunner, RunEntry
from cdf_platform.spark.runtime.session import build_spark_session
from cdf_platform.spark.runtime.session_conf import SparkSettings
from cdf_platform.state.control import ControlTable

if TYPE_CHECKING:
    # What `add_subparsers` returns: the collection each command's parser is added to.
    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]

logger = logging.getLogger("cdf_platform")

STATUS_COLUMNS = (
    ("pipeline_id", "pipeline"),
    ("state", "state"),
    ("watermark", "watermark"),
    ("latest_version", "latest"),
    ("version_lag", "lag (versions)"),
    ("data_version_lag", "lag (data versions)"),
    ("lag_hours", "lag (h)"),
    ("earliest_replayable_version", "earliest replayable"),
    ("headroom_hours", "headroom (h)"),
    ("spec_state", "spec"),
)


# Hours as every other screen writes them (the checks, the overview): 2 decimals.
HOURS_COLUMNS = frozenset({"lag_hours", "headroom_hours"})


def _cell(name: str, value: Any) -> str:
    if value is None:
        return "-"
    return f"{float(value):.2f}" if name in HOURS_COLUMNS else str(value)


def render_status_table(statuses: list[dict[str, Any]]) -> str:
    """A plain-text table of status rows, one line per pipeline, problems listed below; hours
    with 2 decimals."""
    header = [title for _, title in STATUS_COLUMNS]
    body = [[_cell(name, row[name]) for name, _ in STATUS_COLUMNS] for row in statuses]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in [header, *body]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for row in statuses:
        if row["problem"]:
            lines.append(f"\n{row['pipeline_id']}: {row['problem']}")
        elif row.get("spec_state") == "FORWARD_ONLY":
            fields = ", ".join(row["spec_changed_fields"])
            lines.append(
                f"\n{row['pipeline_id']}: spec edits of {fields} taken forward only: rows "
                f"written before keep the previous spec's values until `cdf-platform rebuild "
                f"{row['pipeline_id']}`"
            )
    for row in statuses:
        if row.get("foreign_writes"):
            lines.append(f"\n{row['pipeline_id']}: {_foreign_writes_line(row)}")
    return "\n".join(lines)


def _foreign_writes_line(row: dict[str, Any]) -> str:
    """`foreign writes: v12 UPDATE, v13 DELETE (since rebuild v5)` and what to do."""
    pipeline = row["pipeline_id"]
    return (
        f"foreign writes: {row['foreign_writes_summary']} (since "
        f"{row['foreign_writes_baseline']}): silver may differ from its spec applied to bronze; "
        f"`cdf-platform verify --pipeline {pipeline}` names the keys (`--repair` reconciles "
        f"them), or `cdf-platform rebuild {pipeline}` reconciles all of silver"
    )


def _context(args: argparse.Namespace) -> tuple[list[PipelineSpec], ControlTable, SparkSettings]:
    # The lake, resolved once, here: a relative root means the same folder in every later
    # step, and its storage options travel with the control table and the Spark settings to
    # every reader of a location (obstore, deltalake, Spark's connectors).
    lake = Lake.from_environment(
        lake_root=args.lake_root, control_root=args.control_root, pipelines_file=args.pipelines
    )
    specs = lake.specs()
    control = ControlTable(lake.control_root, storage=lake.storage)
    settings = SparkSettings(
        master=lake.master,
        remote=lake.remote,
        storage_locations=tuple(lake.storage_locations(specs)),
        storage=lake.storage,
        jvm_log=default_spark_log(),
    )
    return specs, control, settings


def _print_result(result: RunResult, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result.as_metadata(), default=str) + "\n")
        return
    figures = result.as_metadata()
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        if value is not None:
            sys.stdout.write(f"{key:<{width}}  {value}\n")


def _cmd_run(args: argparse.Namespace) -> int:
    specs, control, settings = _context(args)
    spec = find_spec(specs, args.pipeline_id)
    runner = PipelineRunner(
        control,
        # This process's JVM serves this one run: lean when it is a small incremental one.
        lambda short: build_spark_session(replace(settings, short_run=short)),
        rerun=lambda spec: f"`cdf-platform {args.command} {spec.id}`",
        entry=RunEntry.at_shell(args.command),  # no permission needed; audited as the job's
    )
    result = runner.run(spec, force_rebuild=args.command == "rebuild")
    _print_result(result, args.json)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    specs, control, _ = _context(args)
    statuses = [status.as_dict() for status in pipeline_statuses(specs, control)]
    if args.json:
        sys.stdout.write(json.dumps(statuses, default=str, indent=2) + "\n")
    else:
        sys.stdout.write(render_status_table(statuses) + "\n")
    healthy = all(s["state"] in ("OK", "NOT_STARTED") for s in statuses)
    return 0 if healthy and not any(s["foreign_writes"] for s in statuses) else 1


def _cmd_verify(args: argparse.Namespace) -> int:
    from cdf_platform.run.verify import verify_pipeline

    specs, control, settings = _context(args)
    if args.pipeline:
        chosen = [find_spec(specs, pipeline_id) for pipeline_id in args.pipeline]
    else:
        chosen = [spec for spec in specs if spec.verify]
    if args.bronze_version is not None and len(chosen) != 1:
        raise CdfPlatformError(
            "--bronze-version is a version of one bronze table",
            action="name one pipeline with --pipeline ID",
        )
    results = [
        verify_pipeline(
            spec,
            control,
            lambda: build_spark_session(settings),
            bronze_version=args.bronze_version,
            repair=args.repair,
        ).as_metadata()
        for spec in chosen
    ]
    if args.json:
        sys.stdout.write(json.dumps(results, default=str, indent=2) + "\n")
    else:
        for result in results:
            sys.stdout.write(render_verification(result) + "\n")
    return 0 if all(r["outcome"] != "DIFFERENT" for r in results) else 1


def render_verification(result: dict[str, Any]) -> str:
    """One verification as text: the outcome and versions, then each named differing key."""
    lines = [
        f"{result['pipeline_id']}: {result['outcome']} (bronze version {result['bronze_version']}"
        f", silver version {result['silver_version']}; {result['differing_keys']} differing "
        f"key(s) of {result['expected_rows']} expected rows)"
    ]
    lines += [f"  {key}" for key in result["sample_keys"]]
    if result["repaired_silver_version"] is not None:
        lines.append(f"  repaired: silver version {result['repaired_silver_version']}")
    if result["message"]:
        lines.append(f"  note: {result['message']}")
    return "\n".join(lines)


def _cmd_engine(args: argparse.Namespace) -> int:
    from cdf_platform.spark.runtime.engine import (
        DEFAULT_ENGINE_REMOTE,
        EngineSettings,
        engine_command,
        engine_conf,
        engine_environment,
        write_properties,
    )
    from cdf_platform.spark.runtime.session import require_java

    _, _, local = _context(args)
    conf = dict(item.split("=", 1) for item in args.conf)
    settings = EngineSettings(
        remote=args.remote or local.remote or DEFAULT_ENGINE_REMOTE,
        master=args.master or local.master,
        driver_memory=args.driver_memory,
        storage_locations=local.storage_locations,
        storage=local.storage,
        conf=conf,
    )
    properties = engine_conf(settings)
    if args.print:
        for key, value in sorted(properties.items()):
            shown = "*****" if _secret(key) else value
            sys.stdout.write(f"{key}={shown}\n")
        return 0
    require_java()
    command = engine_command(settings, write_properties(properties))
    logger.info(
        "starting the engine: Spark Connect on %s (master %s, driver memory %s)",
        settings.remote,
        settings.master,
        settings.driver_memory,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    # The process becomes the server's JVM (spark-submit and spark-class exec it): one PID for
    # a supervisor to watch and to stop.
    os.execve(command[0], command, engine_environment(settings))


def _cmd_run_worker(args: argparse.Namespace) -> int:
    from cdf_platform.orchestration.launch.run_worker import DEFAULT_ADDRESS, parse_address, serve

    address = args.address or os.environ.get(RUN_WORKER_ENV) or DEFAULT_ADDRESS
    try:
        parse_address(address)
    except ValueError as err:
        raise RuntimeEnvironmentError(
            str(err), action=f"set ${RUN_WORKER_ENV} (or --address) to host:port"
        ) from err
    from cdf_platform.definitions import warm_definitions

    serve(address, warm_definitions)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from cdf_platform.supervised import serve

    serve(Path(args.config))
    return 0


def _secret(key: str) -> bool:
    lowered = key.lower()
    return any(word in lowered for word in ("secret", "password", "token", "key", "sas"))


def _conf_entry(value: str) -> str:
    if "=" not in value or not value.split("=", 1)[0].strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return value


def _cmd_demo(args: argparse.Namespace) -> int:
    from cdf_platform.demo.command import run_demo

    return run_demo(
        workdir=Path(args.workdir),
        batch_size=args.batch_size,
        retention_seconds=args.retention_seconds,
        local_s3=args.local_s3,
    )


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
        command.set_defaults(func=_cmd_run)
    status = sub.add_parser(
        "status",
        parents=[common],
        help="per-pipeline watermark, lag, replay window and headroom (no JVM)",
    )
    status.set_defaults(func=_cmd_status)
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
    verify.set_defaults(func=_cmd_verify)


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
    engine.set_defaults(func=_cmd_engine)


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
    worker.set_defaults(func=_cmd_run_worker)


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
    serve.set_defaults(func=_cmd_serve)


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
    demo.set_defaults(func=_cmd_demo)


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


if __name__ == "__main__":
    raise SystemExit(main())
