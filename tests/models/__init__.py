"""Tests of the model store."""
