"""Mutants: reads."""
