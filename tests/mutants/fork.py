"""Mutants: fork."""
