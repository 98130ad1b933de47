"""Streaming side of rlhealth: the faust app, its tables, timers and agents.

Importing this package imports nothing heavy: the faust app lives in its own module that is
imported only by the worker command. The topic catalogue is part of the wire contract
(`rlhealth.schemas.topics`).
"""
