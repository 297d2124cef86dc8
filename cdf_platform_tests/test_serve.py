"""`cdf-platform serve` and `deploy/supervisord.conf`: the environment is checked before
supervisord starts, and the configuration runs the documented commands with the rules of
docs/production.md (restart on exit, whole process groups stopped, the code server's short stop
timeout). The deployment itself runs in `cdf_platform_tests/system/test_supervised.py`."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest

from cdf_platform.cli import main
from cdf_platform.supervised import DEFAULTS, EXAMPLE_ENV, SUPERVISORD_CONF

PRODUCTION = Path(__file__).resolve().parents[1] / "docs" / "production.md"


def _programs() -> dict[str, configparser.SectionProxy]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(SUPERVISORD_CONF)
    return {
        name.removeprefix("program:"): parser[name]
        for name in parser.sections()
        if name.startswith("program:")
    }


def _serve(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    for name in EXAMPLE_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(["serve"])
    return code, capsys.readouterr().err


def test_serve_names_every_missing_variable_and_starts_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {k: v for k, v in EXAMPLE_ENV.items() if k not in ("CDF_SPARK_REMOTE", "CDF_RUN_WORKER")}
    code, err = _serve(env, monkeypatch, capsys)
    assert code == 2
    assert err.startswith("RuntimeEnvironmentError: the deployment's environment lacks ")
    assert "CDF_SPARK_REMOTE (the warm engine's Spark Connect URL)" in err
    assert "CDF_RUN_WORKER" in err and "CDF_LAKE_ROOT" not in err
    assert "What to do: export each (docs/production.md lists them)" in err


def test_serve_asks_for_the_instance_file_it_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**EXAMPLE_ENV, "DAGSTER_HOME": str(tmp_path)}
    code, err = _serve(env, monkeypatch, capsys)
    assert code == 2
    assert f"{tmp_path / 'dagster.yaml'} is not a file" in err
    assert f"What to do: copy deploy/dagster.yaml to {tmp_path / 'dagster.yaml'}" in err
    assert not (tmp_path / "supervisor").exists()


def test_the_configuration_runs_the_documented_commands() -> None:
    """Each program's command, with the example environment and `serve`'s defaults, is a command
    of docs/production.md's listing."""
    documented = re.sub(r"\\\n\s*", "", PRODUCTION.read_text())
    values = {**EXAMPLE_ENV, **DEFAULTS}
    commands = {}
    for name, program in _programs().items():
        command = re.sub(r"%\(ENV_(\w+)\)s", lambda m: values[m.group(1)], program["command"])
        commands[name] = command.replace("%(here)s", "deploy")
    assert sorted(commands) == ["code-server", "daemon", "engine", "run-worker", "webserver"]
    for name, command in commands.items():
        assert re.search(rf"^{re.escape(command)}\s+#", documented, flags=re.M), (name, command)


def test_every_program_is_restarted_and_stopped_with_its_group() -> None:
    for name, program in _programs().items():
        assert program.getboolean("autorestart"), name
        assert program.getboolean("killasgroup"), name
        # The run worker alone is stopped by itself: the runs it forked finish.
        assert program.getboolean("stopasgroup") is (name != "run-worker"), name
    assert _programs()["code-server"].getint("stopwaitsecs") <= 5
