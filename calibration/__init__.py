"""Calibration (operator side): measure whole steps of a CNN set on a machine type, fit its models."""
