"""Chapter: whole-transcript export (`transcript-export`) and turns by position (`turn-by-position`).

One module per concern; importing them here, in this order, registers the chapter's checks in
the order they run.
"""

from conformance.checks.export import document, positions  # noqa: F401  (registers their checks)
