"""Secured Kafka: SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) over TLS for every command that talks to Kafka.

The settings object is checked on its own; then a broker of its own (scripts/kafka.sh) is started
with a plaintext listener and a SASL_SSL listener whose certificate is signed by a CA this test
makes with openssl. Over SASL_SSL: `topics create`, `replay`, `ship`, a real `worker` (faust/aiokafka)
judging the replayed KILL capture, and `verdicts --latest` reading its verdict. Wrong passwords,
a plaintext client on the TLS port and a CA that did not sign the broker are refused.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlhealth.schemas.kafka_security import KafkaSecurity, KafkaSecurityError

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
KAFKA_SH = ROOT / "scripts" / "kafka.sh"
KILL_CAPTURE = TESTS / "scenarios" / "tail_only_nccl_hang" / "capture"
HEALTHY_CAPTURE = ROOT / "rlhealth" / "examples" / "capture-healthy"
USERS = {"alice": "alice-Secret-1", "bob": "bob-Secret-2"}


# ---------------------------------------------------------------------------------------------- unit
def test_settings_refuse_what_no_broker_accepts() -> None:
    with pytest.raises(KafkaSecurityError, match="mechanism"):
        KafkaSecurity(protocol="SASL_SSL", sasl_username="a", sasl_password="b")
    with pytest.raises(KafkaSecurityError, match="username and password"):
        KafkaSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="a")
    with pytest.raises(KafkaSecurityError, match="SASL settings"):
        KafkaSecurity(protocol="SSL", sasl_mechanism="PLAIN")
    with pytest.raises(KafkaSecurityError, match="TLS files"):
        KafkaSecurity(protocol="PLAINTEXT", ssl_cafile="/ca.pem")
    with pytest.raises(KafkaSecurityError, match="certificate needs its key"):
        KafkaSecurity(protocol="SSL", ssl_certfile="/c.pem")
    with pytest.raises(KafkaSecurityError, match="not one of"):
        KafkaSecurity(protocol="TLS")


def test_from_env_and_client_options() -> None:
    env = {"RLHEALTH_KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "RLHEALTH_KAFKA_SASL_MECHANISM": "scram-sha-512",
           "RLHEALTH_KAFKA_SASL_USERNAME": "alice", "RLHEALTH_KAFKA_SASL_PASSWORD": "pw",
           "RLHEALTH_KAFKA_SSL_CAFILE": "/etc/ca.pem", "RLHEALTH_KAFKA_SSL_CHECK_HOSTNAME": "0"}
    sec = KafkaSecurity.from_env(env)
    assert sec.kafka_python() == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                                  "sasl_plain_username": "alice", "sasl_plain_password": "pw",
                                  "ssl_check_hostname": False, "ssl_cafile": "/etc/ca.pem"}
    assert "pw" not in repr(sec) and "pw" not in sec.describe()
    assert KafkaSecurity.from_env({}).kafka_python() == {"security_protocol": "PLAINTEXT"}
    assert KafkaSecurity.from_env({}).ssl_context() is None
    ctx = KafkaSecurity(protocol="SSL").ssl_context()  # system CAs, hostname checked
    assert isinstance(ctx, ssl.SSLContext) and ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize("command", [["worker"], ["verdicts", "--latest"], ["ship", "."], ["topics", "create"],
                                     ["topics", "list"], ["replay", ".", "--to-kafka"]])
def test_every_kafka_command_takes_the_security_options(command: list[str]) -> None:
    """Each command refuses an impossible combination before touching the network (exit 2)."""
    proc = subprocess.run([sys.executable, "-m", "rlhealth", *command, "--bootstrap", "127.0.0.1:1",
                           "--kafka-security-protocol", "SASL_SSL", "--kafka-sasl-username", "alice"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if not k.startswith("RLHEALTH_KAFKA_")})
    assert proc.returncode == 2, proc.stderr
    assert "Kafka security settings" in proc.stderr and "mechanism" in proc.stderr


# ---------------------------------------------------------------------------------------------- broker
def openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def make_ca_and_broker_identity(d: Path, name: str = "ca") -> Path:
    """A self-signed CA (`<name>.pem`) and, signed by it, the broker's key + certificate for 127.0.0.1
    in `broker.pem` (what scripts/kafka.sh's SASL_SSL listener loads)."""
    d.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
            "-days", "2", "-subj", "/CN=rlhealth test CA " + uuid.uuid4().hex[:6], cwd=d)
    return d / f"{name}.pem"


def sign_broker(d: Path, ca: str = "ca") -> None:
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
            "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", "broker.crt", "-days", "2", "-extfile", "san.ext", cwd=d)
    openssl("pkcs8", "-topk8", "-nocrypt", "-in", "broker.key", "-out", "broker.p8", cwd=d)
    (d / "broker.pem").write_text((d / "broker.p8").read_text() + (d / "broker.crt").read_text())


class SecuredBroker:
    def __init__(self, plaintext: str, sasl_ssl: str, ca: Path, other_ca: Path) -> None:
        self.plaintext, self.sasl_ssl, self.ca, self.other_ca = plaintext, sasl_ssl, ca, other_ca

    def env(self, mechanism: str, user: str = "alice", password: str | None = None, ca: Path | None = None
            ) -> dict[str, str]:
        """The environment of a command talking SASL_SSL to this broker (every option has its variable)."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("RLHEALTH_KAFKA_")}
        return {**base, "RLHEALTH_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "RLHEALTH_KAFKA_SASL_MECHANISM": mechanism,
                "RLHEALTH_KAFKA_SASL_USERNAME": user,
                "RLHEALTH_KAFKA_SASL_PASSWORD": USERS[user] if password is None else password,
                "RLHEALTH_KAFKA_SSL_CAFILE": str(ca or self.ca), "RLHEALTH_PARTITIONS": "4"}


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    if shutil.which("openssl") is None or shutil.which("java") is None:
        pytest.skip("openssl and java are needed for the SASL_SSL broker")
    tls = tmp_path_factory.mktemp("tls")
    ca = make_ca_and_broker_identity(tls)
    sign_broker(tls)
    other_ca = make_ca_and_broker_identity(tmp_path_factory.mktemp("other-ca"), "other")
    state = tmp_path_factory.mktemp("kafka-sasl")
    env = {**os.environ, "RLHEALTH_KAFKA_DIR": str(state), "RLHEALTH_KAFKA_SASL_SSL_DIR": str(tls),
           "RLHEALTH_KAFKA_SASL_USERS": ",".join(f"{u}:{p}" for u, p in USERS.items()),
           "RLHEALTH_PYTHON": sys.executable}
    env.pop("KAFKA_PORT", None)
    proc = subprocess.run([str(KAFKA_SH), "start"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    try:
        yield SecuredBroker(proc.stdout.strip(), (state / "bootstrap-sasl-ssl").read_text().strip(), ca, other_ca)
    finally:
        subprocess.run([str(KAFKA_SH), "stop"], env=env, capture_output=True, timeout=120)


def rlhealth(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlhealth", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.kafka
def test_sasl_ssl_round_trip_through_every_command(secured_broker: SecuredBroker, tmp_path: Path) -> None:
    b = secured_broker
    prefix = f"t-sasl-{uuid.uuid4().hex[:6]}."
    kill_job, shipped_job = f"sasl-kill-{uuid.uuid4().hex[:4]}", f"sasl-ship-{uuid.uuid4().hex[:4]}"

    # topics create: SCRAM-SHA-512
    out = rlhealth("topics", "create", "--bootstrap", b.sasl_ssl, "--prefix", prefix,
                   env=b.env("SCRAM-SHA-512", "bob"))
    assert out.returncode == 0, out.stderr
    assert "created" in out.stdout
    # the plaintext listener of the same broker still serves plaintext clients
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("RLHEALTH_KAFKA_")}
    listed = rlhealth("topics", "list", "--bootstrap", b.plaintext, "--prefix", prefix, "--json", env=plain_env)
    assert listed.returncode == 0 and prefix in listed.stdout, listed.stderr

    # the worker (faust + aiokafka, and kafka-python for its admin client): SCRAM-SHA-256
    sys.path.insert(0, str(TESTS))
    from test_streaming_worker import Worker

    worker_env = {k: v for k, v in b.env("SCRAM-SHA-256").items() if k.startswith("RLHEALTH_KAFKA_")}
    w = Worker(b.sasl_ssl, prefix, tmp_path / "worker.log", core=None, tick=1.0, extra_env=worker_env)
    try:
        w.wait_caught_up(120)
        # replay: PLAIN, on the command line this time (the password from a file)
        pw = tmp_path / "alice.password"
        pw.write_text(USERS["alice"] + "\n")
        out = rlhealth("replay", str(KILL_CAPTURE), "--to-kafka", "--bootstrap", b.sasl_ssl, "--topic-prefix", prefix,
                       "--no-create-topics", "--job-id", kill_job, "--kafka-security-protocol", "SASL_SSL",
                       "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username", "alice",
                       "--kafka-sasl-password-file", str(pw), "--kafka-ssl-cafile", str(b.ca),
                       env={**plain_env, "RLHEALTH_PARTITIONS": "4"})
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout.strip().splitlines()[-1])["events"] > 0
        # ship: SCRAM-SHA-512, a live folder read once
        folder = tmp_path / "live"
        shutil.copytree(HEALTHY_CAPTURE, folder)
        (folder / "capture.json").unlink()  # a bare live folder: the job id is --job-id's
        out = rlhealth("ship", str(folder), "--bootstrap", b.sasl_ssl, "--job-id", shipped_job, "--iterations", "1",
                       "--interval", "0.1", env={**b.env("SCRAM-SHA-512", "bob"), "RLHEALTH_TOPIC_PREFIX": prefix})
        assert out.returncode == 0, out.stderr
        w.wait_metric(f'rlhealth_job_verdict_kill{{job_id="{kill_job}"}}', lambda v: v == 1.0, 120)
        # the worker consumed the shipper's records (the old example capture is judged as ended, so its
        # job exports no series: count the events instead)
        processed = w.wait_metric('rlhealth_events_processed_total{kind="heartbeat"}', lambda v: v >= 1, 60)
        assert processed >= 1
    finally:
        w.stop()
    # ... and they are on the topics, keyed by the shipped job, readable over SASL_SSL
    from kafka import KafkaConsumer

    from rlhealth.schemas.topics import TopicCatalog

    topics = TopicCatalog(prefix=prefix, partitions=4).event_topics
    consumer = KafkaConsumer(*topics, bootstrap_servers=b.sasl_ssl, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, **KafkaSecurity.from_env(b.env("SCRAM-SHA-256")).kafka_python())
    try:
        keys = {r.key for r in consumer}
    finally:
        consumer.close()
    assert shipped_job.encode() in keys and kill_job.encode() in keys

    # verdicts: PLAIN, as a supervisor reads them
    deadline = time.monotonic() + 60
    while True:
        out = rlhealth("verdicts", "--bootstrap", b.sasl_ssl, "--topic-prefix", prefix, "--latest", "--job", kill_job,
                       "--format", "json", env=b.env("PLAIN"))
        if out.returncode in (0, 10) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert out.returncode == 10, out.stderr  # exit 10: the latest verdict is a KILL, as `probe` says it
    verdict = json.loads(out.stdout.strip().splitlines()[-1])
    assert verdict["job_id"] == kill_job and verdict["verdict"] == "KILL"
    # a job that has no verdict: the command reaches the broker and says so (exit 1), it does not hang
    out = rlhealth("verdicts", "--bootstrap", b.sasl_ssl, "--topic-prefix", prefix, "--latest", "--job", "no-such-job",
                   "--format", "json", env=b.env("SCRAM-SHA-256", "bob"))
    assert out.returncode == 1 and "no verdict for job no-such-job" in out.stderr, out.stderr


@pytest.mark.kafka
@pytest.mark.parametrize("case", ["wrong-password", "unknown-user", "untrusted-ca", "plaintext-on-tls-port"])
def test_sasl_ssl_refuses_bad_credentials_and_untrusted_brokers(secured_broker: SecuredBroker, case: str) -> None:
    b = secured_broker
    if case == "wrong-password":
        env = b.env("SCRAM-SHA-256", password="not-the-password")
    elif case == "unknown-user":
        env = b.env("PLAIN", user="alice") | {"RLHEALTH_KAFKA_SASL_USERNAME": "mallory"}
    elif case == "untrusted-ca":
        env = b.env("PLAIN", ca=b.other_ca)
    else:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLHEALTH_KAFKA_")}
    from kafka.errors import KafkaError

    from rlhealth.sinks.kafka import admin_client

    sec = KafkaSecurity.from_env(env)
    with pytest.raises((KafkaError, OSError, ssl.SSLError)), \
            admin_client(b.sasl_ssl, timeout_s=8, security=sec) as admin:
        admin.list_topics()
