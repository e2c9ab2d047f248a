"""pytest plugin entry point (filled in by conformance.pytest_plugin)."""
