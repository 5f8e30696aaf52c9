"""The HTTP API: jobs, CNNs, machines, health."""
