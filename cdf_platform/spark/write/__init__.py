"""Writes: the one MERGE builder, each silver layout's MERGE and writer, a consumer's write."""
