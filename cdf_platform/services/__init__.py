"""Local processes and servers that the demo and the test kit share: each started in its own
process group with a log, waited for, and stopped by PID.

`service` is the one start/wait/stop-by-PID base (`Service`, `LoopbackServer` on a free port of
127.0.0.1, `wait_for`); `deployment_processes` builds the command of each process of a
deployment (the warm engine, the run worker, a code server, the daemon, a webserver);
`local_s3` is the local S3 server (moto on granian) of `cdf-platform demo --local-s3` and of the
object-store tests. It ships because the demo needs it; production code does not import it, and
it imports nothing of the platform but `core` (neither Spark nor Dagster).
"""
