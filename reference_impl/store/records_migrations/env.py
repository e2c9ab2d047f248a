"""Alembic environment of a separate records store (`--records-database-url`)."""

from alembic import context

from reference_impl.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table="alembic_version_records",
    include_name=lambda name, kind, parent: kind != "table" or name in ("records", "record_sessions"),
)
with context.begin_transaction():
    context.run_migrations()
