"""The test kit: what the tests (`cdf_platform_tests`), the benchmarks (`bench`) and the
tests of the benchmarks (`bench/tests`) share. Not shipped with the platform.

- servers, each a `cdf_platform.services.service.LoopbackServer` (one start/wait/stop-by-PID
  base): the local S3 server (`cdf_platform.services.local_s3`, the demo's too), Azurite
  (`azurite`), fake-gcs-server (`fake_gcs`), PostgreSQL (`postgres`), Spark Connect, the warm
  engine and run worker, a standalone cluster and a Hive metastore (`spark_servers`),
  `dagster dev` (`dagster_dev`), and a deployment's processes (`deployment`); the latency
  proxy (`latency_proxy`) runs in a thread of the caller;
- lakes and specs: pipelines entries and files (`lake`), `orders` bronze tables
  (`orders_bronze`), synthetic Delta commits (`synthetic_log`), objects on a store (`objects`);
- Spark for tests: the small local config and per-session conf (`spark_conf`), the JVM options
  of the Java processes tests start (`jvm_options`) and their class-data archive of Spark's
  classes (`class_archive`), processes below a PID (`processes`);
- the generated histories, their oracles and harness (`faults`).
"""
