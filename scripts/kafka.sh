#!/usr/bin/env bash
# A local single-node Apache Kafka 4.x (KRaft, combined broker+controller) for tests and demos.
#
#   scripts/kafka.sh start    start (or find running) broker; prints "127.0.0.1:PORT" as the only stdout line
#   scripts/kafka.sh stop     SIGTERM, wait, SIGKILL fallback; leaves no java process and no bound port
#   scripts/kafka.sh status   "running 127.0.0.1:PORT (pid N)" or "stopped"; exit 0 / 3
#   scripts/kafka.sh fetch    only download the jars into the cache
#
# Jars come from Maven Central (org.apache.kafka:kafka_2.13 plus its runtime dependencies and a
# log4j2 binding, resolved by `mvn dependency:copy-dependencies` from a generated pom) and are cached in
#   ${XDG_CACHE_HOME:-$HOME/.cache}/rlhealth/kafka-<version>/libs
# A second start reuses that cache and does not touch the network.
#
# Environment:
#   KAFKA_VERSION         Kafka version (default below: the newest 4.x on Maven Central when written)
#   KAFKA_PORT            broker port (default: a free port); the controller always gets another free port
#   RLHEALTH_KAFKA_DIR    state dir: server.properties, data/, logs/, kafka.pid (default: <repo>/.kafka)
#   KAFKA_AUTO_CREATE_TOPICS  true|false (default false: topics are created explicitly, with the
#                         configured partition count; an auto-created topic would get 1 partition and
#                         silently break co-partitioning by job_id)
#   KAFKA_HEAP_OPTS       JVM heap (default -Xms128m -Xmx512m)
#   KAFKA_START_TIMEOUT   seconds to wait for the broker to answer a metadata request (default 90)
#   RLHEALTH_KAFKA_KEEP   1: keep data and ports of the previous run instead of a fresh broker
#   RLHEALTH_PYTHON       python used for free ports and the readiness check (default .venv or python3)
#   RLHEALTH_KAFKA_SASL_SSL_DIR  also open a SASL_SSL listener on another free port (its HOST:PORT is
#                         written to <state dir>/bootstrap-sasl-ssl); the directory holds the broker's
#                         TLS identity as `broker.pem` (PKCS#8 private key followed by the certificate
#                         chain, PEM); `key.password` in it, if present, is the key's password
#   RLHEALTH_KAFKA_SASL_USERS    users of that listener, "name:password[,name:password...]", accepted
#                         with SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
#
# Every start is a fresh, empty broker unless RLHEALTH_KAFKA_KEEP=1: tests get no leftovers.
set -Eeuo pipefail
# An unexpected failure names itself instead of exiting silently.
trap 'rc=$?; log "error: line $LINENO: \"$BASH_COMMAND\" failed (exit $rc)"' ERR

KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
SCALA_VERSION="2.13"
LOG4J_VERSION="2.25.5"   # log4j-slf4j-impl binds the slf4j 1.7 API that Kafka 4.x depends on

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/rlhealth"
KAFKA_HOME="$CACHE_ROOT/kafka-$KAFKA_VERSION"
LIBS="$KAFKA_HOME/libs"
STATE_DIR="${RLHEALTH_KAFKA_DIR:-$REPO_ROOT/.kafka}"
PID_FILE="$STATE_DIR/kafka.pid"
ADDR_FILE="$STATE_DIR/bootstrap"
SASL_ADDR_FILE="$STATE_DIR/bootstrap-sasl-ssl"
SASL_SSL_DIR="${RLHEALTH_KAFKA_SASL_SSL_DIR:-}"
SASL_USERS="${RLHEALTH_KAFKA_SASL_USERS:-}"
CONFIG="$STATE_DIR/server.properties"
LOG_DIR="$STATE_DIR/logs"
DATA_DIR="$STATE_DIR/data"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m}"
AUTO_CREATE="${KAFKA_AUTO_CREATE_TOPICS:-false}"

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

pick_python() {
    if [[ -n "${RLHEALTH_PYTHON:-}" ]]; then echo "$RLHEALTH_PYTHON"
    elif [[ -x "$REPO_ROOT/.venv/bin/python" ]]; then echo "$REPO_ROOT/.venv/bin/python"
    elif command -v python3 >/dev/null; then command -v python3
    else die "no python3 found (needed for free ports and the readiness check)"
    fi
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------- jars

fetch_jars() {
    if [[ -f "$LIBS/.complete" ]]; then
        return 0
    fi
    command -v mvn >/dev/null || die "mvn not found: needed once to fetch Kafka $KAFKA_VERSION into $LIBS"
    mkdir -p "$CACHE_ROOT"
    # One download at a time across concurrent starts (several checkouts share the cache).
    exec 9>"$CACHE_ROOT/.kafka-$KAFKA_VERSION.lock"
    flock 9
    if [[ -f "$LIBS/.complete" ]]; then
        exec 9>&-
        return 0
    fi
    local t0 tmp
    t0=$(now)
    tmp="$(mktemp -d "$CACHE_ROOT/.fetch-XXXXXX")"
    log "fetching Kafka $KAFKA_VERSION (kafka_$SCALA_VERSION + runtime deps) from Maven Central ..."
    cat >"$tmp/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 https://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>rlhealth.local</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_$SCALA_VERSION</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
      <exclusions>
        <exclusion><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId></exclusion>
      </exclusions>
    </dependency>
  </dependencies>
</project>
EOF
    if ! mvn -B -q -f "$tmp/pom.xml" -Dmaven.repo.local="$tmp/m2" \
            org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$tmp/libs" >"$tmp/mvn.log" 2>&1; then
        tail -n 30 "$tmp/mvn.log" >&2
        rm -rf "$tmp"
        die "mvn could not fetch Kafka $KAFKA_VERSION"
    fi
    ls "$tmp/libs"/kafka_"$SCALA_VERSION"-"$KAFKA_VERSION".jar >/dev/null \
        || { rm -rf "$tmp"; die "kafka_$SCALA_VERSION-$KAFKA_VERSION.jar missing after mvn"; }
    touch "$tmp/libs/.complete"
    rm -rf "$KAFKA_HOME"
    mkdir -p "$KAFKA_HOME"
    mv "$tmp/libs" "$LIBS"
    rm -rf "$tmp"   # the jars are all in libs/; the maven repo copy under tmp is not needed
    log "fetched $(ls "$LIBS"/*.jar | wc -l) jars into $LIBS in $(elapsed "$t0")s"
    exec 9>&-
}

# ---------------------------------------------------------------- process helpers

# The pid from the pid file, if that process is alive and is our broker (guards against pid reuse).
broker_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE" 2>/dev/null)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    local cmd
    cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"
    [[ "$cmd" == *kafka.Kafka*"$CONFIG"* ]] || return 1
    echo "$pid"
}

free_port() {
    "$PY" - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
EOF
}

port_in_use() {
    "$PY" - "$1" <<'EOF'
import socket, sys
s = socket.socket()
s.settimeout(0.5)
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
sys.exit(0)
EOF
}

# Exit 0 when the broker at 127.0.0.1:$1 answers a Metadata request listing at least one broker.
# Stdlib only (Metadata v4, the oldest version Kafka 4.x still serves), so it works before `make setup`.
metadata_ok() {
    "$PY" - "$1" <<'EOF'
import socket, struct, sys
port = int(sys.argv[1])
client = b"rlhealth-ready"
# header v1: api_key=3 (Metadata), api_version=4, correlation_id, client_id
# body v4: topics=null (-1: all), allow_auto_topic_creation=false
req = struct.pack(">hhih", 3, 4, 7, len(client)) + client + struct.pack(">ib", -1, 0)
try:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.settimeout(3)
        s.sendall(struct.pack(">i", len(req)) + req)
        buf = b""
        while len(buf) < 4:
            chunk = s.recv(4 - len(buf))
            if not chunk:
                sys.exit(1)
            buf += chunk
        (size,) = struct.unpack(">i", buf)
        body = b""
        while len(body) < size:
            chunk = s.recv(size - len(body))
            if not chunk:
                sys.exit(1)
            body += chunk
except OSError:
    sys.exit(1)
corr, _throttle, n_brokers = struct.unpack(">iii", body[:12])
sys.exit(0 if corr == 7 and n_brokers >= 1 else 1)
EOF
}

rss_mib() {
    awk '/^VmRSS:/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo "?"
}

# ---------------------------------------------------------------- config

write_log4j() {
    cat >"$STATE_DIR/log4j2.properties" <<'EOF'
# Quiet: everything goes to logs/server.log (overwritten at each start), nothing to the console.
status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.append = false
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
EOF
}

write_config() {
    local port="$1" cport="$2" sport="${3:-}"
    local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
    local advertised="PLAINTEXT://127.0.0.1:$port"
    local protomap="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    if [[ -n "$sport" ]]; then
        listeners="$listeners,SASL_SSL://127.0.0.1:$sport"
        advertised="$advertised,SASL_SSL://127.0.0.1:$sport"
        protomap="$protomap,SASL_SSL:SASL_SSL"
    fi
    cat >"$CONFIG" <<EOF
# Generated by scripts/kafka.sh: single-node KRaft, combined broker+controller, loopback only.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protomap
log.dirs=$DATA_DIR

# single node: every internal topic has one replica
offsets.topic.replication.factor=1
offsets.topic.num.partitions=12
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
default.replication.factor=1
min.insync.replicas=1

# topics are created explicitly (rlhealth topics create / ensure_topics) with the right partitions
auto.create.topics.enable=$AUTO_CREATE
num.partitions=1
group.initial.rebalance.delay.ms=0

# a small machine: few threads, a small log-cleaner buffer (compacted topics still get cleaned)
num.network.threads=2
num.io.threads=4
background.threads=4
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=16777216
log.retention.hours=168
log.segment.bytes=67108864
log.retention.check.interval.ms=60000
EOF
    if [[ -n "$sport" ]]; then
        write_sasl_ssl_config >>"$CONFIG"
    fi
}

# The SASL_SSL listener: TLS with the PEM identity of $SASL_SSL_DIR, SASL PLAIN (users in the JAAS
# line) and SCRAM (credentials stored at format time, see scram_args).
write_sasl_ssl_config() {
    local plain_users="" pair name pass
    IFS=',' read -ra pairs <<<"$SASL_USERS"
    for pair in "${pairs[@]}"; do
        name="${pair%%:*}"; pass="${pair#*:}"
        plain_users="$plain_users user_$name=\"$pass\""
    done
    cat <<EOF

# SASL_SSL listener (RLHEALTH_KAFKA_SASL_SSL_DIR)
ssl.keystore.type=PEM
ssl.keystore.location=$SASL_SSL_DIR/broker.pem
EOF
    if [[ -f "$SASL_SSL_DIR/key.password" ]]; then
        echo "ssl.key.password=$(cat "$SASL_SSL_DIR/key.password")"
    fi
    cat <<EOF
ssl.client.auth=none
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required$plain_users;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOF
}

# `--add-scram` arguments of the storage tool: every user, both SCRAM mechanisms, one per line.
scram_args() {
    local pair name pass mech
    [[ -n "$SASL_SSL_DIR" && -n "$SASL_USERS" ]] || return 0
    IFS=',' read -ra pairs <<<"$SASL_USERS"
    for pair in "${pairs[@]}"; do
        name="${pair%%:*}"; pass="${pair#*:}"
        for mech in SCRAM-SHA-256 SCRAM-SHA-512; do
            printf '%s\n' --add-scram "$mech=[name=$name,password=$pass]"
        done
    done
}

cluster_id() {
    # A Kafka UUID: 16 random bytes, URL-safe base64 without padding. Like Kafka's Uuid.randomUuid(),
    # never one starting with "-": the storage tool would read it as an option (1 start in 64 failed).
    "$PY" - <<'EOF'
import base64, uuid
while True:
    cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not cid.startswith("-"):
        print(cid)
        break
EOF
}

# ---------------------------------------------------------------- commands

# One attempt: config, format, launch, wait. Sets RETRY=1 (and returns) when the broker died on a
# port conflict that fresh free ports may avoid (a race between picking a port and binding it).
# (A flag, not a return code: calling it in `launch || ...` would switch off `set -e` inside it.)
launch() {
    local t0="$1" port cport sport="" pid
    if [[ "${RLHEALTH_KAFKA_KEEP:-0}" == 1 && -f "$CONFIG" && -f "$DATA_DIR/meta.properties" ]]; then
        port="$(sed -n 's#^listeners=PLAINTEXT://127.0.0.1:\([0-9]*\),.*#\1#p' "$CONFIG")"
        cport="$(sed -n 's#^controller.quorum.bootstrap.servers=127.0.0.1:\([0-9]*\)$#\1#p' "$CONFIG")"
        log "keeping data of the previous run (port $port)"
    else
        rm -rf "$DATA_DIR" "$LOG_DIR"
        port="${KAFKA_PORT:-$(free_port)}"
        cport="$(free_port)"
        while [[ "$cport" == "$port" ]]; do cport="$(free_port)"; done
        rm -f "$SASL_ADDR_FILE"
        if [[ -n "$SASL_SSL_DIR" ]]; then
            [[ -f "$SASL_SSL_DIR/broker.pem" ]] || die "RLHEALTH_KAFKA_SASL_SSL_DIR has no broker.pem"
            [[ -n "$SASL_USERS" ]] || die "RLHEALTH_KAFKA_SASL_SSL_DIR needs RLHEALTH_KAFKA_SASL_USERS"
            sport="$(free_port)"
            while [[ "$sport" == "$port" || "$sport" == "$cport" ]]; do sport="$(free_port)"; done
        fi
        write_config "$port" "$cport" "$sport"
    fi
    if port_in_use "$port"; then
        die "port $port is already in use"
    fi
    mkdir -p "$LOG_DIR" "$DATA_DIR"
    write_log4j

    local jvm_common=(-Djava.awt.headless=true "-Dkafka.logs.dir=$LOG_DIR"
                      "-Dlog4j2.configurationFile=$STATE_DIR/log4j2.properties" -cp "$LIBS/*")
    local t_fmt0 t_fmt
    t_fmt0=$(now)
    if [[ ! -f "$DATA_DIR/meta.properties" ]]; then
        local cid
        cid="$(cluster_id)"
        [[ "$cid" =~ ^[A-Za-z0-9_][A-Za-z0-9_-]{21}$ ]] || die "bad cluster id '$cid'"
        local scram=()
        mapfile -t scram < <(scram_args)
        java -Xmx256m -XX:TieredStopAtLevel=1 "${jvm_common[@]}" kafka.tools.StorageTool format \
            --standalone --cluster-id "$cid" --config "$CONFIG" "${scram[@]}" >"$LOG_DIR/format.log" 2>&1 \
            || { cat "$LOG_DIR/format.log" >&2; die "formatting the storage failed"; }
    fi
    t_fmt=$(now)

    # shellcheck disable=SC2086  # HEAP_OPTS is a list of JVM flags
    setsid java -server $HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError \
        "${jvm_common[@]}" kafka.Kafka "$CONFIG" </dev/null >"$LOG_DIR/kafka.out" 2>&1 &
    pid=$!
    echo "$pid" >"$PID_FILE"
    echo "127.0.0.1:$port" >"$ADDR_FILE"
    if [[ -n "$sport" ]]; then echo "127.0.0.1:$sport" >"$SASL_ADDR_FILE"; fi

    local deadline=$(( $(date +%s) + START_TIMEOUT ))
    until metadata_ok "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PID_FILE"
            if [[ -z "${KAFKA_PORT:-}" && "${RLHEALTH_KAFKA_KEEP:-0}" != 1 ]] \
                    && grep -qs "Address already in use" "$LOG_DIR/server.log" "$LOG_DIR/kafka.out"; then
                log "port conflict on :$port or :$cport; retrying with other ports"
                RETRY=1
                return 0
            fi
            tail -n 40 "$LOG_DIR/kafka.out" "$LOG_DIR/server.log" >&2 2>/dev/null || true
            die "the broker exited during startup (logs in $LOG_DIR)"
        fi
        if (( $(date +%s) > deadline )); then
            tail -n 40 "$LOG_DIR/server.log" >&2 2>/dev/null || true
            cmd_stop >/dev/null || true
            die "the broker did not answer a metadata request within ${START_TIMEOUT}s"
        fi
        sleep 0.2
    done
    log "kafka $KAFKA_VERSION ready at 127.0.0.1:$port (pid $pid, controller :$cport, state $STATE_DIR)"
    if [[ -n "$sport" ]]; then log "SASL_SSL listener at 127.0.0.1:$sport (written to $SASL_ADDR_FILE)"; fi
    log "start time: $(elapsed "$t0")s total, $(elapsed "$t_fmt")s broker boot, format $(awk -v a="$t_fmt0" -v b="$t_fmt" 'BEGIN{printf "%.1f", b-a}')s"
    log "broker RSS: $(rss_mib "$pid") MiB"
    echo "127.0.0.1:$port"
}

cmd_start() {
    local t0
    t0=$(now)
    PY="$(pick_python)"
    mkdir -p "$STATE_DIR"
    local pid
    if pid="$(broker_pid)"; then
        log "already running (pid $pid)"
        cat "$ADDR_FILE"
        return 0
    fi
    command -v java >/dev/null || die "java not found (Kafka $KAFKA_VERSION needs Java 17+)"
    fetch_jars
    local attempt
    for attempt in 1 2 3; do
        RETRY=0
        launch "$t0"
        [[ $RETRY == 1 ]] || return 0
    done
    die "could not find free ports in 3 attempts"
}

cmd_stop() {
    local pid
    if ! pid="$(broker_pid)"; then
        rm -f "$PID_FILE"
        log "not running"
        return 0
    fi
    local port
    port="$(sed 's/.*://' "$ADDR_FILE" 2>/dev/null || true)"
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for (( i = 0; i < 300; i++ )); do       # up to 30 s for a controlled shutdown
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "no exit after SIGTERM in 30s; sending SIGKILL to $pid"
        kill -KILL "$pid" 2>/dev/null || true
        for (( i = 0; i < 50; i++ )); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    kill -0 "$pid" 2>/dev/null && die "pid $pid survived SIGKILL"
    rm -f "$PID_FILE"
    if [[ -n "$port" ]]; then
        PY="$(pick_python)"
        for (( i = 0; i < 50; i++ )); do
            port_in_use "$port" || break
            sleep 0.1
        done
        port_in_use "$port" && die "port $port is still in use after the broker exited"
    fi
    log "stopped (pid $pid)"
}

cmd_status() {
    local pid
    if pid="$(broker_pid)"; then
        echo "running $(cat "$ADDR_FILE") (pid $pid)"
    else
        echo "stopped"
        return 3
    fi
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    fetch) PY="$(pick_python)"; fetch_jars; echo "$LIBS" ;;
    *) echo "usage: $0 start|stop|status|fetch" >&2; exit 2 ;;
esac
