"""The store: every SQL statement of the reference implementation lives in this package."""

from reference_impl.store.store import Store, Transaction

__all__ = ["Store", "Transaction"]
