"""The test suite; its folders mirror the packages (tests/models, tests/saliency_gen, tests/bam,
tests/roar, tests/faithfulness), and the top level holds the cross-package tests."""
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
