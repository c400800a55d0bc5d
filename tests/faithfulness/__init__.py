"""Tests of the `faithfulness` package."""
