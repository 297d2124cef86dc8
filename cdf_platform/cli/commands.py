"""The commands of `cdf-platform`, one function each, called with the parsed arguments: run and
rebuild, status, verify, the warm engine, the run worker, the supervised deployment, the demo."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path

from cdf_platform.cli.text import print_result, render_status_table, render_verification
from cdf_platform.core.config import RUN_WORKER_ENV, default_spark_log
from cdf_platform.core.errors import CdfPlatformError, RuntimeEnvironmentError
from cdf_platform.core.lake import Lake
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_file import find_spec
from cdf_platform.planning.status import pipeline_statuses
from cdf_platform.run import PipelineRunner, RunEntry
from cdf_platform.spark.runtime.session import build_spark_session
from cdf_platform.spark.runtime.session_conf import SparkSettings
from cdf_platform.state.control import ControlTable

logger = logging.getLogger("cdf_platform")


def lake_context(
    args: argparse.Namespace,
) -> tuple[list[PipelineSpec], ControlTable, SparkSettings]:
    """The lake the arguments name: its pipelines, control table and Spark settings.

    Resolved once, here: a relative root means the same folder in every later step, and the
    lake's storage options travel with the control table and the Spark settings to every reader
    of a location (obstore, deltalake, Spark's connectors)."""
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


def cmd_run(args: argparse.Namespace) -> int:
    specs, control, settings = lake_context(args)
    spec = find_spec(specs, args.pipeline_id)
    runner = PipelineRunner(
        control,
        # This process's JVM serves this one run: lean when it is a small incremental one.
        lambda short: build_spark_session(replace(settings, short_run=short)),
        rerun=lambda spec: f"`cdf-platform {args.command} {spec.id}`",
        entry=RunEntry.at_shell(args.command),  # no permission needed; audited as the job's
    )
    result = runner.run(spec, force_rebuild=args.command == "rebuild")
    print_result(result, args.json)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    specs, control, _ = lake_context(args)
    statuses = [status.as_dict() for status in pipeline_statuses(specs, control)]
    if args.json:
        sys.stdout.write(json.dumps(statuses, default=str, indent=2) + "\n")
    else:
        sys.stdout.write(render_status_table(statuses) + "\n")
    healthy = all(s["state"] in ("OK", "NOT_STARTED") for s in statuses)
    return 0 if healthy and not any(s["foreign_writes"] for s in statuses) else 1


def cmd_verify(args: argparse.Namespace) -> int:
    from cdf_platform.run.verify import verify_pipeline

    specs, control, settings = lake_context(args)
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


def _secret(key: str) -> bool:
    lowered = key.lower()
    return any(word in lowered for word in ("secret", "password", "token", "key", "sas"))


def cmd_engine(args: argparse.Namespace) -> int:
    from cdf_platform.spark.runtime.engine import (
        DEFAULT_ENGINE_REMOTE,
        EngineSettings,
        engine_command,
        engine_conf,
        engine_environment,
        write_properties,
    )
    from cdf_platform.spark.runtime.session import require_java

    _, _, local = lake_context(args)
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


def cmd_run_worker(args: argparse.Namespace) -> int:
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


def cmd_serve(args: argparse.Namespace) -> int:
    from cdf_platform.supervised import serve

    serve(Path(args.config))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from cdf_platform.demo.command import run_demo

    return run_demo(
        workdir=Path(args.workdir),
        batch_size=args.batch_size,
        retention_seconds=args.retention_seconds,
        local_s3=args.local_s3,
    )
