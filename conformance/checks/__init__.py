"""Conformance checks, one module per spec chapter."""
