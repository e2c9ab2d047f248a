"""Conformance suite for the Session Lineage spec: run it against any server by base URL."""

SUITE_VERSION = "1.0.0"
