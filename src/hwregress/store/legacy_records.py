"""How a record JSON of an older ``results.json`` schema version (or a journal line of an older hwregress, which
carries no version) is read: what those versions kept elsewhere, or told by a family's name, moved to the fields of
:class:`hwregress.store.results.TestRecord` (its format history). Both functions change a record JSON in place and
may run on any record: one that has the newer fields is left as it is."""

from __future__ import annotations

from typing import Any

# how versions <= 5 told a roof and a judged latency: by the family's name (and mode)
LEGACY_ROOF_FAMILIES = ("ceiling",)
LEGACY_LATENCY_JUDGED = (("spark", "stream"), ("throughput", "decode"))
# the report view of each family's records, as versions <= 6 chose it by the family's name (a family not listed: none)
LEGACY_VIEWS = {"throughput": "models", "parity": "parity", "output-parity": "parity", "ceiling": "ceilings",
                "scaling": "scaling", "colocated": "colocation", "spark": "spark"}


def derive_legacy_traits(item: dict[str, Any]) -> dict[str, Any]:
    """Give a record JSON without ``measures_roof`` or ``latency_judged`` (schema versions <= 5, a journal line of an
    older hwregress) the value its family and mode had then (:data:`LEGACY_ROOF_FAMILIES`,
    :data:`LEGACY_LATENCY_JUDGED`), and one without ``view`` (versions <= 6) its family's view
    (:data:`LEGACY_VIEWS`), in place; returns ``item``. A record that has them is left as it is. The fleet store's
    figure rows carry none of them and read them alike (:mod:`hwregress.report.fleet_view`)."""
    family = item.get("family") or "throughput"  # the field's default, as TestRecord reads a record without one
    item.setdefault("measures_roof", family in LEGACY_ROOF_FAMILIES)
    item.setdefault("latency_judged", (family, item.get("mode")) in LEGACY_LATENCY_JUDGED)
    item.setdefault("view", LEGACY_VIEWS.get(family))
    return item


# details keys of schema versions <= 3 that version 4 types, and the field each becomes
LEGACY_TYPED_DETAILS = {"identity": "identity", "device_facts": "device_facts", "stable": "stable",
                        "cpu_samples": "reference_samples", "efficiency_reference_samples": "reference_samples"}


def type_legacy_details(item: dict[str, Any]) -> dict[str, Any]:
    """Move the keys of :data:`LEGACY_TYPED_DETAILS` from a record JSON's ``details`` (schema versions <= 3) to the
    typed fields of version 4, in place; returns ``item``. A typed field already set wins; a record without such
    details is left as it is, so this may run on any record (a journal line carries no schema version)."""
    details = item.get("details")
    if not isinstance(details, dict) or not any(key in details for key in LEGACY_TYPED_DETAILS):
        return item
    item["details"] = details = dict(details)
    for old, new in LEGACY_TYPED_DETAILS.items():
        if old in details:
            value = details.pop(old)
            if item.get(new) in (None, {}, []):
                item[new] = value
    return item
