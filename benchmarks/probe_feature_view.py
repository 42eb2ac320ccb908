"""Probe for issue 90 (not a maintained benchmark): the adapted outputs ``probe_view_runs.py`` saved, smoothed or
re-fitted in a feature extractor's space (kNN means, label propagation, a linear head, k-means clusters), and how far
the space goes with true labels (a head on half the images, scored on the other half)::

    .venv/bin/python benchmarks/probe_feature_view.py benchmarks/.cache/standin-resnet18.ts \
        "/tmp/ldpclient-probe/dct-*.pt"
"""

import glob
import statistics
import sys

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import bench_adapt as B

from ldpclient.transfer.student import build_student

torch.set_num_threads(2)
ts = sys.argv[1]
pattern = sys.argv[2]
feats = {}


def features(label):
    if label not in feats:
        name = {
            "cifar10-32": "cifar10",
            "colour-digits32": "colour-digits",
            "fashion28": "fashion",
            "mnist28": "mnist",
        }[label]
        _, _, _, px, _ = B.load_dataset(name, 0)
        m = build_student("torchscript", num_classes=2, in_channels=px.shape[1], image_size=px.shape[-1], weights=ts)
        with torch.no_grad():
            f = torch.cat([m.features(px[i : i + 250]) for i in range(0, len(px), 250)])
        feats[label] = torch.nn.functional.normalize(f, dim=1)
    return feats[label]


def knn(F, P, k, alpha=1.0):
    sim = F @ F.T
    idx = sim.topk(k, dim=1).indices
    return (1 - alpha) * P + alpha * P[idx].mean(1)


def propagate(F, P, k, alpha, iters=20):
    sim = F @ F.T
    val, idx = sim.topk(k + 1, dim=1)
    W = torch.zeros_like(sim).scatter_(1, idx[:, 1:], val[:, 1:].clamp(min=0))
    W = (W + W.T) / 2
    d = W.sum(1).clamp(min=1e-8) ** -0.5
    S = d[:, None] * W * d[None, :]
    Y = P.clone()
    for _ in range(iters):
        Y = alpha * S @ Y + (1 - alpha) * P
    return Y


def probe(F, P, epochs=200, wd=1e-3, soft=True):
    torch.manual_seed(0)
    head = torch.nn.Linear(F.shape[1], P.shape[1])
    opt = torch.optim.Adam(head.parameters(), lr=1e-2, weight_decay=wd)
    for _ in range(epochs):
        opt.zero_grad()
        logp = torch.log_softmax(head(F * 10), 1)
        loss = -(P * logp).sum(1).mean() if soft else torch.nn.functional.nll_loss(logp, P.argmax(1))
        loss.backward()
        opt.step()
    with torch.no_grad():
        return torch.softmax(head(F * 10), 1)


def probe_apply(Fall, Ftr, ytr, k, epochs=200):
    torch.manual_seed(0)
    head = torch.nn.Linear(Fall.shape[1], k)
    opt = torch.optim.Adam(head.parameters(), lr=1e-2, weight_decay=1e-3)
    for _ in range(epochs):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(head(Ftr * 10), ytr).backward()
        opt.step()
    with torch.no_grad():
        return torch.softmax(head(Fall * 10), 1)


def knn_probe_eval(F, y, half):
    Q = probe_apply(F[~half], F[half], y[half], int(y.max()) + 1)
    return (Q.argmax(1) == y[~half]).float().mean()


def kmeans_name(F, P, m, iters=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    C = F[torch.randperm(len(F), generator=g)[:m]].clone()
    for _ in range(iters):
        a = (F @ C.T).argmax(1)
        for j in range(m):
            sel = a == j
            if sel.any():
                C[j] = torch.nn.functional.normalize(F[sel].mean(0), dim=0)
    a = (F @ C.T).argmax(1)
    out = torch.zeros_like(P)
    for j in range(m):
        sel = a == j
        if sel.any():
            out[sel] = P[sel].mean(0)
    return out


rows = {}
for path in sorted(glob.glob(pattern)):
    d = torch.load(path)
    label = path.split("/")[-1].split("-small_cnn")[0].split("-resnet")[0].removeprefix("dct-")
    F = features(label)
    P = d["probs"].float()
    y = d["truth"]

    def acc(Q, y=y):
        return float((Q.argmax(1) == y).float().mean())

    res = {"base": acc(P)}
    for k in (10, 20):
        res[f"knn{k}"] = acc(knn(F, P, k))
    for k, a in ((10, 0.8), (10, 0.9), (20, 0.9), (20, 0.99)):
        res[f"prop{k}_{a}"] = acc(propagate(F, P, k, a))
    res["probe_soft"] = acc(probe(F, P))
    # upper bound: a probe on the true labels of half, scored on the other half
    half = torch.arange(len(y)) % 2 == 0
    res["oracle_probe_other"] = float(knn_probe_eval(F, y, half).item())
    # confident half per predicted class
    conf, lab = P.max(1)
    keep = torch.zeros(len(P), dtype=torch.bool)
    for c in range(P.shape[1]):
        idx = (lab == c).nonzero().flatten()
        if len(idx):
            keep[idx[conf[idx].argsort(descending=True)[: max(1, len(idx) // 2)]]] = True
    res["probe_conf_half"] = acc(probe_apply(F, F[keep], lab[keep], P.shape[1]))
    res["probe_hard"] = acc(probe(F, P, soft=False))
    for m in (20, 50):
        res[f"km{m}"] = acc(kmeans_name(F, P, m))
    Q = probe(F, P)
    res["probe_knn10"] = acc(knn(F, Q, 10))
    res["probe_prop"] = acc(propagate(F, Q, 10, 0.8))
    res["mix_probe"] = acc(0.5 * P + 0.5 * Q)
    res["mix_probe_prop"] = acc(propagate(F, 0.5 * P + 0.5 * Q, 10, 0.8))
    for key, v in res.items():
        rows.setdefault((label, "-".join(path.split("-")[-2:-1]), key), []).append(v)
    print(path.split("/")[-1], " ".join(f"{k}={v:.3f}" for k, v in res.items()), flush=True)
print()
for (label, mode, key), vals in rows.items():
    print(
        label,
        mode,
        key,
        f"{100 * statistics.mean(vals):.1f} ± {100 * (statistics.stdev(vals) if len(vals) > 1 else 0):.1f}",
    )
