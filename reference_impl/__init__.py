"""Reference implementation of the Session Lineage spec: HTTP, service and store layers."""
