"""Drives the Dagster graph in-process: the demo, one-shot ticks (sensors + automation), the UI launcher.

This is shell code (it imports dagster); the domain library ``noisycal_platform`` never imports it.
"""
