"""Reading a CNN: the registry of names, its readers, workload, conv and op signatures, peak memory."""
