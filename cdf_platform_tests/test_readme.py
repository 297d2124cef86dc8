"""README.md stays true: its example spec validates, and its commands and options exist."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from cdf_platform.cli import build_parser
from cdf_platform.core.spec import PipelineSpec
from cdf_platform.core.spec_file import parse_specs

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def _fenced_blocks() -> list[str]:
    """Every fenced block of README.md, in order (fences paired line by line)."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in README.read_text().splitlines():
        if not line.startswith("```"):
            if current is not None:
                current.append(line)
        elif current is None:
            current = []
        else:
            blocks.append("\n".join(current) + "\n")
            current = None
    return blocks


def test_readme_example_spec_is_valid_and_uses_every_field() -> None:
    (example,) = [b for b in _blocks("yaml") if b.startswith("pipelines:")]
    specs = parse_specs(yaml.safe_load(example), origin="README.md")
    assert [spec.id for spec in specs] == ["orders", "customers_history"]
    # The SCD2 fields only go with `history: scd2`: the second pipeline shows them.
    documented = {field for entry in yaml.safe_load(example)["pipelines"] for field in entry}
    assert documented == set(PipelineSpec.model_fields)


def test_readme_commands_exist() -> None:
    parser = build_parser()
    commands = [
        line.split("#")[0].split()
        for block in _blocks("bash")
        for line in block.splitlines()
        if line.startswith("cdf-platform ")
    ]
    assert commands, "README documents cdf-platform commands"
    for words in commands:
        args = [w for w in words[1:] if not w.startswith("[")]
        args = ["some_pipeline" if w == "PIPELINE_ID" else w for w in args]
        parsed = parser.parse_args(args)
        assert parsed.command == args[0]
    for option in ("--pipelines", "--lake-root", "--control-root", "--json"):
        assert option in README.read_text()
        assert parser.parse_args(
            ["status", option, "x"] if option != "--json" else ["status", option]
        )


def test_readme_make_targets_exist() -> None:
    makefile = (README.parent / "Makefile").read_text()
    for target in re.findall(r"^make (\w+)", "\n".join(_blocks("bash")), flags=re.M):
        assert re.search(rf"^{target}:", makefile, flags=re.M), target
    assert (README.parent / ".ci" / "run").read_text().strip().endswith("make test")


def test_readme_layout_matches_the_package_tree() -> None:
    """Every package and top-level module of cdf_platform is in README's Layout, and nothing
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
