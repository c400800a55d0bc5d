"""Names of the stored map formats, kept apart from `records` so that a binary can check its
flags against them before TensorFlow loads (docs/records.md)."""

MAP_DTYPES = ("rank8", "float16", "float32")  # rank8: 1 byte per element; the others: IEEE
