"""Privacy audit: what an honest-but-curious teacher could learn from the queries it saw.

Attacks (each reported next to a no-noise baseline and random guessing):
reconstruction (:mod:`.reconstruction`), linkage / re-identification
(:mod:`.linkage`), empirical epsilon (:mod:`.empirical_epsilon`), membership
inference on the student (:mod:`.membership`), and the Reverse Manifold Embedding
audit (:mod:`.rme`). :func:`run_audit` runs them all and writes the report.
"""

from .denoise import DenoiserBank, build_denoisers
from .empirical_epsilon import audit_mechanism, empirical_epsilon
from .linkage import linkage_attack
from .membership import membership_inference
from .metrics import mse, psnr, ssim
from .noise_model import NoiseModel
from .reconstruction import reconstruction_attack
from .report import audit_queries, load_plan, load_query_log, run_audit, simulate_client, sources_from_plan
from .rme import ReverseManifoldEmbedding, rme_linkage_audit

__all__ = [
    "DenoiserBank",
    "NoiseModel",
    "ReverseManifoldEmbedding",
    "audit_mechanism",
    "audit_queries",
    "build_denoisers",
    "empirical_epsilon",
    "linkage_attack",
    "load_plan",
    "load_query_log",
    "membership_inference",
    "mse",
    "psnr",
    "reconstruction_attack",
    "rme_linkage_audit",
    "run_audit",
    "simulate_client",
    "sources_from_plan",
    "ssim",
]
