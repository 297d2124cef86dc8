"""The demo's data: its bronze writers (row tables, an event log), gold, their assets and jobs."""
