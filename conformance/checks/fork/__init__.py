"""Chapter: fork (cut points, snapshots, headers, targets, depth, idempotency).

One module per concern; importing them here, in this order, registers the chapter's checks in
the order they run.
"""

from conformance.checks.fork import cuts, children, idempotency, concurrency, no_copy  # noqa: F401  (registers their checks)
