"""The warm run worker that `WarmRunLauncher` (`orchestration/run_launcher.py`) starts runs in."""
