"""Chapter: authorization - credentials, invisible sessions, projects, roles and grants, reads
through a lineage, attachments, deletion and listings.

The principals play roles (conformance/config.py ROLES): `owner` (alice), `stranger` (bob),
`reader` (carol) and `writer` (dave) share one project, `outsider` belongs to another. A check that
needs more principals than configured fails as not testable.

One module per concern; importing them here, in this order, registers the chapter's checks in
the order they run.
"""

from conformance.checks.authorization import (  # noqa: F401  (imported to register their checks)
    credentials,
    grants,
    lineage_reads,
    access_matrix,
    attachments,
    deletion,
    listing,
    orders,
)
