"""Probe for issue 90 (not a maintained benchmark): default label runs (no weights) whose adapted outputs, labels and
truth are saved per set, teacher, mode and seed, for ``probe_feature_view.py``::

    .venv/bin/python benchmarks/probe_view_runs.py cifar10 small_cnn 0,1,2 ldpkit,data-free
"""

import sys
import time

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import bench_adapt as B

from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.settings import PlanSettings, TrainingSettings

torch.set_num_threads(1)
__import__("os").makedirs("/tmp/ldpclient-probe", exist_ok=True)
name, teacher_arch = sys.argv[1], sys.argv[2]
seeds = [int(s) for s in sys.argv[3].split(",")]
modes = sys.argv[4].split(",") if len(sys.argv) > 4 else ["ldpkit"]
label, tx, ty, px, py = B.load_dataset(name, 0)
model = B.cached_teacher(label, tx, ty, teacher_arch)
teacher = B.LocalTeacher(model, tuple(px.shape[1:]), 10, name=label)
base = B.resolve(B.parse_setting("laplace:100:-:-:-:-"), tuple(px.shape[1:]), len(px), "dct")
for seed in seeds:
    for mode in modes:
        mech = B.mechanism(
            base["mechanism"], base["eps_record"] if mode == "ldpkit" else 20.0, base["reduce"], {"basis": "dct"}
        )
        kt = KnowledgeTransfer(
            teacher,
            mech,
            mode=mode,
            seed=seed,
            release_generator=torch.Generator().manual_seed(1000 + seed),
            plan=PlanSettings(num_queries=base["queries"], postprocess=base["postprocess"]),
            training=TrainingSettings(epochs=base["epochs"], batch_size=base["train_batch"], device="cpu"),
        )
        t = time.perf_counter()
        res = kt.run(px)
        wall = time.perf_counter() - t
        probs = res.adaptation.probs
        acc = float((res.labels == py).float().mean())
        torch.save(
            {
                "probs": probs,
                "labels": res.labels,
                "truth": py,
                "unadapted": res.unadapted_labels,
                "wall": wall,
                "adapt_s": res.timings.get("adapt"),
            },
            f"/tmp/ldpclient-probe/dct-{label}-{teacher_arch}-{mode}-{seed}.pt",
        )
        print(label, teacher_arch, mode, seed, round(acc, 4), round(wall, 1), flush=True)
