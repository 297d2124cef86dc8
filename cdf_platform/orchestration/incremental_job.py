"""`incremental_job`: bring silver assets up to date with their bronze tables.

Each silver asset runs in the mode its plan picks (incremental, initial load, fallback rebuild,
or a no-op that never starts Spark), followed by its `consumer_lag` and `replay_window` checks.
The incremental sensor launches it for one pipeline at a time.
"""

import dagster as dg

from cdf_platform.orchestration.silver import SILVER_PREFIX

INCREMENTAL_JOB = "incremental_job"

incremental_job = dg.define_asset_job(
    INCREMENTAL_JOB,
    # A group selection includes the checks of the selected assets.
    selection=dg.AssetSelection.groups(SILVER_PREFIX),
    description="Apply new bronze versions to silver (per pipeline: incremental MERGE, initial "
    "load, fallback rebuild, or nothing), then evaluate silver's checks.",
)
