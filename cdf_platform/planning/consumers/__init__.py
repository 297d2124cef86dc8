"""What a downstream asset that consumes a table's changes reads next, and its status."""
