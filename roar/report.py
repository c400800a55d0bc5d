"""`python -m roar.report`: mean and standard deviation of every ROAR / KAR cell of a sweep.

    python -m roar.report --output_dir=roar_runs

Reads every `metrics.json` under `--output_dir` and writes `<output>.csv` (one row per run),
`<output>.md` (mean ± sd and the 95% t-interval over seeds of top-1 per method, mode and
fraction removed) and `<output>.png` (top-1 against the fraction removed, one line per method
and mode, shaded over the interval; the random baseline dashed),
in the style of the ROAR paper's figure.
"""
import dataclasses
import glob
import os
from typing import Optional

from models.foundation import results
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError
from models.foundation.files import read_json
from models.foundation.metric_spec import legend
from roar import metric_definitions, summaries


@dataclasses.dataclass(frozen=True)
class Config:
    """roar.report's options (one flag each)."""

    output_dir: str = option("roar_runs", "Root of the run folders.")
    output: Optional[str] = option(None, "Output stem (default: <output_dir>/roar_report).")


def collect(output_dir: str) -> list:
    """One row per finished run: method, mode, fraction_removed, seed, top1, top5, n_eval."""
    rows = []
    for path in sorted(glob.glob(os.path.join(output_dir, "**", "metrics.json"),
                                 recursive=True)):
        metrics = read_json(path, "metrics file", results.METRICS_SCHEMA)
        run_flags = metrics.get("flags", {})
        transformation = run_flags.get("transformation", "modified_image")
        method = {"random_baseline": "random", "raw_image": "clean"}.get(
            transformation, run_flags.get("saliency_method") or "unknown")
        rows.append({"method": method,
                     "mode": "KAR" if run_flags.get("keep_information") else "ROAR",
                     "fraction_removed": float(run_flags.get("ratio") or 0.0),
                     "seed": metrics.get("seed"), "top1": metrics["top1"],
                     "top5": metrics["top5"], "n_eval": metrics["n_eval"], "path": path})
    return rows


def run(config: Config) -> list:
    """Summarises every finished run under `config.output_dir`; returns the summary rows."""
    f = config
    rows = collect(f.output_dir)
    if not rows:
        raise UserError(f"no metrics.json under {f.output_dir}; run python -m roar.sweep first")
    summary = summaries.summarise(rows, ["method", "mode", "fraction_removed"], "top1")
    stem = f.output or os.path.join(f.output_dir, "roar_report")
    summaries.write_outputs(stem, rows, summary,
                            ["method", "mode", "fraction_removed", "mean ± sd", "95% interval",
                             "n"],
                            "fraction_removed", ["method", "mode"], "top-1 test accuracy",
                            "accuracy after retraining", panel_key="mode")
    print(summaries.markdown_table(summary, ["method", "mode", "fraction_removed", "mean ± sd",
                                             "95% interval", "n"]))
    print(legend(metric_definitions.RETRAINING))  # the same words as the report card's
    print(f"wrote {stem}.csv, .md and .png")
    return summary


if __name__ == "__main__":
    run_binary(Config, run)
