"""Chapter: errors (problem details, malformed input, limits, no 5xx, schemas).

One module per concern; importing them here, in this order, registers the chapter's checks in
the order they run.
"""

from conformance.checks.errors import bodies, answers, precedence, protocol, hostile, mutations  # noqa: F401  (registers their checks)
