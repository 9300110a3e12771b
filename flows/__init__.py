"""Prefect flows: one-screen drivers that read as the pipeline."""
