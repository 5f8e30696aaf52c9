"""Code shared by the API, the workers and the benchmark agent."""
