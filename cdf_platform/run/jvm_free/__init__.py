"""The incremental run without Spark: a small SCD1 or SCD2 change set read from bronze's change
feed and merged into silver by `deltalake` (`incremental_run`), SCD1's merge (`latest_merge`)
and SCD2's staged history (`history_merge`)."""
