"""The vocabulary of the IDSDS protocols' flags, light (no TensorFlow) so that a binary checks
its flags before it starts (docs/faithfulness.md)."""

BASELINES = ("zeros", "blur", "random")  # what a deleted cell becomes
ORDERS = ("ascending", "descending")  # incremental deletion: least or most relevant cell first
