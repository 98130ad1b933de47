"""Configuration from the environment: one validated model, documented in --help, read nowhere else."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

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


def _reference(variables: list[tuple[str, str]]) -> object:
    """What pydantic-settings (which settings.py used to subclass) makes of these variables: the model_dump, or
    the (loc, type, msg) of each error."""
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class Reference(BaseSettings):
        model_config = SettingsConfigDict(env_prefix=settings.PREFIX, extra="ignore", frozen=True)

    for name, info in settings.Settings.model_fields.items():
        Reference.model_fields[name] = info
    Reference.model_rebuild(force=True)
    env = dict(variables)
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        return Reference().model_dump()
    except ValidationError as e:
        return [(err["loc"], err["type"], err["msg"]) for err in e.errors()]
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _ours(variables: list[tuple[str, str]]) -> object:
    try:
        return settings.from_variables(tuple(variables)).model_dump()
    except ValidationError as e:
        return [(err["loc"], err["type"], err["msg"]) for err in e.errors()]


def test_the_model_reads_variables_as_pydantic_settings_did() -> None:
    import random

    rnd = random.Random(11)
    fields = list(settings.Settings.model_fields)
    values = ["", "0", "1", "7", "-3", "2.5", "1e3", "true", "False", "yes", "off", "t", "abc", " 5", "5 ",
              "/tmp/x", "~/y", "a:b:", "None", "null", "4294967296", "1_000", "0x10", "\u00e9t\u00e9"]
    checked = 0
    for _ in range(400):
        chosen = rnd.sample(fields, rnd.randint(0, 6))
        variables = []
        for name in chosen:
            spelled = rnd.choice([settings.PREFIX + name.upper(), (settings.PREFIX + name).lower(),
                                  settings.PREFIX + name.capitalize()])
            variables.append((spelled, rnd.choice(values)))
        if rnd.random() < 0.3 and variables:  # the same variable twice, in two cases: the later one wins
            name, _ = variables[0]
            variables.append((name.swapcase(), rnd.choice(values)))
        if rnd.random() < 0.3:
            variables.append(("RLHEALTH_NOT_A_FIELD", "x"))
        assert _ours(variables) == _reference(variables), variables
        checked += 1
    assert checked == 400


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
