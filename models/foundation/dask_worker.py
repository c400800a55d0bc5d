"""What a Dask worker preloads to run this project's work (docs/scale_out.md, "Dask"):

    dask worker --scheduler-file=/shared/scheduler.json --nthreads=1 \\
        --preload models.foundation.dask_worker

Importing this module runs the binaries' start-up (`cli.start_process`: TensorFlow quiet, its
oneDNN kernels on unless the environment says otherwise) and then imports TensorFlow, so a
worker's first unit does not pay the import. Preloading `tensorflow` itself loads it with
TensorFlow's own default, which leaves oneDNN off on CPUs without AVX-512 (the AMD EPYCs here):
TensorFlow reads the setting once, when it loads, so the start-up a unit's set-up runs later
comes too late, and every gradient of that worker runs on the slower kernels.
"""
from models.foundation import cli

cli.start_process()

import tensorflow  # noqa: E402, F401  (after the start-up: it reads the settings as it loads)
