"""Rule packs (TOML) and throughput tables as data, plus their loader.

``load_rules()`` returns the shipped signature packs (``rlhealth/rules/packs/*.toml``) plus any
extra directories; ``check_rules()`` validates a rule set against both scan engines.
"""

from rlhealth.rules.loader import check_rules, load_pack_file, load_rules

__all__ = ["load_rules", "check_rules", "load_pack_file"]
