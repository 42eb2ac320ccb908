"""Triton Inference Server (2.51, CPU) through PyTriton: ``python triton_server.py --http-port P``.

``digits-scores`` answers FP32 scores (ldpclient then uses Triton's classification extension,
which this server lists); ``digits-label`` answers INT64 class indices. Both declare a batch
limit of 64 in their config, so ldpclient splits its batches. PyTriton does not hand the request
id to the model, so requests are logged in arrival order.
"""

from __future__ import annotations

import argparse

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

import digits_model

INPUT = Tensor(name="input", dtype=np.float32, shape=digits_model.INPUT_SHAPE)


@batch
def scores(input: np.ndarray) -> dict[str, np.ndarray]:
    out = digits_model.scores(input).astype(np.float32)
    digits_model.log_request("digits-scores", None, input, out)
    return {"scores": out}


@batch
def labels(input: np.ndarray) -> dict[str, np.ndarray]:
    out = digits_model.labels(input)
    digits_model.log_request("digits-label", None, input, out)
    return {"label": out[:, None]}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--grpc-port", type=int, required=True)
    p.add_argument("--metrics-port", type=int, required=True)
    a = p.parse_args()
    config = TritonConfig(http_address="127.0.0.1", http_port=a.http_port, grpc_address="127.0.0.1",
                          grpc_port=a.grpc_port, metrics_port=a.metrics_port)
    with Triton(config=config) as triton:
        triton.bind(model_name="digits-scores", infer_func=scores, inputs=[INPUT],
                    outputs=[Tensor(name="scores", dtype=np.float32, shape=(digits_model.NUM_CLASSES,))],
                    config=ModelConfig(max_batch_size=64))
        triton.bind(model_name="digits-label", infer_func=labels, inputs=[INPUT],
                    outputs=[Tensor(name="label", dtype=np.int64, shape=(1,))],
                    config=ModelConfig(max_batch_size=64))
        triton.serve()
