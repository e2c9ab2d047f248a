"""Record session and turn ids wide enough to carry their project.

Revision ID: r0002
Revises: r0001
"""

import sqlalchemy as sa
from alembic import op

revision = "r0002"
down_revision = "r0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":  # SQLite does not enforce lengths
        for column in ("session_id", "turn_id"):
            op.alter_column("records", column, type_=sa.String(256), existing_type=sa.String(128))


def downgrade() -> None:
    pass
