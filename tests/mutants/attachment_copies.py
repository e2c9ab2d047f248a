"""Mutant: a fork that copies every attachment the child reaches into the child (ATT-INHERIT-001).

The copies keep their attachment ids, media types and bytes, so everything the API shows of the
child's attachments is as before; what shows the copy is what the fork stored: one more item per
attachment and its bytes, honestly counted in `Storage-Items-Written`/`Storage-Bytes-Written`
(reference_impl/diagnostics.py counts the bound values of the INSERT)."""

from __future__ import annotations

from sqlalchemy import and_, insert, or_, select
from starlette.types import ASGIApp

from reference_impl.services.attachments import reach_of
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from tests.mutants import mutant
from tests.mutants.diagnostics import copying_after_each_fork, without_diagnostics


def _copying_attachments(settings: Settings) -> ASGIApp:
    def copy(tx: Transaction, child_id: str, max_depth: int) -> None:
        a = t.attachments
        lent = [
            and_(a.c.session_id == session_id, a.c.position <= bound)
            for session_id, bound in reach_of(tx.chain(child_id, max_depth))
            if session_id != child_id and bound not in (-1, None)
        ]
        if lent:
            for row in tx.conn.execute(select(a).where(or_(*lent))).mappings().all():
                tx.conn.execute(insert(a).values({**row, "session_id": child_id, "position": 0}))

    return copying_after_each_fork(settings, copy)


@mutant("ATT-INHERIT-001", select=("fork.fork_stores_no_attachment_copy",),
        description="A fork copies every attachment the child reaches into the child, ids, media types and bytes "
                    "kept: reads unchanged, the bytes it writes (honestly reported) grow with the attachments")
def fork_copies_attachments(settings: Settings) -> ASGIApp:
    return _copying_attachments(settings)


def fork_copies_attachments_without_diagnostics(settings: Settings) -> ASGIApp:
    """The same copying server advertising no diagnostics: ATT-INHERIT-001 is not verified
    (tests/test_no_copy.py); not a mutant, since no requirement can fail."""
    return _copying_attachments(without_diagnostics(settings))
