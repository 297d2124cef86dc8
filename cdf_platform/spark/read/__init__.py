"""What runs and consumers read: a pinned change-feed range, its collapse, a consumer's batch."""
