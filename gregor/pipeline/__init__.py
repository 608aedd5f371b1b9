"""The reference data pipeline: the seeds' use cases flowing through Gregor and Spark.

- Website activity tracking: `generator` produces page views to `page_views`; `jobs.activity_stream`
  computes per-minute URL statistics into `page_view_stats` and Parquet; `jobs.activity_report`
  reads the whole topic in batch for an offline report.
- Log aggregation: `shipper` ships application log lines to `logs` (so can rsyslog's omkafka);
  `jobs.log_errors_stream` counts errors per service per minute.
- `demo` runs all of it against a broker (starting one if none is given): `gregor pipeline demo`.
"""
