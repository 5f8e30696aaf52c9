"""What agents measured: conv layers, other ops, whole steps, and the environments they ran in."""
