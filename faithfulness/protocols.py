"""The vocabulary of the faithfulness protocols, light (no TensorFlow) so that a binary checks
its flags before it starts (docs/faithfulness.md): the IDSDS flags' choices, and each protocol's
metrics declared once (`models.foundation.metric_spec`), which `faithfulness.evaluate` prints and
the report card shows."""
from models.foundation.metric_spec import MetricSpec

BASELINES = ("zeros", "blur", "random")  # what a deleted cell becomes
ORDERS = ("ascending", "descending")  # incremental deletion: least or most relevant cell first

METRICS = {  # protocol -> the metrics it gives, in its output's order
    "single_deletion": (MetricSpec("sds", True, about="rank correlation of cell attributions "
                                                      "and output drops"),),
    # Least relevant cells deleted first (id_order ascending): a faithful map keeps the output
    # up for longer, so the mean of the curve is higher.
    "incremental_deletion": (MetricSpec("score", True, about="mean softmax output as cells are "
                                                             "deleted, least relevant first"),),
    "deletion": (MetricSpec("dauc", False, about="area under the deletion curve"),
                 MetricSpec("dc", True, about="deletion correlation")),
    "insertion": (MetricSpec("iauc", True, about="area under the insertion curve"),
                  MetricSpec("ic", True, about="insertion correlation")),
    "iic_ad": (MetricSpec("iic", True, about="share of images whose score rises",
                          note="a share of images whose score rises when only the map's region "
                               "is kept; such rises are rare, so several methods often share "
                               "the same count (often 0) and tie."),
               MetricSpec("ad", False, about="average relative drop")),
    "add": (MetricSpec("add", True, about="average drop when the salient part is deleted",
                       note="the min-max scaled map is used as a soft mask, so a map that is "
                            "high everywhere removes more of the image: a random map (about 0.5 "
                            "everywhere) deletes half of every pixel and drops the score more "
                            "than a focused map, whatever it explains."),),
}


def names(protocol: str) -> tuple:
    """The names of the protocol's metrics, in its output's order."""
    return tuple(spec.name for spec in METRICS[protocol])


def named(protocol: str, *values: object) -> dict:
    """{metric name: value} of the protocol's metrics, in order (one value per metric)."""
    return dict(zip(names(protocol), values, strict=True))
