"""Cheaper inference for the labelling passes: speed and label agreement (issue 23, item 4).

Trains ``small_cnn`` on clean teacher-split images (digits upscaled to 28x28, and MNIST-5k's
3,500 teacher images) and then times the same prediction over the records five ways, in one
process, on the same batches (512 per batch, ``--threads`` intra-op threads):

* ``baseline``: what ldpclient did before (``torch.no_grad``, contiguous NCHW);
* ``inference_mode``: the same under ``torch.inference_mode``;
* ``channels_last``: a copy of the model and each batch in NHWC (``torch.channels_last``);
* ``compile``: ``torch.compile`` of the model (skipped with the reason if it fails here);
* ``int8-dynamic``: ``torch.ao.quantization.quantize_dynamic`` on the Linear layers;
* ``int8-static``: FX graph-mode static quantization of every layer (``x86`` qconfig), calibrated on the
  first 2,048 records to be labelled (local data: in a run these are the clean private records);
* ``bf16``: the channels-last copy under CPU autocast to bfloat16 (fast only where the CPU has bf16 units).

For each: ms per image (median of ``--repeats`` passes over ``--records`` tiled records) and, on
the distinct private records, how many labels differ from the baseline's (the adoption bar is
99.9 % equal), for one student per ``--seeds`` trained ``--epochs`` epochs.

Run:  .venv/bin/python benchmarks/bench_inference.py [--records 20000] [--repeats 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ldpclient.io.datasets import load_digits_images
from ldpclient.transfer.student import small_cnn

try:
    import mnist5k
except ImportError:  # run from the repository root
    from benchmarks import mnist5k  # type: ignore[no-redef]

BATCH = 512


def train(x: torch.Tensor, y: torch.Tensor, epochs: int = 2, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = small_cnn(num_classes=10, in_channels=1, image_size=28)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(epochs):
        order = torch.randperm(len(y))
        for s in range(0, len(y), 64):
            idx = order[s : s + 64]
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model.eval()


def labels_with(run: Callable[[torch.Tensor], torch.Tensor], records: torch.Tensor) -> torch.Tensor:
    return torch.cat([run(records[s : s + BATCH]).argmax(1) for s in range(0, len(records), BATCH)])


def timed(run: Callable[[torch.Tensor], torch.Tensor], records: torch.Tensor, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for s in range(0, len(records), BATCH):
            run(records[s : s + BATCH])
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / len(records) * 1000.0


def ways(model: nn.Module, calibration: torch.Tensor) -> dict[str, Callable[[torch.Tensor], torch.Tensor] | str]:
    """Each way of predicting with ``model`` (or why it cannot run here); ``calibration``: records for int8-static."""
    out: dict[str, Callable[[torch.Tensor], torch.Tensor] | str] = {}

    def baseline(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return model(x)

    def inference_mode(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return model(x)

    nhwc = copy.deepcopy(model).to(memory_format=torch.channels_last)

    def channels_last(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return nhwc(x.contiguous(memory_format=torch.channels_last))

    out.update(baseline=baseline, inference_mode=inference_mode, channels_last=channels_last)
    try:
        compiled = torch.compile(copy.deepcopy(model))
        with torch.inference_mode():
            compiled(torch.zeros(2, 1, 28, 28))

        def compile_run(x: torch.Tensor) -> torch.Tensor:
            with torch.inference_mode():
                return compiled(x)

        out["compile"] = compile_run
    except Exception as exc:  # noqa: BLE001 - report why it cannot be used here
        out["compile"] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    builders: dict[str, Callable[[], nn.Module]] = {
        "int8-dynamic": lambda: torch.ao.quantization.quantize_dynamic(
            copy.deepcopy(model), {nn.Linear}, dtype=torch.qint8
        ),
        "int8-static": lambda: _int8_static(model, calibration),
    }
    for way, build in builders.items():
        try:
            out[way] = _inference_run(build())
        except Exception as exc:  # noqa: BLE001 - report why it cannot be used here
            out[way] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"

    def bf16(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            return nhwc(x.contiguous(memory_format=torch.channels_last)).float()

    out["bf16"] = bf16
    return out


def _inference_run(module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """``module``'s forward under ``torch.inference_mode``."""

    def run(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return module(x)

    return run


def _int8_static(model: nn.Module, calibration: torch.Tensor) -> nn.Module:
    """``model`` quantized to int8 (weights and activations) by FX graph mode, ranges observed on ``calibration``."""
    import warnings

    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    with warnings.catch_warnings():  # FX quantization's deprecation notices (it still runs)
        warnings.simplefilter("ignore")
        prepared = prepare_fx(copy.deepcopy(model).eval(), get_default_qconfig_mapping("x86"), (calibration[:8],))
        with torch.inference_mode():
            for s in range(0, min(len(calibration), 2048), BATCH):
                prepared(calibration[s : s + BATCH])
        return convert_fx(prepared)


def datasets(records: int) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """name -> (teacher images, teacher labels, records to time, distinct records), float [0, 1] (N, 1, 28, 28).

    The distinct records are the private ones (digits: the 797 not trained on; MNIST: the 1,000 private
    plus the 500 held out); the timed set tiles them to ``records``."""
    x, y = load_digits_images(28)
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(y), generator=g)
    digits = (x[order[:1000]], y[order[:1000]], x[order[1000:]])
    parts = mnist5k.split()
    tx = torch.from_numpy(parts["teacher"][0]).float() / 255
    ty = torch.from_numpy(parts["teacher"][1])
    rest = torch.from_numpy(np.concatenate([parts["private"][0], parts["held_out"][0]])).float() / 255
    base = {"digits": digits, "mnist": (tx, ty, rest)}
    out = {}
    for name, (a, b, r) in base.items():  # tile the records to the size asked for (timing), order kept
        reps = -(-records // len(r))
        out[name] = (a, b, r.repeat(reps, 1, 1, 1)[:records].contiguous(), r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=5, help="training epochs of each student (the default student's)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one student per seed")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows: list[dict[str, Any]] = []
    for name, (tx, ty, records, distinct) in datasets(args.records).items():
        for seed in args.seeds:
            model = train(tx, ty, epochs=args.epochs, seed=seed)
            runs = ways(model, distinct)
            base = labels_with(runs["baseline"], distinct)  # type: ignore[arg-type]
            base_ms = timed(runs["baseline"], records, args.repeats)  # type: ignore[arg-type]
            for way, run in runs.items():
                if isinstance(run, str):
                    rows.append({"data": name, "seed": seed, "way": way, "note": run})
                    continue
                ms = base_ms if way == "baseline" else timed(run, records, args.repeats)
                differ = int((labels_with(run, distinct) != base).sum())
                rows.append({"data": name, "seed": seed, "way": way, "ms_per_image": round(ms, 4),
                             "speedup": round(base_ms / ms, 2), "labels_differ": differ, "records": len(distinct),
                             "labels_equal": round(1 - differ / len(distinct), 5)})
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
