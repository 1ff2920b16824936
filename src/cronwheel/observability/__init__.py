"""Observability: metrics, logs and lateness, in one place.

- ``process``: the process-local Prometheus metrics of schedulers and workers
  (``--metrics-port``), registered on demand, never at import.
- ``sinks``: the event sinks the node wiring gives the dispatcher and the worker
  (``dispatch.events`` / ``worker.events``): metrics plus structlog lines.
- ``cluster``: the cluster's metrics, read from the store at scrape time
  (``/metrics`` of ``cronwheel api``).
- ``lateness``: the lateness objective the dashboard, ``status`` and ``/metrics``
  share.
- ``logs``: structlog's configuration (console or JSON lines).
- ``errorlog``: the HTTP server's unexpected errors, one short line each, written by
  a thread (never on the event loop).
- ``tracing_switch``: whether tracing is on (no OpenTelemetry import); ``tracing``: the
  OpenTelemetry spans (producer, claim, run) and the worker's hooks, imported only when
  it is on (README "Tracing").
"""
