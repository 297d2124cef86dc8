"""`checks_job` and `checks_schedule`: evaluate silver's checks without materializing anything.

The checks read logs only, so this job never starts Spark. Each evaluation stores numeric lag
and headroom figures (plotted on the checks' pages) and feeds the rebuild sensor.
"""

import dagster as dg

from cdf_platform.orchestration.silver import SILVER_PREFIX

CHECKS_JOB = "checks_job"
CHECKS_SCHEDULE = "checks_schedule"

_SILVER = dg.AssetSelection.groups(SILVER_PREFIX)

checks_job = dg.define_asset_job(
    CHECKS_JOB,
    # The checks that target silver assets, without the assets themselves.
    selection=_SILVER - _SILVER.without_checks(),
    description="Evaluate consumer_lag and replay_window on every silver asset (no Spark).",
)

checks_schedule = dg.ScheduleDefinition(
    name=CHECKS_SCHEDULE,
    job=checks_job,
    # Often enough that a window shrinking by hours is seen long before it is lost, and that the
    # rebuild sensor reacts within minutes; each evaluation costs well under a second.
    cron_schedule="*/15 * * * *",
    description="Evaluate silver's checks every 15 minutes.",
)
