"""Mutants: errors."""
