"""Mutants: sessions."""
