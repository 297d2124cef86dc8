"""Scenario (d) on an object store: the replay window and `status --json` of one bronze log on a
local S3 server against the same log on local disk, at 100, 1,000, 2,000 and 5,000 commits.

The log is the one scenario (d) uses (two delta-spark commits, then synthetic commits modelled on
them), written locally and copied to S3 as it grows. Per size it records the JVM-free window
check in process (local; S3 with an empty commit cache, then warm: the steady state of checks
and sensors, which only fetch new commits) with the S3 requests and read sweeps the storage
layer made, and `cdf-platform status --json` in a subprocess that cannot find Java, cold and
warm, with the requests the server answered during it (counted in the server's access log).

The S3 server is the project's (`LocalS3Server`: moto's S3 application on granian). The cold
window and cold `status` are also measured against `moto_server`, moto's own Werkzeug server,
which opens a connection and a thread per request: the same requests, the server's cost. And
the cold window is measured through a proxy that gives every request S3's round trip
(`S3_ROUND_TRIP_SECONDS`), with 32 and 64 GETs in flight, and with the log read in fixed blocks
of 64 commits against read-ahead in doubling blocks. Figures go to
`bench/results/object_store.json`.

Usage:
    python -m bench.object_store                      # 100, 1,000, 2,000, 5,000 commits, 3 runs
    python -m bench.object_store --sizes 100 2000 --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.probes import cli_via_subprocess, cpu_seconds
from bench.replay_check import create_log_table
from bench.workload import spec_for
from cdf_platform.core.cloud_options import StoreOptions
from cdf_platform.core.storage import ENVIRONMENT_ONLY, storage_entry
from cdf_platform.deltalog.commit_cache import CACHE_ENV, CommitCache
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.deltalog.table_storage import ObjectStorage, open_storage
from cdf_platform.services.local_s3 import LocalS3Server
from cdf_platform.spark.runtime.session import build_spark_session
from cdf_platform.spark.runtime.session_conf import SparkSettings
from cdf_platform.window.replay_window import assess_consumer, compute_replay_window
from cdf_platform_testkit.lake import write_pipelines
from cdf_platform_testkit.latency_proxy import LatencyProxy
from cdf_platform_testkit.objects import upload_folder
from cdf_platform_testkit.processes import descendants
from cdf_platform_testkit.synthetic_log import write_synthetic_commits

RESULTS = Path(__file__).parent / "results" / "object_store.json"
# A GET's round trip on S3 is 20-50 ms; the latency rows put this much before every request.
S3_ROUND_TRIP_SECONDS = 0.025


class BlockReads(DeltaLog):
    """The log reader without read-ahead: every miss reads a block of FETCH_BATCH commits, as
    it did before blocks grew (the "before" of the latency rows)."""

    MAX_READ_AHEAD = DeltaLog.FETCH_BATCH


class MotoServer(LocalS3Server):
    """moto's own `moto_server` (Werkzeug's development server) instead of the project's."""

    # Werkzeug's access-log line, which it may color: `"GET /bucket/key HTTP/1.1" 200 -`.
    request_line = re.compile(r'"(?:\x1b\[[0-9;]*m)?(?:GET|PUT|HEAD|POST|DELETE) /')

    def command(self) -> list[str]:
        """`moto_server` beside this interpreter."""
        moto_server = Path(sys.executable).parent / "moto_server"
        return [str(moto_server), "-H", "127.0.0.1", "-p", str(self.port)]


def window_check(path: str, cache: Path | None = None) -> tuple[float, int, int, int]:
    """The platform's check (exact window, a consumer halfway): seconds, lists, gets, sweeps.

    `cache` is the commit cache folder for an object-store path (None: local, no cache).
    """
    started = time.perf_counter()
    storage = (
        ObjectStorage(path, None, cache=CommitCache(cache))
        if cache
        else open_storage(path, ENVIRONMENT_ONLY)
    )
    window = compute_replay_window(path, log=DeltaLog(path, storage))
    assert assess_consumer(window, window.latest_version // 2).replayable
    requests = storage.requests
    return time.perf_counter() - started, requests.lists, requests.gets, requests.batches


def latency_check(
    path: str, endpoint: str, cache: Path, concurrency: int, reader: type[DeltaLog]
) -> dict[str, Any]:
    """The cold window check through the latency proxy at `endpoint`: seconds, GETs, sweeps."""
    started = time.perf_counter()
    through_proxy = storage_entry(path, StoreOptions(endpoint=endpoint), origin="the bench")
    storage = ObjectStorage(
        path, options=through_proxy, cache=CommitCache(cache), concurrency=concurrency
    )
    window = compute_replay_window(path, log=reader(path, storage))
    assert assess_consumer(window, window.latest_version // 2).replayable
    return {
        "reads": "blocks of 64" if reader is BlockReads else "read-ahead",
        "concurrency": concurrency,
        "seconds": round(time.perf_counter() - started, 4),
        "gets": storage.requests.gets,
        "sweeps": storage.requests.batches,
    }


def server_cpu_seconds(server: LocalS3Server) -> float:
    """CPU time (user + system) the server's processes have used so far."""
    assert server.pid is not None, "the server is not running"
    return sum(cpu_seconds(pid) for pid in [server.pid, *descendants(server.pid)])


def status_cli(
    pipelines: Path, lake_root: str, server: LocalS3Server | None, cache: Path
) -> tuple[float, int, float]:
    """`status --json` in a subprocess without Java (commit cache `cache`): seconds, and the
    requests the server answered and the CPU seconds it used during it."""
    os.environ[CACHE_ENV] = str(cache)
    before = server.request_count() if server else 0
    cpu_before = server_cpu_seconds(server) if server else 0.0
    seconds, returncode, stdout, stderr, java_seen = cli_via_subprocess(
        "status", "--json", "--pipelines", str(pipelines), "--lake-root", lake_root
    )
    assert returncode == 0 and not java_seen, (returncode, java_seen, stderr[-2000:])
    assert json.loads(stdout), stdout
    if server is None:
        return seconds, 0, 0.0
    return seconds, server.request_count() - before, server_cpu_seconds(server) - cpu_before


def median(values: list[float]) -> float:
    """The median, rounded for the figures file."""
    return round(statistics.median(values), 4)


def run(sizes: list[int], reps: int, out: Path) -> dict[str, Any]:
    """Measure every size; write and return the figures."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cdf-bench-s3-") as scratch, ExitStack() as servers:
        server = servers.enter_context(LocalS3Server())
        reference = servers.enter_context(MotoServer())
        os.environ.update(server.env())
        workdir = Path(scratch)
        spark = build_spark_session(SparkSettings(master="local[2]", shuffle_partitions=2))
        local = str(workdir / "long_log")
        create_log_table(spark, local)
        spark.stop()
        remote = f"s3://{server.bucket}/bench/long_log"
        local_pipelines, remote_pipelines = workdir / "local.yaml", workdir / "s3.yaml"
        write_pipelines(local_pipelines, [spec_for(local, workdir / "silver")])
        remote_spec = spec_for(remote, workdir / "unused")
        remote_spec = remote_spec.model_copy(update={"target": f"{remote}_silver"})
        write_pipelines(remote_pipelines, [remote_spec])
        written = 1
        caches = iter(range(1_000_000))

        def empty_cache() -> Path:
            return workdir / f"commit-cache-{next(caches)}"

        def on(target: LocalS3Server) -> None:
            """Point this process and the CLIs it starts at `target`."""
            os.environ["AWS_ENDPOINT_URL"] = target.endpoint

        for size in sorted(sizes):
            write_synthetic_commits(local, written + 1, size - 1)
            written = size - 1
            on(server)
            upload_folder(local, remote)
            window_check(local)  # warm the page cache and the interpreter alike
            local_runs = [window_check(local) for _ in range(reps)]
            cold_runs = [window_check(remote, empty_cache()) for _ in range(reps)]
            warm_cache = empty_cache()
            window_check(remote, warm_cache)
            warm_runs = [window_check(remote, warm_cache) for _ in range(reps)]
            local_status = [
                status_cli(local_pipelines, str(workdir), None, empty_cache()) for _ in range(reps)
            ]
            cold_status = [
                status_cli(remote_pipelines, remote, server, empty_cache()) for _ in range(reps)
            ]
            warm_status = [status_cli(remote_pipelines, remote, server, warm_cache)]
            warm_status += [status_cli(remote_pipelines, remote, server, warm_cache)]
            with LatencyProxy(server.port, S3_ROUND_TRIP_SECONDS) as proxy:
                latency = [
                    latency_check(remote, proxy.endpoint, empty_cache(), concurrency, reader)
                    for reader in (BlockReads, DeltaLog)
                    for concurrency in (32, 64)
                ]
            on(reference)
            upload_folder(local, remote)
            reference_window = window_check(remote, empty_cache())
            reference_status = status_cli(remote_pipelines, remote, reference, empty_cache())
            rows.append(
                {
                    "commits": size,
                    "window_local_s": median([r[0] for r in local_runs]),
                    "window_s3_cold_s": median([r[0] for r in cold_runs]),
                    "window_s3_cold_requests": cold_runs[-1][1] + cold_runs[-1][2],
                    "window_s3_cold_sweeps": cold_runs[-1][3],
                    "window_s3_warm_s": median([r[0] for r in warm_runs]),
                    "window_s3_warm_requests": warm_runs[-1][1] + warm_runs[-1][2],
                    "status_cli_local_s": median([s[0] for s in local_status]),
                    "status_cli_s3_cold_s": median([s[0] for s in cold_status]),
                    "status_cli_s3_cold_max_s": round(max(s[0] for s in cold_status), 4),
                    "status_cli_s3_cold_requests": cold_status[-1][1],
                    "status_cli_s3_cold_server_cpu_s": median([s[2] for s in cold_status]),
                    "status_cli_s3_warm_s": median([s[0] for s in warm_status]),
                    "status_cli_s3_warm_requests": warm_status[-1][1],
                    "moto_server_window_cold_s": round(reference_window[0], 4),
                    "moto_server_status_cli_cold_s": round(reference_status[0], 4),
                    "moto_server_status_cli_cold_requests": reference_status[1],
                    "window_s3_cold_with_round_trip": latency,
                }
            )
    figures = {
        "scenario": "replay window and status --json, local disk vs a local S3 server "
        "(moto's S3 application on granian; moto_server, moto's Werkzeug server, for reference)",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "reps": reps,
        "round_trip_s": S3_ROUND_TRIP_SECONDS,
        "rows": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    return figures


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 2_000, 5_000])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    figures = run(args.sizes, args.reps, args.out)
    for row in figures["rows"]:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
