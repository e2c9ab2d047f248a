"""How a check reports: a failure cites the requirement IDs the target violated."""

from __future__ import annotations

from conformance.results import Exchange


class CheckFailed(AssertionError):
    """The target violated a requirement. `requirements` narrows which ones (default: the check's)."""

    def __init__(
        self,
        message: str,
        requirements: list[str] | None = None,
        exchange: Exchange | None = None,
        also_check: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.requirements = requirements or []
        self.exchange = exchange
        # True when the answer also defeats the check's own requirements: a 5xx, an undeclared
        # status or the wrong problem type is never what the check's rule asks for.
        self.also_check = also_check
        # The rules of the marked setup steps (registry.setup_step) this failure was raised through:
        # a check may cite them without declaring them.
        self.setup_rules: frozenset[str] = frozenset()

    def retold(self, prefix: str) -> CheckFailed:
        """The same failure with `prefix` before its message (which case or step it came from),
        keeping what it cites and through which set-up steps."""
        told = CheckFailed(f"{prefix}: {self.message}", self.requirements, self.exchange, self.also_check)
        told.setup_rules = self.setup_rules
        return told


class Unsupported(Exception):
    """The target's capability document says it does not support what the check needs."""


class NotVerified(Unsupported):
    """The rule applies, but the evidence it needs could not be observed on this target or in
    this run (for example a timing margin that could not be established): never a pass, never a fail."""


class TargetUnreachable(Exception):
    """The target did not answer (connection refused, timeout): the run is incomplete."""
