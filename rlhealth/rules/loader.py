"""Load and check signature rule packs.

Pack file layout (TOML)::

    [pack]
    id = "vllm"            # unique pack id
    version = "2026.11.1"
    description = "..."

    [[rule]]
    id = "vllm.v1_stats"   # unique across all packs
    kind = "metric"        # see rlhealth.agents.signatures.KINDS
    severity = "info"      # fatal | error | warning | info
    gates = ["B"]          # subset of A, B, C, restarts
    signal = "vllm_stats"  # semantic tag the health core dispatches on
    pattern = '...'        # Hyperscan/RE2/ERE common subset, no capture groups
    extract = '...'        # optional Python re with named groups, run on matched lines only
    extract_before = '...' # optional: named groups of text that ends where `extract` matched
                           # (within 48 characters); keeps `extract` starting with a literal,
                           # which Python re searches fast
    fields = ["..."]       # the named groups (and defaults) a match carries
    text_fields = ["..."]  # optional: fields never converted to numbers
    defaults = { k = v }   # optional: values for fields the line did not carry
    meaning = "..."
    match = ["..."]        # >= 1 example that must match
    no_match = ["..."]     # >= 1 example that must not match

Sources, in order: the shipped packs, then ``extra_dirs``, then the colon-separated
directories in ``RLHEALTH_RULES_DIRS``. A pack whose ``id`` was already loaded replaces the
earlier pack of that id (so a site can override a shipped pack); duplicate rule ids across
different packs are reported by :func:`check_rules`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from rlhealth import settings
from rlhealth.agents.signatures import (
    GATES,
    KINDS,
    SEVERITIES,
    Classifier,
    Rule,
    RuleSet,
    block_pattern,
    hyperscan_available,
    to_ere,
)

__all__ = ["load_rules", "load_pack_file", "parse_pack", "check_rules", "ENV_VAR"]

ENV_VAR = "RLHEALTH_RULES_DIRS"


def _tuple_of_str(v: Any, what: str) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str) or not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValueError(f"{what} must be a list of strings")
    return tuple(v)


def parse_pack(data: dict[str, Any], source: str = "<memory>") -> tuple[str, str, list[Rule]]:
    """Parse one pack (already TOML-decoded) into (pack id, version, rules)."""
    pack = data.get("pack")
    if not isinstance(pack, dict) or not isinstance(pack.get("id"), str):
        raise ValueError(f"{source}: missing [pack] id")
    pack_id = pack["id"]
    version = str(pack.get("version", "0"))
    rules: list[Rule] = []
    for i, r in enumerate(data.get("rule", [])):
        where = f"{source}: rule #{i + 1} ({r.get('id', '?')})"
        try:
            for key in ("id", "kind", "severity", "signal", "pattern"):
                if not isinstance(r.get(key), str) or not r[key]:
                    raise ValueError(f"missing or empty '{key}'")
            if r["kind"] not in KINDS:
                raise ValueError(f"unknown kind {r['kind']!r}")
            if r["severity"] not in SEVERITIES:
                raise ValueError(f"unknown severity {r['severity']!r}")
            gates = _tuple_of_str(r.get("gates", []), "gates")
            bad = [g for g in gates if g not in GATES]
            if bad:
                raise ValueError(f"unknown gates {bad}")
            defaults = r.get("defaults", {}) or {}
            if not isinstance(defaults, dict):
                raise ValueError("defaults must be a table")
            rules.append(Rule(
                id=r["id"], pack=pack_id, kind=r["kind"], severity=r["severity"], gates=gates,
                signal=r["signal"], pattern=r["pattern"],
                fields=_tuple_of_str(r.get("fields", []), "fields"),
                meaning=str(r.get("meaning", "")),
                match=_tuple_of_str(r.get("match", []), "match"),
                no_match=_tuple_of_str(r.get("no_match", []), "no_match"),
                extract=str(r.get("extract", "") or ""),
                extract_before=str(r.get("extract_before", "") or ""),
                text_fields=_tuple_of_str(r.get("text_fields", []), "text_fields"),
                defaults=tuple(sorted(defaults.items())),
            ))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    return pack_id, version, rules


def load_pack_file(path: Path) -> tuple[str, str, list[Rule]]:
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    return parse_pack(data, str(path))


def _shipped() -> Iterable[tuple[str, bytes]]:
    root = resources.files("rlhealth.rules").joinpath("packs")
    entries = sorted((e for e in root.iterdir() if e.name.endswith(".toml")), key=lambda e: e.name)
    for e in entries:
        yield f"rlhealth/rules/packs/{e.name}", e.read_bytes()


def _dir_files(d: Path) -> Iterable[tuple[str, bytes]]:
    if d.is_file() and d.suffix == ".toml":
        yield str(d), d.read_bytes()
        return
    if not d.is_dir():
        raise FileNotFoundError(f"rules directory not found: {d}")
    for p in sorted(d.glob("*.toml")):
        yield str(p), p.read_bytes()


def load_rules(extra_dirs: Sequence[Path] = (), *, include_shipped: bool = True,
               use_env: bool = True) -> RuleSet:
    """Shipped packs + ``extra_dirs`` + ``$RLHEALTH_RULES_DIRS`` -> RuleSet."""
    sources: list[tuple[str, bytes]] = []
    if include_shipped:
        sources.extend(_shipped())
    dirs = [Path(d) for d in extra_dirs]
    if use_env:
        dirs.extend(settings.load().rules_dir_list())
    for d in dirs:
        sources.extend(_dir_files(d))
    packs: dict[str, tuple[str, list[Rule]]] = {}
    for name, raw in sources:
        pack_id, version, rules = parse_pack(tomllib.loads(raw.decode("utf-8")), name)
        packs.pop(pack_id, None)  # re-insert so order follows the last definition
        packs[pack_id] = (version, rules)
    all_rules: list[Rule] = []
    versions: dict[str, str] = {}
    for pack_id, (version, rules) in packs.items():
        versions[pack_id] = version
        all_rules.extend(rules)
    return RuleSet(rules=tuple(all_rules), versions=versions)


_FORBIDDEN = [
    (re.compile(r"(?<!\\)\\[sWDbB]"), "\\s, \\W, \\D, \\b, \\B are not allowed (block-mode / ERE safety)"),
    (re.compile(r"\(\?[=!<]"), "look-around is not allowed"),
    (re.compile(r"(?<!\\)[*+?}]\?"), "lazy quantifiers are not allowed"),
    (re.compile(r"\\[1-9]"), "back-references are not allowed"),
]


def check_rules(ruleset: RuleSet) -> list[str]:
    """Problems with a rule set (empty list = OK).

    Compiles every pattern in Python ``re``, RE2 and (if importable) Hyperscan block mode;
    translates it to ERE; runs every ``match``/``no_match`` example through the real
    Classifier on every available engine and compares the engines; reports duplicate ids,
    signals used with different kinds, and extract/fields mismatches."""
    problems: list[str] = []
    seen: dict[str, str] = {}
    signal_kind: dict[str, tuple[str, str]] = {}
    for r in ruleset.rules:
        if r.id in seen:
            problems.append(f"{r.id}: duplicate rule id (packs {seen[r.id]} and {r.pack})")
        seen[r.id] = r.pack
        prev = signal_kind.get(r.signal)
        if prev is not None and prev[0] != r.kind:
            problems.append(f"{r.id}: signal {r.signal!r} has kind {r.kind!r} but {prev[1]} "
                            f"gives it kind {prev[0]!r}")
        else:
            signal_kind.setdefault(r.signal, (r.kind, r.id))
        if r.kind not in KINDS:
            problems.append(f"{r.id}: unknown kind {r.kind!r}")
        if r.severity not in SEVERITIES:
            problems.append(f"{r.id}: unknown severity {r.severity!r}")
        if any(g not in GATES for g in r.gates):
            problems.append(f"{r.id}: unknown gates {r.gates}")
        if not r.match:
            problems.append(f"{r.id}: needs at least one match example")
        if not r.no_match:
            problems.append(f"{r.id}: needs at least one no_match example")
        for rx, why in _FORBIDDEN:
            if rx.search(r.pattern):
                problems.append(f"{r.id}: pattern: {why}")
        try:
            compiled = re.compile(r.pattern)
            if compiled.groups:
                problems.append(f"{r.id}: pattern has capture groups; use (?:...) and 'extract'")
        except re.error as exc:
            problems.append(f"{r.id}: pattern does not compile in Python re: {exc}")
        try:
            to_ere(r.pattern)
        except ValueError as exc:
            problems.append(f"{r.id}: pattern has no ERE (grep -E) form: {exc}")
        defaults = {k for k, _ in r.defaults}
        if r.extract_before and not r.extract:
            problems.append(f"{r.id}: extract_before needs an extract")
        if r.extract:
            try:
                ex = re.compile(r.extract)
                groups = set(ex.groupindex) | set(re.compile(r.extract_before).groupindex)
                extra = groups - set(r.fields)
                if extra:
                    problems.append(f"{r.id}: extract groups not listed in fields: {sorted(extra)}")
                missing = set(r.fields) - groups - defaults
                if missing:
                    problems.append(f"{r.id}: fields neither extracted nor defaulted: {sorted(missing)}")
            except re.error as exc:
                problems.append(f"{r.id}: extract does not compile: {exc}")
        else:
            missing = set(r.fields) - defaults
            if missing:
                problems.append(f"{r.id}: fields {sorted(missing)} need an 'extract' regex")
        for tf in r.text_fields:
            if tf not in r.fields:
                problems.append(f"{r.id}: text_field {tf!r} is not a field")
    # engine compilation, per rule so a failure names the rule
    try:
        import re2

        opts = re2.Options()
        opts.encoding = re2.Options.Encoding.LATIN1
        for r in ruleset.rules:
            try:
                re2.compile(r.pattern.encode("utf-8"), opts)
            except Exception as exc:  # noqa: BLE001 - re2.error and friends: any failure is a problem to report
                problems.append(f"{r.id}: pattern does not compile in RE2: {exc}")
    except ImportError:  # pragma: no cover
        problems.append("RE2 (google-re2) is not importable")
    engines = ["re2"]
    if hyperscan_available():
        import hyperscan

        for r in ruleset.rules:
            db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            try:
                db.compile(expressions=[block_pattern(r.pattern).encode("utf-8")], ids=[0],
                           elements=1, flags=[hyperscan.HS_FLAG_MULTILINE])
            except Exception as exc:  # noqa: BLE001 - hyperscan.error and friends, reported as above
                problems.append(f"{r.id}: pattern does not compile in Hyperscan: {exc}")
        engines.insert(0, "hyperscan")
    if problems:
        return problems
    # examples through the real classifier, every engine
    examples: list[str] = []
    owners: list[tuple[int, bool]] = []  # (rule index, should match)
    for i, r in enumerate(ruleset.rules):
        for text in r.match:
            examples.append(text)
            owners.append((i, True))
        for text in r.no_match:
            examples.append(text)
            owners.append((i, False))
    results: dict[str, set[tuple[int, int]]] = {}
    for eng in engines:
        clf = Classifier(ruleset, engine=eng)
        results[eng] = set(clf.raw_hits(examples))
    base = results[engines[0]]
    for eng in engines[1:]:
        if results[eng] != base:
            diff = sorted(results[eng] ^ base)[:5]
            problems.append(f"engines {engines[0]} and {eng} disagree on examples: {diff}")
    for line, (ri, should) in enumerate(owners):
        r = ruleset.rules[ri]
        hit = (line, ri) in base
        if should and not hit:
            problems.append(f"{r.id}: match example does not match: {examples[line][:120]!r}")
        if not should and hit:
            problems.append(f"{r.id}: no_match example matches: {examples[line][:120]!r}")
    # extraction sanity: a rule with extracted fields must extract something from some example
    clf = Classifier(ruleset, engine=engines[0])
    for r in ruleset.rules:
        extracted = set(r.fields) - {k for k, _ in r.defaults}
        if not extracted or not r.match:
            continue
        got = False
        for m in clf.scan(list(r.match)):
            if m.rule.id == r.id and any(k in m.fields for k in extracted):
                got = True
                break
        if not got:
            problems.append(f"{r.id}: extract yields no field on any match example")
    return problems
