"""Tests of the `roar` package."""
