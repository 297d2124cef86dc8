"""Jobs and schedules: incremental, rebuild and checks; maintenance (VACUUM); verification."""
