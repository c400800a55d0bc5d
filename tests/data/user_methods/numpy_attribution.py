"""A researcher's method written in NumPy, named by its string: traced as written it fails
with one line saying how to run it eagerly; `sign_eager`, marked `traced = False`, runs
eagerly on whole groups of images."""
import numpy as np


def sign(model, images, targets):
    """The sign of the image itself (NumPy: cannot be traced)."""
    return np.sign(np.asarray(images))


def sign_eager(model, images, targets):
    """`sign`, run eagerly."""
    return np.sign(np.asarray(images))


sign_eager.traced = False
