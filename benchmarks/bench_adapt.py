"""Defaults study: what a label run buys per epsilon, with and without on-device adaptation.

On scikit-learn's real digits (bundled), split 0.4/0.4/0.2 (teacher/private/held out), a
CNN teacher is trained on the teacher part; the private part (719 records) is labelled by
:class:`ldpclient.transfer.pipeline.KnowledgeTransfer` with an in-process
:class:`~ldpclient.teachers.local.LocalTeacher`. Every run reports, from the same trained
student, the label accuracy **before** and **after** adaptation on the clean private
records, and is repeated in ``data-free`` mode (blank records, epsilon 0) with the same
query budget, training and adaptation: the baseline a private run must beat.

Settings are given as ``mechanism:eps_record:reduce:queries:epochs:train_batch[:postprocess]``
(per-record epsilon; Gaussian at delta = 1e-5 per record; postprocess spec with ``;`` for ``,``,
default: ``ldpclient.transfer.defaults.postprocess`` for the image size). Results are appended to a JSONL file
(one line per run, resumable: finished runs are skipped) and ``--table`` prints the
mean ± std over seeds as a markdown table::

    .venv/bin/python benchmarks/bench_adapt.py --size 28 8 --seeds 3 \\
        --settings gaussian:50:4:20000:5:128 laplace:50:4:20000:5:128 --out study.jsonl
    .venv/bin/python benchmarks/bench_adapt.py --table --out study.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from ldpclient.datasets import load_digits_images, split_indices
from ldpclient.privacy import gaussian, laplace
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer import defaults
from ldpclient.transfer.pipeline import KnowledgeTransfer

DELTA = 1e-5


def train_teacher(x: torch.Tensor, y: torch.Tensor, *, epochs: int = 30, seed: int = 0) -> torch.nn.Module:
    from bench_reproduction import train_teacher as train

    return train(x, y, epochs=epochs, seed=seed)


def mechanism(name: str, eps_record: float, reduce: int):
    if name == "gaussian":
        return gaussian(eps_record, DELTA, per="record", reduction=reduce)
    return laplace(eps_record, per="record", reduction=reduce)


def run_one(teacher, records, truth, setting: dict, seed: int, mode: str, adapt: bool, fuse: bool = True) -> dict:
    mech = mechanism(setting["mechanism"], setting["eps_record"], setting["reduce"])
    kt = KnowledgeTransfer(
        teacher,
        mech,
        mode=mode,
        augmentation="sup",
        num_queries=setting["queries"],
        postprocess=setting.get("postprocess") or defaults.postprocess(records.shape[1:]),
        epochs=setting["epochs"],
        batch_size=setting["train_batch"],
        seed=seed,
        device="cpu",
        val_fraction=0.0,
        adapt=adapt,
        fuse=fuse,
        release_generator=torch.Generator().manual_seed(1000 + seed),
    )
    t0 = time.perf_counter()
    res = kt.run(records)
    wall = time.perf_counter() - t0
    def accuracy(labels: torch.Tensor | None, default: float) -> float:
        return default if labels is None else float((labels == truth).float().mean())

    acc = accuracy(res.labels, 0.0)  # final: adapted, then fused where fusion applies
    adapted = accuracy(res.unfused_labels, acc)
    return {
        "accuracy": adapted,
        "accuracy_unadapted": accuracy(res.unadapted_labels, adapted),
        "accuracy_fused": acc,
        "fusion_informativeness": res.fusion_informativeness,
        "wall_s": round(wall, 2),
        "adapt_s": round(res.timings.get("adapt", 0.0), 2),
        "eps_record": res.guarantee.epsilon_record,
        "eps_element": res.guarantee.epsilon_element,
        "released_elements": res.guarantee.elements_per_record,
    }


def parse_setting(text: str) -> dict:
    """``mechanism:eps_record:reduce:queries:epochs:train_batch[:postprocess]`` (postprocess with ``;`` for ``,``)."""
    mech, eps, red, q, ep, tb, *pp = text.split(":", 6)
    out = {"mechanism": mech, "eps_record": float(eps), "reduce": int(red), "queries": int(q),
           "epochs": int(ep), "train_batch": int(tb)}
    if pp:
        out["postprocess"] = pp[0].replace(";", ",")
    return out


def key_of(size: int, setting: dict, seed: int, mode: str) -> str:
    return json.dumps({"size": size, **setting, "seed": seed, "mode": mode}, sort_keys=True)


def _read_runs(paths: list[Path]) -> list[dict]:
    """Runs from the JSONL files, first occurrence of each key kept (so files may be merged)."""
    runs: dict[str, dict] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            r = json.loads(line)
            runs.setdefault(r["key"], r)
    return list(runs.values())


def table(paths: list[Path]) -> None:
    rows: dict[tuple, dict[str, list[float]]] = {}
    for r in _read_runs(paths):
        k = (r["size"], r["mechanism"], r["eps_record"], r["reduce"], r.get("postprocess") or defaults.postprocess((r["size"], r["size"])),
             r["queries"], r["epochs"], r["train_batch"])
        d = rows.setdefault(k, {})
        d.setdefault(f"{r['mode']}_adapted", []).append(r["accuracy"])
        d.setdefault(f"{r['mode']}_unadapted", []).append(r["accuracy_unadapted"])
        d.setdefault(f"{r['mode']}_wall", []).append(r["wall_s"])
        d.setdefault(f"{r['mode']}_adapt_s", []).append(r["adapt_s"])
        if "fusion_informativeness" in r and r["mode"] == "ldpkit":  # fused with the Dawid-Skene model
            d.setdefault("fused", []).append(r["accuracy_fused"])

    def ms(v: list[float] | None, scale: float = 100.0) -> str:
        if not v:
            return "-"
        sd = statistics.stdev(v) if len(v) > 1 else 0.0
        return f"{scale * statistics.mean(v):.1f} ± {scale * sd:.1f}"

    print("| size | mechanism | eps/record | reduce | postprocess | queries | epochs | batch | seeds | "
          "private, unadapted | private, adapted | private, adapted + fused | data-free, unadapted | "
          "data-free, adapted | gain (adapted vs adapted) | adapt time / rest of run |")
    print("|" + "---|" * 17)
    for k in sorted(rows):
        d = rows[k]
        p, b = d.get("ldpkit_adapted", []), d.get("data-free_adapted", [])
        gain = [x - y for x, y in zip(p, b, strict=True)] if p and b and len(p) == len(b) else []
        share = [a / max(1e-9, w - a) for a, w in zip(d.get("ldpkit_adapt_s", []), d.get("ldpkit_wall", []), strict=True)]
        print(f"| {k[0]}x{k[0]} | {k[1]} | {k[2]:g} | {k[3]} | {k[4]} | {k[5]} | {k[6]} | {k[7]} | {len(p)} | "
              f"{ms(d.get('ldpkit_unadapted'))} | {ms(p)} | {ms(d.get('fused'))} | "
              f"{ms(d.get('data-free_unadapted'))} | {ms(b)} | "
              f"{ms(gain)} | {ms(share, 100.0)}% |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, nargs="+", default=[28])
    p.add_argument("--settings", nargs="+", default=["gaussian:50:4:20000:5:128"])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--modes", nargs="+", default=["ldpkit", "data-free"])
    p.add_argument("--no-adapt", action="store_true", help="measure without the adaptation stage (time only)")
    p.add_argument("--out", type=Path, default=Path("bench_adapt.jsonl"), help="JSONL file the runs go to")
    p.add_argument("--merge", type=Path, nargs="*", default=[], help="with --table: more JSONL files to include")
    p.add_argument("--table", action="store_true")
    args = p.parse_args(argv)
    if args.table:
        table([args.out, *args.merge])
        return
    torch.set_num_threads(1)
    done = set()
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            r = json.loads(line)
            done.add(r["key"])
    for size in args.size:
        x, y = load_digits_images(size)
        tr, pv, _ = split_indices(len(x), (0.4, 0.4, 0.2), seed=0)
        model = train_teacher(x[tr], y[tr])
        teacher = LocalTeacher(model, (1, size, size), 10, name=f"digits{size}")
        with torch.no_grad():
            t_acc = float((model(x[pv]).argmax(1) == y[pv]).float().mean())
        print(f"# {size}x{size}: teacher on clean private records {t_acc:.3f}, n={len(pv)}", flush=True)
        for text in args.settings:
            setting = parse_setting(text)
            if size % setting["reduce"]:
                continue
            for seed in range(args.seeds):
                for mode in args.modes:
                    key = key_of(size, setting, seed, mode) + ("|noadapt" if args.no_adapt else "")
                    if key in done:
                        continue
                    r = run_one(teacher, x[pv], y[pv], setting, seed, mode, not args.no_adapt)
                    r.update({"key": key, "size": size, **setting, "seed": seed, "mode": mode, "teacher": t_acc})
                    with args.out.open("a") as fh:
                        fh.write(json.dumps(r) + "\n")
                    print(f"{size} {text} seed={seed} {mode:9s} unadapted={r['accuracy_unadapted']:.3f} "
                          f"adapted={r['accuracy']:.3f} fused={r['accuracy_fused']:.3f} info={r['fusion_informativeness']} "
                          f"wall={r['wall_s']}s adapt={r['adapt_s']}s", flush=True)


if __name__ == "__main__":
    main()
