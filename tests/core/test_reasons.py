"""Every verdict reason's words, pinned (extender.core.reasons): the tiers decide, this module says why."""

from __future__ import annotations

from extender.allocator.requests import parse_claim
from extender.core import reasons
from extender.core.reasons import FAILED, UNRESOLVABLE, NodeVerdict
from tests.core import small_cluster as c

SPECS = [parse_claim(c.claim("one", 2)), parse_claim(c.claim("two", 1))]


def test_a_shortage_names_claim_request_count_and_class() -> None:
    assert reasons.shortage("ns/c", "r", 2, "gpu") == "claim ns/c, request r: 2 device(s) of class gpu"


def test_no_set_tells_in_use_from_missing_from_no_combination() -> None:
    refs = reasons.claim_refs(SPECS)
    assert refs == "default/one, default/two"
    short = reasons.shortage("default/one", "r", 2, "gpu")
    assert reasons.no_set(refs, fits_if_free=True, short="") == NodeVerdict(
        FAILED, "cannot allocate all claims: the devices claims default/one, default/two need are in use"
    )
    assert reasons.no_set(refs, fits_if_free=False, short=short) == NodeVerdict(
        UNRESOLVABLE,
        "cannot allocate all claims: claim default/one, request r: 2 device(s) of class gpu do not exist "
        "on the node",
    )
    assert reasons.no_set(refs, fits_if_free=False, short="") == NodeVerdict(
        UNRESOLVABLE,
        "cannot allocate all claims: no combination of the node's devices satisfies claims "
        "default/one, default/two (constraints, shared counters or capacity)",
    )


def test_the_vectorised_check_names_the_short_request_or_the_requests_together() -> None:
    assert reasons.short_of(SPECS, 1, in_use=True) == NodeVerdict(
        FAILED,
        "cannot allocate all claims: claim default/two, request r: 1 device(s) of class gpu are not free "
        "on the node (in use)",
    )
    assert reasons.short_of(SPECS, 0, in_use=False) == NodeVerdict(
        UNRESOLVABLE,
        "cannot allocate all claims: claim default/one, request r: 2 device(s) of class gpu do not exist "
        "on the node",
    )
    assert reasons.short_of(SPECS, -1, in_use=False) == NodeVerdict(
        UNRESOLVABLE,
        "cannot allocate all claims: claims default/one, default/two: the requests together do not exist "
        "on the node",
    )


def test_node_and_pod_level_reasons() -> None:
    assert reasons.node_scoped("pool p is invalid") == NodeVerdict(
        UNRESOLVABLE, "cannot allocate all claims: pool p is invalid"
    )
    assert reasons.claim_unavailable("ns/c") == NodeVerdict(
        UNRESOLVABLE, "resourceclaim ns/c not available on the node"
    )
    assert reasons.invalid_claim(ValueError("bad count")) == "invalid ResourceClaim: bad count"
    assert reasons.timed_out(TimeoutError("context deadline exceeded")) == (
        "timed out trying to allocate devices: context deadline exceeded"
    )
