"""Configuration from the environment: one validated model, documented in --help, read nowhere else."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlhealth import settings
from rlhealth.schemas.topics import DEFAULT_PARTITIONS, TopicCatalog

ROOT = Path(__file__).resolve().parents[1]


def test_every_variable_is_documented_in_help() -> None:
    out = subprocess.run([sys.executable, "-m", "rlhealth", "--help"], capture_output=True, text=True, check=True)
    for name in settings.Settings.model_fields:
        assert settings.env_name(name) in out.stdout
    assert "RLHEALTH_KAFKA_SASL_PASSWORD" in out.stdout


def test_values_come_from_the_environment_and_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings.Settings.model_fields["partitions"].default == DEFAULT_PARTITIONS
    monkeypatch.setenv("RLHEALTH_PARTITIONS", "7")
    monkeypatch.setenv("RLHEALTH_TOPIC_PREFIX", "t1.")
    monkeypatch.setenv("RLHEALTH_RULES_DIRS", "/a:/b:")
    cat = TopicCatalog.from_env()
    assert (cat.partitions, cat.prefix) == (7, "t1.")
    assert settings.load().rules_dir_list() == [Path("/a"), Path("/b")]
    monkeypatch.setenv("RLHEALTH_PARTITIONS", "0")
    with pytest.raises(settings.SettingsError, match="RLHEALTH_PARTITIONS"):
        settings.load()


def test_a_load_is_reused_only_while_the_variables_are_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLHEALTH_PARTITIONS", "5")
    first = settings.load()
    assert settings.load() is first  # the same variables: the same frozen object
    monkeypatch.setenv("RLHEALTH_PARTITIONS", "6")
    assert settings.load().partitions == 6
    monkeypatch.delenv("RLHEALTH_PARTITIONS")
    assert settings.load().partitions == DEFAULT_PARTITIONS
    monkeypatch.setenv("rlhealth_partitions", "9")  # pydantic-settings reads names in any case
    assert settings.load().partitions == 9
    monkeypatch.delenv("rlhealth_partitions")
    monkeypatch.setenv("RLHEALTH_PARTITIONS", "0")
    with pytest.raises(settings.SettingsError):  # a bad value is never served from the last good load
        settings.load()
    with pytest.raises(settings.SettingsError):
        settings.load()


def test_a_malformed_variable_is_one_line_and_exit_2() -> None:
    env = dict(os.environ, RLHEALTH_KAFKA_CONNECT_TIMEOUT="soon")
    out = subprocess.run([sys.executable, "-m", "rlhealth", "topics", "list", "--bootstrap", "127.0.0.1:9"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "RLHEALTH_KAFKA_CONNECT_TIMEOUT" in out.stderr


# Reading RLHEALTH_* directly is allowed only where the model cannot be used: the core's native
# switch (the core imports no configuration) and the Kafka security object, which takes a mapping.
ALLOWED = {"rlhealth/settings.py", "rlhealth/agents/bytescan.py", "rlhealth/schemas/kafka_security.py"}


def test_no_module_reads_rlhealth_variables_itself() -> None:
    direct = re.compile(r"""(?:environ(?:\.get)?|getenv)\s*[\[(]\s*["']RLHEALTH_""")
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "rlhealth").rglob("*.py")
                 if str(p.relative_to(ROOT)) not in ALLOWED and direct.search(p.read_text("utf-8"))]
    assert offenders == []
