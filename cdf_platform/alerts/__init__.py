"""Alerts: what the platform tells operators where they already look (Slack, a JSON webhook,
email), once per incident and once when it ends.

JVM-free and Dagster-free: `incidents` folds what was seen (a check evaluation, a run's start or
failure, a materialization, each a `Signal`) into incidents and the messages they call for;
`delivery` sends them through an outbox whose failed deliveries are retried. The Dagster side
(`cdf_platform.orchestration.sensors.alert_sensor`) reads the instance's events into signals and
keeps this package's state in the instance.
"""
