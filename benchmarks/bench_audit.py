"""Privacy audit on the digits reproduction setting (28x28): what a curious teacher learns.

Same data split and teacher as ``bench_reproduction.py`` (scikit-learn digits
resized to 28x28, split 0.4 teacher / 0.4 private / 0.2 held-out, CNN teacher
trained on the teacher part, client post-processing ``blur:1.5,clip``, queries
clipped to [0, 1] on the wire). For each per-element epsilon (Laplace, with the
reduction before noise used there) the client's SIDP, Rand and Sup queries are
simulated on the private records and attacked:

* linkage: top-1 re-identification among the n private records (chance 1/n; Sup:
  best pair contains a source, chance ~4/n);
* reconstruction: per-query denoising (best of filters / a CNN trained on
  synthetic strokes), SSIM and PSNR vs the originals, and how often the teacher
  labels the reconstruction like the original (chance = a random other record);
* empirical epsilon per element of each mechanism (Clopper-Pearson, 95%);
* membership inference (loss threshold) on a student trained with LDPKiT-Sup at
  epsilon 1 vs a student trained on the clean records;
* Reverse Manifold Embedding on 8x8 digit feature vectors.

    nice -n 10 .venv/bin/python benchmarks/bench_audit.py            # full table
    nice -n 10 .venv/bin/python benchmarks/bench_audit.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reproduction import train_teacher  # noqa: E402  (same teacher as the reproduction)

from ldpclient.audit import audit_mechanism, membership_inference, rme_linkage_audit, run_audit  # noqa: E402
from ldpclient.io.datasets import load_digits_images, split_indices  # noqa: E402
from ldpclient.privacy import discrete_tldp, gaussian, laplace, tldp_gaussian, tldp_laplace  # noqa: E402
from ldpclient.teachers.local import LocalTeacher  # noqa: E402
from ldpclient.transfer.pipeline import KnowledgeTransfer  # noqa: E402
from ldpclient.transfer.postprocess import parse_postprocess  # noqa: E402
from ldpclient.transfer.settings import PlanSettings, TrainingSettings


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", nargs="+", default=["0.5:1", "1:1", "2:1", "4:1", "1:4", "2:4"],
                   help="per-element epsilon:reduction pairs")
    p.add_argument("--cnn-steps", type=int, default=100)
    p.add_argument("--max-queries", type=int, default=1500)
    p.add_argument("--queries-per-record", type=float, default=3.0)
    p.add_argument("--teacher-epochs", type=int, default=30)
    p.add_argument("--student-epochs", type=int, default=3)
    p.add_argument("--postprocess", default="blur:1.5,clip")
    p.add_argument("--out", default=None, help="folder for the per-setting reports (default: a temporary folder)")
    p.add_argument("--quick", action="store_true", help="2 settings, 200 records, no CNN, no students")
    args = p.parse_args(argv)
    if args.out is None:
        args.out = tempfile.mkdtemp(prefix="ldpclient-audit-")
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    t0 = time.perf_counter()
    x, y = load_digits_images(28)
    tr, pv, ho = split_indices(len(x), (0.4, 0.4, 0.2), seed=0)
    if args.quick:
        args.settings, args.cnn_steps, pv = ["1:1", "4:1"], 0, pv[:200]
    teacher_model = train_teacher(x[tr], y[tr], epochs=10 if args.quick else args.teacher_epochs)
    judge = lambda v: teacher_model(v).argmax(1)  # noqa: E731
    private = x[pv]
    print(f"# digits 28x28: private n={len(pv)}, postprocess={args.postprocess!r}, cnn_steps={args.cnn_steps}, "
          f"threads={torch.get_num_threads()}", flush=True)

    sweep = {}
    for s in args.settings:
        e, r = s.split(":")
        sweep[(float(e), int(r))] = laplace(float(e), reduction=int(r), per="element")
    rows = []
    for (eps, red), mech in sweep.items():
        t = time.perf_counter()
        rep = run_audit(private, sweep={eps: mech}, transforms=parse_postprocess(args.postprocess), teacher=judge,
                        queries_per_record=args.queries_per_record, empirical=False, rme=False,
                        cnn_steps=args.cnn_steps, max_queries=args.max_queries,
                        out_dir=Path(args.out) / f"eps{eps:g}_r{red}")
        for row in rep["summary"]:
            row["reduction"] = red
            rows.append(row)
        print(f"  eps={eps:g} red={red}: {time.perf_counter() - t:.0f}s", flush=True)

    print("\n| eps/element | red. | eps/record | augment | linkage top-1 (chance, no noise) | Sup exact pair | "
          "recon SSIM (chance) | PSNR dB | teacher agrees (chance) | linked SSIM | denoiser |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        pair = f"{r['linkage_pair']:.3f}" if "linkage_pair" in r else "-"
        print(f"| {r['epsilon_element']:g} | {r['reduction']} | {r['epsilon_record']:g} | {r['augment']} | "
              f"{r['linkage_top1']:.3f} ({r['linkage_chance']:.4f}, {r['linkage_no_noise']:.2f}) | {pair} | "
              f"{r['recon_ssim']:.3f} ({r['recon_chance_ssim']:.3f}) | {r['recon_psnr_db']:.1f} | "
              f"{r['recon_teacher_agreement']:.3f} ({r['recon_teacher_chance']:.3f}) | {r['linked_ssim']:.3f} | "
              f"{r['denoiser']} |")

    print("\n| mechanism | record shape | reported eps/elem (delta) | paper eps | empirical lower bound | "
          "ignoring delta | event | flag |")
    print("|---|---|---|---|---|---|---|---|")
    mechs = [
        ("laplace(1)", laplace(1.0, per="element"), (1, 28, 28), None),
        ("laplace(1, secure)", laplace(1.0, secure=True, per="element"), (1, 28, 28), None),
        ("gaussian(1, 1e-5)", gaussian(1.0, per="element"), (1, 28, 28), None),
        ("tldp-laplace(1)", tldp_laplace(1.0, per="element"), (1, 28, 28), 1.0),
        ("tldp-laplace(1)", tldp_laplace(1.0, per="element"), (2,), 1.0),
        ("tldp-laplace(1)", tldp_laplace(1.0, per="element"), (1, 2, 2), 1.0),
        ("tldp-gaussian(1)", tldp_gaussian(1.0, per="element"), (2,), 1.0),
        ("discrete-tldp(3)", discrete_tldp(3.0, per="element"), (1, 28, 28), None),
        ("discrete-tldp(p=0.3, b=100)", discrete_tldp(p=0.3, b=100.0, per="element"), (1, 28, 28), None),
    ]
    for name, m, shape, paper in mechs:
        r = audit_mechanism(m, shape, paper_epsilon=paper, samples=400_000)
        flag = "reported guarantee VIOLATED" if r["violated"] else (
            "paper's pure claim refuted" if r.get("paper_claim_violated") else "ok")
        print(f"| {name} | {tuple(shape)} | {r['claimed_epsilon']:.4g} ({r['claimed_delta']:.3g}) | "
              f"{paper if paper is not None else '-'} | {r['epsilon_lb']:.3f} | {r['epsilon_lb_pure']:.3f} | "
              f"`{r['event']}` | {flag} |")

    if not args.quick:
        print("\n# membership inference (members: private records, non-members: held-out part; true labels)")
        teacher = LocalTeacher(teacher_model, (1, 28, 28), 10, name="digits28")
        kt = KnowledgeTransfer(
            teacher,
            laplace(1.0, per="element"),
            mode="ldpkit",
            seed=0,
            release_generator=torch.Generator().manual_seed(1000),
            plan=PlanSettings(augment="sup", num_queries=6000, postprocess=args.postprocess),
            training=TrainingSettings(epochs=args.student_epochs, batch_size=128, lr=2e-3, device="cpu",
                                      student_kwargs={"width": 16}, val_fraction=0.0),
        )
        student = kt.run(private).student
        with torch.no_grad():
            tlab = teacher_model(private).argmax(1)
        clean_student = train_teacher(private, tlab, epochs=args.teacher_epochs, seed=1)
        mi = membership_inference(student, private, y[pv], x[ho], y[ho], baseline_model=clean_student)
        print("| student | AUC | TPR @ 1% FPR | mean loss members / non-members |")
        print("|---|---|---|---|")
        for name, key in (("LDPKiT-Sup, eps 1/element", "student"), ("clean records (no noise)", "no_noise")):
            s = mi[key]
            print(f"| {name} | {s['auc']:.3f} | {s['tpr_at_0.01_fpr']:.3f} | "
                  f"{s['mean_loss_members']:.3f} / {s['mean_loss_nonmembers']:.3f} |")
        print("| chance | 0.500 | 0.010 | |")

    print("\n# Reverse Manifold Embedding on 8x8 digit feature vectors (64 dims, all 1,797 records)")
    x8, y8 = load_digits_images(8)
    feats = x8.flatten(1)
    print("| Laplace b (eps/elem) | plain linkage | invertible RME, attacker inverts | invertible RME, embedded NN | "
          "folding RME, best attack | 1-NN utility plain / invertible / folding | chance |")
    print("|---|---|---|---|---|---|---|")
    for b in (0.25, 0.5, 1.0):
        r = rme_linkage_audit(feats, b, labels=y8)
        u = r["utility_1nn"]
        print(f"| {b:g} ({1 / b:g}) | {r['plain_l1']:.3f} | {r['invertible']['attacker_inverts_l1']:.3f} "
              f"(inversion error {r['invertible']['max_inversion_error']:.1e}) | "
              f"{r['invertible']['embedded_nearest_l2']:.3f} | "
              f"{max(r['folding'].values()):.3f} | {u['plain']:.3f} / {u['invertible']:.3f} / {u['folding']:.3f} | "
              f"{r['chance']:.4f} |")
    print(f"\n# total {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
