"""README.md and the documentation pages (docs/) stay true: their example spec validates, their
commands and options exist, and their Python examples run as written."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from deltalake.exceptions import DeltaProtocolError
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

from cdf_platform.cli import build_parser
from cdf_platform.core.config import JVM_FREE_MERGE_MAX_ROWS_ENV
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_file import parse_specs, parse_storage
from cdf_platform.core.sql import sql_path
from cdf_platform.run import PipelineRunner
from cdf_platform.spark.runtime.small_steps import COPY_ON_WRITE_CONF
from cdf_platform_testkit.spark_conf import SessionsWithConf
from cdf_platform_tests.bronze import control_for, make_bronze, spark_rows, spec_for, sql

README = Path(__file__).resolve().parents[1] / "README.md"
# What users read: README and the documentation site's pages.
PAGES = [README, *sorted((README.parent / "docs").glob("*.md"))]


def _text() -> str:
    return "\n".join(page.read_text() for page in PAGES)


EXAMPLES_FILE = Path(__file__).resolve().parents[1] / "examples" / "incremental_assets.py"


def _function(source: str, name: str) -> str:
    """The function `name` of Python `source`, as its syntax tree (decorators, body, and
    docstring; comments and layout aside)."""
    (found,) = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == name
    ]
    found.decorator_list = []  # the page names the input dict for itself
    return ast.dump(found)


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", _text(), flags=re.S)


def _fenced_blocks() -> list[str]:
    """Every fenced block of the pages, in order (fences paired line by line)."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in _text().splitlines():
        if not line.startswith("```"):
            if current is not None:
                current.append(line)
        elif current is None:
            current = []
        else:
            blocks.append("\n".join(current) + "\n")
            current = None
    return blocks


def test_readme_is_the_front_page_and_the_site_has_every_page() -> None:
    """README is why, quickstart, concepts and links (under 250 lines); every page it links
    and every page under docs/ is in the site's navigation."""
    text = README.read_text()
    assert len(text.splitlines()) < 250
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", text))
    config = yaml.safe_load((README.parent / "mkdocs.yml").read_text())
    nav = set()
    for entry in config["nav"]:
        for value in entry.values():
            items = value if isinstance(value, list) else [{"": value}]
            nav |= {page for item in items for page in item.values()}
    pages = {page.name for page in PAGES[1:]}
    assert linked <= pages
    assert nav == pages


def test_readme_example_spec_is_valid_and_uses_every_field() -> None:
    (example,) = [b for b in _blocks("yaml") if b.startswith("pipelines:")]
    specs = parse_specs(yaml.safe_load(example), origin="docs")
    assert [spec.id for spec in specs] == ["orders", "customers_history", "accounts"]
    # The SCD2 fields only go with `history: scd2`: the second pipeline shows them.
    documented = {field for entry in yaml.safe_load(example)["pipelines"] for field in entry}
    assert documented == set(PipelineSpec.model_fields)


def test_readme_storage_example_is_valid() -> None:
    (example,) = [b for b in _blocks("yaml") if b.startswith("storage:")]
    config = parse_storage(yaml.safe_load(example), origin="docs")
    entry = config.entry_for("s3a://silver-lake/lake/silver/orders")
    assert entry is not None and entry.options.allow_http is True
    assert [e.store.value for e in config.entries] == ["S3", "S3", "Azure"]


def test_readme_commands_exist() -> None:
    parser = build_parser()
    commands = [
        line.split("#")[0].split()
        for block in _blocks("bash")
        for line in block.splitlines()
        if line.startswith("cdf-platform ")
    ]
    assert commands, "the pages document cdf-platform commands"
    for words in commands:
        args = [w for w in words[1:] if not w.startswith("[")]
        args = ["some_pipeline" if w == "PIPELINE_ID" else w for w in args]
        parsed = parser.parse_args(args)
        assert parsed.command == args[0]
    for option in ("--pipelines", "--lake-root", "--control-root", "--json"):
        assert option in _text()
        assert parser.parse_args(
            ["status", option, "x"] if option != "--json" else ["status", option]
        )


def test_readme_make_targets_exist() -> None:
    makefile = (README.parent / "Makefile").read_text()
    for target in re.findall(r"^make (\w+)", "\n".join(_blocks("bash")), flags=re.M):
        assert re.search(rf"^{target}:", makefile, flags=re.M), target
    assert (README.parent / ".ci" / "run").read_text().strip().endswith("make test")


def test_readme_layout_matches_the_package_tree() -> None:
    """Every package and top-level module of cdf_platform is in the documented Layout, and nothing
    that is not."""
    (layout,) = [b for b in _fenced_blocks() if b.startswith("cdf_platform/\n")]
    documented = set()
    for line in layout.splitlines()[1:]:
        if not line.startswith("  ") or line.startswith("   "):
            if not line.startswith(" "):
                break  # the tree of cdf_platform/ ends at the next top-level entry
            continue  # a continuation line of a description
        documented.add(line.split()[0].rstrip("/"))
    package = README.parent / "cdf_platform"
    actual = {
        p.name if p.is_dir() else p.stem
        for p in package.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.name != "__init__.py")
    }
    actual = {name if (package / name).is_dir() else f"{name}.py" for name in actual}
    assert documented == actual


def _platform_imports(source: str) -> set[str]:
    """The cdf_platform modules Python `source` imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return {name for name in found if name.split(".")[0] == "cdf_platform"}


def test_readme_and_examples_use_only_the_public_api() -> None:
    """What users copy imports `cdf_platform` itself, never a module behind it; and every
    public name is there without Dagster or Spark being imported for it."""
    sources = [*_blocks("python"), *(p.read_text() for p in EXAMPLES_FILE.parent.rglob("*.py"))]
    assert len(sources) > 2
    for source in sources:
        assert _platform_imports(source) <= {"cdf_platform"}
    probe = (
        "import sys, cdf_platform as cdf; "
        "assert set(cdf.__all__) == {'__version__', *cdf._HOMES}; "
        "print(cdf.__version__, 'dagster' in sys.modules, 'pyspark' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [importlib.metadata.version("cdf_platform"), "False", "False"]


def test_readme_incremental_asset_runs_as_written(
    spark: SparkSession, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The "Your own incremental asset" example, executed as written on a test lake: silver
    and the example's gold asset materialized twice, equal to a recompute from bronze each time
    (a customer whose orders all went has no row). Its asset is the repository's example's."""
    (block,) = [b for b in _blocks("python") if "def revenue_by_customer" in b]
    assert len(block.strip().splitlines()) <= 40
    example = EXAMPLES_FILE.read_text()
    assert _function(block, "revenue_by_customer") == _function(example, "revenue_by_customer")
    bronze = str(lake / "bronze" / "orders")
    spark.sql(
        f"CREATE TABLE {sql_path(bronze)} (order_id BIGINT, customer_id BIGINT, amount BIGINT) "
        "USING DELTA TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(f"INSERT INTO {sql_path(bronze)} VALUES (1, 10, 100), (2, 10, 50), (3, 20, 70)")
    pipelines = lake / "pipelines.yaml"
    entry = {"id": "orders", "source": "bronze/orders", "target": "silver/orders"}
    pipelines.write_text(yaml.safe_dump({"pipelines": [{**entry, "keys": ["order_id"]}]}))
    monkeypatch.setenv("CDF_LAKE_ROOT", str(lake))
    monkeypatch.setenv("CDF_PIPELINES_FILE", str(pipelines))
    monkeypatch.setenv("CDF_AUTOMATION", "off")
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs", "exec"), namespace)
    defs: dg.Definitions = namespace["defs"]
    instance = dg.DagsterInstance.ephemeral()
    gold = dg.AssetKey(["gold", "revenue_by_customer"])
    silver = dg.AssetKey(["silver", "orders"])

    def revenue() -> list[tuple[Any, ...]]:
        rows = spark.read.format("delta").load(str(lake / "gold" / "revenue_by_customer"))
        return sorted(tuple(r) for r in rows.select("customer_id", "orders", "revenue").collect())

    def recomputed() -> list[tuple[Any, ...]]:
        orders = spark.read.format("delta").load(bronze).groupBy("customer_id")
        return sorted(tuple(r) for r in orders.agg(F.count("*"), F.sum("amount")).collect())

    def materialize() -> None:
        job = defs.resolve_implicit_global_asset_job_def()
        assert job.execute_in_process(instance=instance, asset_selection=[silver, gold]).success

    materialize()
    assert revenue() == recomputed() == [(10, 2, 150), (20, 1, 70)]
    # Customer 10's orders all go: one moves to 20, the other is deleted.
    spark.sql(f"UPDATE {sql_path(bronze)} SET customer_id = 20 WHERE order_id = 2")
    spark.sql(f"DELETE FROM {sql_path(bronze)} WHERE order_id = 1")
    materialize()
    assert revenue() == recomputed() == [(20, 2, 120)]
    # A consumer given to build_defs is checked like silver, after each of its runs.
    window = instance.get_latest_asset_check_evaluation_record(
        dg.AssetCheckKey(gold, "replay_window")
    )
    assert window is not None and window.evaluation is not None
    assert window.evaluation.passed
    assert window.evaluation.metadata["watermark"].value == 2  # silver: create, load, merge


def test_readme_deltalake_example_reads_silver_with_deletion_vectors(
    spark: SparkSession, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `deltalake` example next to `deletion_vectors`, executed as written on a silver whose
    MERGE wrote a deletion vector: `QueryBuilder` reads it, `to_pyarrow_table()` refuses it."""
    (block,) = [b for b in _blocks("python") if "QueryBuilder" in b]
    spec = spec_for(
        lake, source=str(lake / "bronze" / "orders"), target=str(lake / "silver" / "orders")
    )
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")
    # A silver this small is rewritten by default (copyOnWriteMergeMaxBytes): 0 keeps vectors,
    # in Spark's MERGE (a change set this small would need no Spark).
    monkeypatch.setenv(JVM_FREE_MERGE_MAX_ROWS_ENV, "0")
    keeping = SessionsWithConf(spark, {COPY_ON_WRITE_CONF: "0"})
    PipelineRunner.on(control, lambda: keeping).run(spec)
    assert list(Path(spec.target).glob("deletion_vector_*.bin"))
    monkeypatch.chdir(lake.parent)
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs", "exec"), namespace)
    orders = namespace["orders"]
    columns = {name: orders.column(name).to_pylist() for name in ("id", "name", "amount")}
    read = sorted(zip(columns["id"], columns["name"], columns["amount"], strict=True))
    assert read == spark_rows(spark, spec.target, "id", "name", "amount")  # as Spark reads it
    assert read == [(1, "ada", 11), (2, "bob", 20), (3, "cy", 30)]
    with pytest.raises(DeltaProtocolError, match="deletionVectors"):
        namespace["silver"].to_pyarrow_table()
