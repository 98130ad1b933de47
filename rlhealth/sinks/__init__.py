"""Where rlhealth writes: the Kafka producer, the DuckDB evidence store, the Prometheus exporter.

Each sink is its own module and imports its client library only when imported itself.
"""
