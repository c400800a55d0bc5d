"""The benchmark, measurement and table scripts (each runnable as `python -m scripts.NAME`;
see docs/architecture.md, "Layers")."""
