"""What every room uses: keys and tags, figures, resources, step failures, destructive runs."""
