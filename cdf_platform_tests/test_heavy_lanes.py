"""The test kit's split of the `heavy` test files into lanes (`make test`'s scheduler): read
from the files' source, the longest first, each onto the lane with the fewest minutes."""

from __future__ import annotations

from pathlib import Path

from cdf_platform_testkit.fixtures import heavy_files, heavy_lanes


def _test_file(root: Path, name: str, marks: str) -> str:
    source = f"import pytest\n\npytestmark = {marks}\n\n\ndef test_x():\n    pass\n"
    (root / name).write_text(source)
    return name


def test_heavy_files_are_spread_over_lanes_by_their_minutes(tmp_path: Path) -> None:
    files = [
        _test_file(tmp_path, "test_story.py", "[pytest.mark.heavy, pytest.mark.long(minutes=9)]"),
        _test_file(tmp_path, "test_matrix.py", "[pytest.mark.heavy, pytest.mark.long(minutes=8)]"),
        _test_file(tmp_path, "test_browser.py", "[pytest.mark.long(minutes=8), pytest.mark.heavy]"),
        _test_file(tmp_path, "test_deploy.py", "[pytest.mark.heavy, pytest.mark.long(minutes=6)]"),
        _test_file(tmp_path, "test_kills.py", "pytest.mark.heavy"),  # no `long`: 1 minute
        _test_file(tmp_path, "test_light.py", "pytest.mark.long(minutes=5)"),
    ]

    heavy = heavy_files(tmp_path, files)
    assert heavy == set(files) - {"test_light.py"}

    assert heavy_lanes(tmp_path, heavy, 2) == {
        "test_story.py": "heavy files 1",  # 9
        "test_browser.py": "heavy files 2",  # 8 (a tie at 8 goes by name)
        "test_matrix.py": "heavy files 2",  # 16
        "test_deploy.py": "heavy files 1",  # 15
        "test_kills.py": "heavy files 1",  # 16
    }
    # One lane (`-n 2`, or no worker left for it): every heavy file in one unit.
    for lanes in (1, 0):
        assert set(heavy_lanes(tmp_path, heavy, lanes).values()) == {"heavy files 1"}
