"""Prefect tasks: thin wrappers that add retries, timeouts and artifacts around one core entry point each."""
