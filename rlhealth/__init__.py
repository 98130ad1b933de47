"""rlhealth: a streaming health monitor for large RL jobs that train LLM agents.

It reads the same evidence a person gathers for a deep health probe (logs, GPU polls,
trial results, scheduler state) and recommends KILL or NO-KILL with evidence. It never
kills anything itself.
"""

__version__ = "0.1.0"
