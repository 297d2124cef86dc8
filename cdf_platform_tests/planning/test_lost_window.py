"""A lost window's text says which versions left it and where it starts now, consistently: the
versions before the earliest replayable one are gone, those from it on are still readable."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from cdf_platform.core.errors import ReplayWindowLost
from cdf_platform.core.sql import sql_path
from cdf_platform.planning.lost_window import replay_problem
from cdf_platform.window.replay_window import compute_replay_window
from cdf_platform_testkit.synthetic_log import commit_file
from cdf_platform_tests.window.test_replay_window import HOUR, set_age


def test_a_lost_window_names_the_versions_gone_and_where_the_window_starts_now(
    spark: SparkSession, lake: Path
) -> None:
    path = str(lake / "orders")
    table = sql_path(path)
    spark.sql(
        f"CREATE TABLE {table} (id INT) USING DELTA TBLPROPERTIES ("
        "'delta.enableChangeDataFeed' = 'true', "
        "'delta.deletedFileRetentionDuration' = 'interval 1 hours')"
    )
    for i in range(1, 8):
        spark.sql(f"INSERT INTO {table} VALUES ({i})")  # versions 1..7
    for version in range(6):
        set_age(commit_file(path, version), 2 * HOUR)  # 0..5 older than the retention

    window = compute_replay_window(path)
    assert (window.earliest_replayable_version, window.latest_version) == (6, 7)
    problem = replay_problem("orders", path, window, 4, table_role="bronze")
    assert isinstance(problem, ReplayWindowLost)
    text = str(problem)
    assert "bronze versions 4..5 left the replay window, which now starts at version 6" in text
    assert "(bronze is at 7)" in text
    # Never that the versions still in the window (6 and 7) cannot be replayed.
    assert "4..7" not in text, text
