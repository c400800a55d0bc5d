"""Tests of the `bam` package."""
