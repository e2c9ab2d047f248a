"""Stateful property checks: the lineage state machine (`lineage_machine.py`) run by Hypothesis,
seeded by the run, failures shrunk to a short program.
"""

from __future__ import annotations

import hypothesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from conformance.checks.lineage_machine import build_machine
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import check

REQUIREMENTS = (
    "XS-EFFECTIVE-001",
    "FORK-SNAPSHOT-001",
    "FORK-CUT-THROUGH-001",
    "FORK-CUT-BEFORE-001",
    "FORK-CUT-LATEST-001",
    "FORK-CUT-UNKNOWN-001",
    "FORK-INCOMPLETE-001",
    "REVERT-EFFECTIVE-001",
    "REVERT-FORKS-001",
    "TURN-IDEM-001",
    # Which of several refusals a fork or a revert meets comes first (the model computes every one):
    # the depth before the cut, access before both, a stale ETag before the revert's own refusals.
    "FORK-DEPTH-001",
    "ERR-PRECEDENCE-001",
    # The ETag a revert is sent with: the one GET /sessions/{id} shows, strong and current.
    "REVERT-ETAG-001",
    # What the model also decides, and the machine fails by name: refusals of reverts, and with
    # `sharing` grants, revocations, deletions and the reads they change.
    "FORK-CREATE-001",
    "REVERT-001",
    "REVERT-CAS-001",
    "AUTH-HIDE-001",
    "AUTH-LINEAGE-READ-001",
    "AUTH-GRANT-001",
    "AUTH-REVOKE-001",
    "AUTH-REVOKE-CASCADE-001",
    "DEL-SOFT-001",
    "DEL-FORK-001",
    "DEL-DESCENDANTS-001",
    "AUTH-FORK-001",
)


@check(*REQUIREMENTS, title="Random programs of writes and forks agree with an independent model")
def lineage_state_machine(ctx: CheckContext) -> None:
    machine = build_machine(ctx)
    hypothesis.seed(ctx.seed)(machine)
    try:
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=ctx.config.stateful_examples,
                stateful_step_count=14,
                deadline=None,
                database=None,
                phases=[Phase.explicit, Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
                report_multiple_bugs=False,
            ),
        )
    except CheckFailed as failure:
        steps = "\n".join(getattr(failure, "__notes__", []))
        failure.message = f"{failure.message}\nshrunk program:\n{steps}" if steps else failure.message
        raise
    except hypothesis.errors.FlakyFailure as flaky:
        inner = first_failure(flaky)
        if inner is None:
            raise
        raise CheckFailed(
            f"{inner.message}\n(when Hypothesis ran the program again the target answered differently, so "
            "it could not be shrunk)",
            inner.requirements,
            inner.exchange,
        ) from None


def first_failure(group: BaseException) -> CheckFailed | None:
    """The first CheckFailed inside a (nested) exception group, such as Hypothesis's FlakyFailure."""
    for inner in getattr(group, "exceptions", ()):
        if isinstance(inner, CheckFailed):
            return inner
        found = first_failure(inner)
        if found is not None:
            return found
    return None
