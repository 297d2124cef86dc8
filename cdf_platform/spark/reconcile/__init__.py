"""Silver against bronze at a pinned version: rebuild, the event source and its fold, verify."""
