"""Every method name the benchmarks use, resolved to one `MethodSpec` (docs/saliency.md,
"Naming schemes").

Accepted forms:

* a base method: `gradient`, `integrated_gradients`, `grad_cam`, ... (`builtin_bases()`), a
  method registered with `saliency_gen.register_method`, or "package.module:function"
  (imported on first use, `saliency_gen.attribution.plugins`);
* a noise wrapper over any base: `smoothgrad(gradient)`, `smoothgrad_sq(integrated_gradients)`,
  `vargrad(guided_backprop)`;
* a scheme name with its prefix: ROAR generator codes and record keys (`roar:IG_SG_2`,
  `roar:ig_smooth_2`), BAM abbreviations (`bam:IG-SG`, `bam:GC`) and IDSDS names (`idsds:IG-U`,
  `idsds:Grad-CAMpp abs`). Scheme names carry their scheme's settings (baselines, quadrature,
  noise, CAM normalisation, preprocessing); keyword parameters override them.
"""
import dataclasses
from typing import Any, Optional, Sequence

from models.foundation.errors import UserError, check_known
from saliency_gen.attribution import methods, noise, plugins, units
from saliency_gen.attribution.spec import MethodSpec, make_spec

# ROAR (saliency_data_gen): logits, J = 25, spread 0.15, IG 25 pair_linspace, black baseline.
_ROAR_IG = {"baseline": "black"}
ROAR = {  # generator code: (record key, base, wrapper, params)
    "SH": ("gradient_image", "gradient", None, {}),
    "SH_SG": ("gradient_smooth", "gradient", "smoothgrad", {}),
    "SH_SG_2": ("gradient_smooth_2", "gradient", "smoothgrad_sq", {}),
    "SH_V": ("gradient_vargrad", "gradient", "vargrad", {}),
    "IG": ("ig_image", "integrated_gradients", None, _ROAR_IG),
    "IG_SG": ("ig_smooth", "integrated_gradients", "smoothgrad", _ROAR_IG),
    "IG_SG_2": ("ig_smooth_2", "integrated_gradients", "smoothgrad_sq", _ROAR_IG),
    "IG_V": ("IG_vargrad", "integrated_gradients", "vargrad", _ROAR_IG),
    "GB": ("gb_image", "guided_backprop", None, {}),
    "GB_SG": ("gb_smooth", "guided_backprop", "smoothgrad", {}),
    "GB_SG_2": ("gb_smooth_2", "guided_backprop", "smoothgrad_sq", {}),
    "GB_V": ("GB_vargrad", "guided_backprop", "vargrad", {}),
    "SOBEL": ("sobel", "sobel", None, {}),
}
ROAR_KEYS = {code: entry[0] for code, entry in ROAR.items()}

# BAM (bam/attributions.py): mean-subtracted RGB input, "SG" means SmoothGrad^2.
_BAM_IG = {"baseline": "black"}
_BAM_GC = {"cam_normalise": "max", "cam_upsample": "tf1_bilinear"}
BAM = {  # abbreviation: (base, wrapper, params, times_input)
    "VG": ("gradient", None, {}, False),
    "SG": ("gradient", "smoothgrad_sq", {}, False),
    "GB": ("guided_backprop", None, {}, False),
    "GB-SG": ("guided_backprop", "smoothgrad_sq", {}, False),
    "IG": ("integrated_gradients", None, _BAM_IG, False),
    "IG-SG": ("integrated_gradients", "smoothgrad_sq", _BAM_IG, False),
    "GC": ("grad_cam", None, _BAM_GC, False),
    "GC-SG": ("grad_cam", "smoothgrad_sq", _BAM_GC, False),
    "GGC": ("guided_grad_cam", None, {"cam_upsample": "tf1_bilinear"}, False),
    "GxI": ("grad_x_input", None, {}, False),
    "SG-GxI": ("gradient", "smoothgrad_sq", {}, True),
}
# Maps that are the product of two others (computed separately, multiplied element-wise).
PRODUCTS = {"bam:GGC-SG": ("bam:GB-SG", "bam:GC-SG")}

# IDSDS (evaluate.py): ground-truth targets (pass targets=labels), channel sum, Captum noise
# tunnel J = 4 with absolute sigma 1.0, IG Gauss-Legendre 50 points.
_IDSDS_SG = {"nsamples": 4, "noise": "absolute", "stdev": 1.0}
_IDSDS_IG = {"rule": "gausslegendre", "steps": 50}
_IDSDS_CAM = {"cam_normalise": "minmax", "cam_upsample": "bilinear"}
_IDSDS_RISE = {"n_masks": 1000, "cells": 8, "p1": 0.1}
IDSDS: dict[str, tuple[str, Optional[str], dict[str, Any]]] = {  # name: (base, wrapper, params)
    "IxG": ("grad_x_input", None, {}),
    "IxG-SG": ("grad_x_input", "smoothgrad", _IDSDS_SG),
    "IG": ("integrated_gradients", None, _IDSDS_IG),
    "IG-U": ("integrated_gradients", None, dict(_IDSDS_IG, baseline="uniform")),
    "IG-SG": ("integrated_gradients", "smoothgrad", dict(_IDSDS_IG, **_IDSDS_SG)),
    "IG-SG-SQ": ("integrated_gradients", "smoothgrad_sq", dict(_IDSDS_IG, **_IDSDS_SG)),
    "RISE": ("rise", None, _IDSDS_RISE),
    "RISE-U": ("rise", None, dict(_IDSDS_RISE, baseline="uniform")),
    "Grad-CAM": ("grad_cam", None, _IDSDS_CAM),
    "XG-CAM": ("xgrad_cam", None, _IDSDS_CAM),
    "Layer-CAM": ("layer_cam", None, _IDSDS_CAM),
    "Grad-CAMpp": ("grad_cam_pp", None, dict(_IDSDS_CAM, alpha="torchcam")),
    "SG-CAMpp": ("sg_grad_cam_pp", None, dict(_IDSDS_CAM, variant="torchcam")),
    "Bcos": ("bcos", None, {}),
    "BagNet": ("bagnet", None, {}),
    "Rollout": ("rollout", None, {}),
    "CheferLRP": ("chefer_lrp", None, {}),
}
IDSDS_ABS = ("IxG", "IxG-SG", "IG", "IG-U", "IG-SG", "IG-SG-SQ", "RISE", "RISE-U")


def builtin_bases() -> tuple:
    """The names of the built-in base methods, in registration order."""
    return tuple(name for name, unit in units.REGISTRY.items()
                 if type(unit).__module__.startswith(methods.__name__))


def _all_names():
    bases = builtin_bases()
    listed = list(bases)
    listed += [f"{wrapper}({base})" for wrapper in noise.WRAPPERS for base in bases
               if getattr(units.unit(base), "wrappable", False)]
    listed += [f"roar:{code}" for code in ROAR] + [f"roar:{key}" for key, *_ in ROAR.values()]
    listed += [f"bam:{name}" for name in BAM] + list(PRODUCTS)
    listed += [f"idsds:{name}" for name in IDSDS] + [f"idsds:{name} abs" for name in IDSDS_ABS]
    return tuple(listed)


METHODS = _all_names()


def method_names() -> tuple:
    """Every accepted name now: `METHODS` plus the registered user methods."""
    return METHODS + tuple(name for name in units.REGISTRY if name not in METHODS
                           and not type(units.REGISTRY[name]).__module__.startswith(
                               methods.__name__))


def roar_code(name: str) -> str:
    """The ROAR generator code of a code or record key (`ig_smooth_2` -> `IG_SG_2`)."""
    if name in ROAR:
        return name
    for code, entry in ROAR.items():
        if entry[0] == name:
            return code
    raise UserError(f"unknown ROAR method {name!r}; codes: {', '.join(ROAR)}")


def _scheme_entry(scheme, name, params):
    """(base, wrapper, defaults, extras) of a scheme name."""
    if scheme == "roar":
        code = roar_code(name)
        _, base, wrapper, defaults = ROAR[code]
        defaults = dict(defaults)
        if params.pop("legacy_ig_sg_sq_baseline", False) and code == "IG_SG_2":
            defaults["baseline"] = "zeros"  # the original passed no baseline for IG_SG_2
        return base, wrapper, defaults, {"preprocessing": "imagenet"}
    if scheme == "bam":
        if name not in BAM:
            raise UserError(f"unknown BAM method {name!r}; names: {', '.join(BAM)}")
        base, wrapper, defaults, times_input = BAM[name]
        return base, wrapper, dict(defaults), {"times_input": times_input,
                                               "preprocessing": "caffe_rgb"}
    if scheme == "idsds":
        transform = "raw"
        if name.endswith(" abs"):
            name, transform = name[:-4], "abs"
            if name not in IDSDS_ABS:
                raise UserError(f"IDSDS has no abs variant of {name!r}")
        if name not in IDSDS:
            raise UserError(f"unknown IDSDS method {name!r}; names: {', '.join(IDSDS)}")
        base, wrapper, idsds_defaults = IDSDS[name]
        return base, wrapper, dict(idsds_defaults), {"transform": transform, "reduce": "sum"}


def is_scheme_name(method: str) -> bool:
    """Is `method` a naming-scheme name (`roar:...`, `bam:...`, `idsds:...`)?"""
    return ":" in method and method.split(":", 1)[0].lower() in plugins.SCHEMES


def _base_name(name: str) -> str:
    """A base method's registered name; "package.module:function" is imported on first use."""
    if units.unit(name) is None and ":" in name:
        return plugins.load(name)
    if units.unit(name) is None:
        raise UserError(f"unknown method {name!r}; use a base method "
                        f"({', '.join(builtin_bases())}), wrapper(base), a scheme name "
                        "(roar:IG_SG_2, bam:GC, idsds:IG-U), a registered method or "
                        "'package.module:function'; saliency_gen.METHODS lists the built-ins")
    return name


def resolve(method: str, **params: Any) -> MethodSpec:
    """The `MethodSpec` for a method name (see the module docstring) and parameter overrides.

    Besides method parameters, `params` may hold `transform`, `reduce` and `times_input`.
    Scheme names also carry a `preprocessing` (returned as `scheme_preprocessing(method)`).
    """
    if not isinstance(method, str) or not method:
        raise UserError(f"method must be a name; got {method!r}")
    params = dict(params)
    extras = {}
    if "(" in method and method.endswith(")"):
        wrapper, base = method[:-1].split("(", 1)
        if "=" in base:  # e.g. integrated_gradients(steps=50)
            raise UserError(f"method {method!r}: settings are not part of a method's name; "
                            "pass them as keyword arguments, saliency_gen.attribute(model, "
                            f"images, {wrapper!r}, targets, {base.split(',')[0].strip()}), or "
                            "name a 'package.module:function' method that sets them "
                            "(docs/saliency.md)")
        check_known(wrapper, noise.WRAPPERS, "noise wrapper")
        base = _base_name(base)
    elif is_scheme_name(method):
        scheme, name = method.split(":", 1)
        base, wrapper, defaults, extras = _scheme_entry(scheme.lower(), name, params)
        params = dict(defaults, **params)
    else:
        base, wrapper = _base_name(method), None
    post = {key: params.pop(key, extras.get(key, default)) for key, default in
            (("transform", "raw"), ("reduce", "none"), ("times_input", False))}
    return make_spec(base, wrapper, **post, **params)


def scheme_preprocessing(method: Any) -> Optional[str]:
    """The input space a scheme name implies (ROAR: imagenet, BAM: caffe_rgb), else None."""
    if isinstance(method, str) and ":" in method:
        scheme = method.split(":", 1)[0].lower()
        return {"roar": "imagenet", "bam": "caffe_rgb"}.get(scheme)
    return None


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A method name resolved once, to be passed on instead of the name: its `MethodSpec` (None
    for a product of two methods, whose `parts` are resolved instead) and the input space its
    scheme implies."""

    name: str
    spec: Optional[MethodSpec]
    parts: tuple = ()
    preprocessing: Optional[str] = None
    code: tuple = ()  # sorted (unit name, `plugins.user_code` digest) of its user units

    @property
    def options(self) -> dict:
        """The spec's parameters ({} for a product)."""
        return self.spec.options if self.spec is not None else {}

    def evaluations(self, shape: Sequence[int]) -> int:
        """Model evaluations per image of `shape` (H, W, C) (a product: its parts')."""
        if self.spec is not None:
            return self.spec.evaluations(shape)
        return sum(part.evaluations(shape) for part in self.parts)

    @property
    def code_origin(self) -> dict:
        """{user unit: digest of its code}, for every origin that names the method ({} for the
        package's own methods): an edited method no longer matches its old outputs."""
        return dict(self.code)


def resolved(method: Any, **params: Any) -> Resolved:
    """`method` (a name, or a `Resolved` given back as it is) with `params` resolved once: an
    unknown name stops here with one line."""
    if isinstance(method, Resolved):
        if params:
            raise ValueError("parameter overrides apply to a method name, not a resolved method")
        return method
    if method in PRODUCTS:
        parts = tuple(resolved(part, **params) for part in PRODUCTS[method])
        code = tuple(sorted({pair for part in parts for pair in part.code}))
        return Resolved(method, None, parts, scheme_preprocessing(method), code)
    spec = resolve(method, **params)
    digest = plugins.user_code(spec.unit)
    if digest:
        plugins.warn_if_edited(spec.unit, spec.base, digest)
    return Resolved(method, spec, (), scheme_preprocessing(method),
                    ((spec.base, digest),) if digest else ())
