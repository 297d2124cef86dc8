"""A lake on an emulated store, written without a JVM: bronze with its change feed, silver
stamped with a watermark, the control tables, and the pipelines file naming them.

- Bronze is an `orders` table as `deltalake` writes it (the kit's `write_orders_batch`):
  version 0 creates it with the change feed on, version 1 inserts, versions 2 and 3 are MERGEs
  of updates, inserts and deletes whose changes sit in `_change_data` files.
- Silver is what a platform run leaves in silver's log for the status, the checks and the
  sensors to read: the owner property, the Delta transaction (app id = pipeline id, version =
  watermark) and the run's `userMetadata`, here committed by `deltalake` instead of Spark's
  MERGE (the same actions, read by the same `deltalake` calls).
- The control tables hold the pipeline's state row, as a run writes it.

Where `deltalake` can commit to the store (Azurite) every table is written there directly;
elsewhere (fake-gcs-server) it is written to a local folder and uploaded, file by file.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.deltalog.arrow_rows import arrow_table
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.state.control import ControlTable
from cdf_platform.state.watermark import OWNER_PROPERTY, app_id, user_metadata
from cdf_platform_testkit.objects import delete_object
from cdf_platform_testkit.orders_bronze import write_orders_batch

PIPELINE = "orders"
BRONZE_VERSIONS = 4  # 0 create, 1 insert, 2 and 3 MERGEs
# Silver applied bronze's first insert: versions 2 and 3 are still to be read from the feed.
WATERMARK = 1
BATCH_ROWS = 20


@dataclass(frozen=True)
class EmulatedStore:
    """An emulated object store as the tests use it.

    Attributes:
        name: `adls` or `gcs` (the test ids).
        root: The container or bucket URI (`az://lake`, `gs://lake`).
        deltalake_commits: Whether `deltalake` can commit there (else tables are uploaded).
        upload_folder: Copies a local folder to a folder URI of the store; returns the count.
    """

    name: str
    root: str
    deltalake_commits: bool
    upload_folder: Callable[[Path, str], int]

    def fresh_lake(self) -> str:
        """A lake root of its own for one test."""
        return f"{self.root}/{uuid.uuid4().hex[:12]}"

    def place(self, uri: str, write: Callable[[str], None], scratch: Path) -> None:
        """Have `write` write the table (or folder) `uri`: in place when `deltalake` commits
        to this store, else into a folder under `scratch` that is then uploaded to `uri`."""
        if self.deltalake_commits:
            write(uri)
            return
        local = scratch / uuid.uuid4().hex[:8]
        write(str(local))
        self.upload_folder(local, uri)


@dataclass(frozen=True)
class EmulatedLake:
    """The lake one test works on."""

    layout: LakeLayout
    spec: PipelineSpec
    control: ControlTable
    source_table_id: str


def write_bronze(location: str, *, checkpoint: bool = False) -> None:
    """Bronze `orders` at `location`: BRONZE_VERSIONS commits (see the module docstring), and
    a checkpoint of the latest version with `checkpoint`."""
    for _ in range(BRONZE_VERSIONS - 1):
        write_orders_batch(location, batch_size=BATCH_ROWS)
    if checkpoint:
        from deltalake import DeltaTable

        DeltaTable(location).create_checkpoint()


def write_silver(target: str, pipeline_id: str, watermark: int, source_table_id: str) -> None:
    """Silver at `target` as a run of `pipeline_id` through bronze `watermark` leaves it."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    run = user_metadata(
        pipeline_id=pipeline_id,
        mode="initial_load",
        end_version=watermark,
        source_table_id=source_table_id,
        generation=0,
    )
    write_deltalake(
        target,
        arrow_table({"order_id": "long"}, [{"order_id": key} for key in range(1, 4)]),
        configuration={"delta.enableChangeDataFeed": "true"},
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": run},
            app_transactions=[Transaction(app_id=app_id(pipeline_id, 0), version=watermark)],
        ),
    )
    # deltalake takes only `delta.*` keys at creation; the owner property is set after.
    DeltaTable(target).alter.set_table_properties(
        {OWNER_PROPERTY: pipeline_id}, raise_if_not_exists=False
    )


def write_state(root: str, spec: PipelineSpec, watermark: int, source_table_id: str) -> None:
    """The control tables under `root` with `spec`'s state row after a run through
    `watermark`."""
    ControlTable(root).upsert_state(
        {
            "pipeline_id": spec.id,
            "source": spec.source,
            "target": spec.target,
            "source_table_id": source_table_id,
            "generation": 0,
            "last_commit_version": watermark,
            "last_success_at": datetime.now(UTC),
            "last_mode": "initial_load",
            "status": "SUCCESS",
        }
    )


def build_lake(
    store: EmulatedStore, scratch: Path, *, checkpoint: bool = False, **spec_fields: object
) -> EmulatedLake:
    """Bronze (checkpointed at its latest version with `checkpoint`), silver at WATERMARK and
    the control state on a fresh lake of `store`, and a pipelines file (under `scratch`) naming
    them relative to that lake; `spec_fields` are added to the pipeline's spec."""
    pipelines = scratch / "pipelines.yaml"
    pipeline = {"id": PIPELINE, "source": "bronze/orders", "target": "silver/orders"}
    pipelines.write_text(
        yaml.safe_dump({"pipelines": [{**pipeline, "keys": ["order_id"], **spec_fields}]}),
        encoding="utf-8",
    )
    layout = LakeLayout(lake_root=store.fresh_lake(), pipelines_file=str(pipelines))
    spec, control = layout.spec(PIPELINE), layout.control()
    store.place(spec.source, lambda b: write_bronze(b, checkpoint=checkpoint), scratch)
    table_id = DeltaLog(spec.source).table_id()
    store.place(spec.target, lambda t: write_silver(t, spec.id, WATERMARK, table_id), scratch)
    store.place(control.root, lambda r: write_state(r, spec, WATERMARK, table_id), scratch)
    return EmulatedLake(layout, spec, control, table_id)


def vacuum_change_files(table: str, version: int) -> list[str]:
    """Delete from the store the files a change-feed read of `version` needs (its
    `_change_data` files), as a VACUUM past their retention does; their names."""
    needed = [action.path for action in DeltaLog(table).commit(version).files_read_by_cdf()]
    for name in needed:
        delete_object(table, name)
    return needed
