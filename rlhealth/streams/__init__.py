"""Streaming side of rlhealth: the topic catalogue, the faust app, its tables, timers and agents.

Importing this package imports nothing heavy: `rlhealth.streams.topics` is plain data, and
the faust app lives in its own module that is imported only by the worker command.
"""
