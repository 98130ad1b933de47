"""Where rlhealth reads from: shippers and readers named after what they read (log files,
nvidia-smi CSV, Harbor trials, kubectl JSON, sacct, captures, the Kubernetes API) and the
Kafka consumer helper. Each source is its own module and imports its client library only when
imported itself.
"""
