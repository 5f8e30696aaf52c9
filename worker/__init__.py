"""Celery workers: plan jobs, send benchmark work to agents, assemble predictions."""
