"""The `traincast` command."""
