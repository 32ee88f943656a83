"""Calibration stage (seed 000): channel estimates, NC-ECE, recalibrators, recalibration report."""

STAGE = "calibration"
