"""KServe custom-model server for :mod:`digits_model`: ``python kserve_server.py --http_port P``.

Three models, as KServe users write them: ``digits-label`` declares its input and an INT64
``label`` output; ``digits-scores`` declares an FP32 ``scores`` output; ``digits-bare`` declares
nothing (``"inputs": []``), so the client must be told its shape. Every answer carries a fresh
``response_id``, as KServe's own examples do.
"""

from __future__ import annotations

import uuid

import numpy as np
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer
from kserve.model_server import args as server_args

import digits_model

INPUT = {"name": "input", "datatype": "FP32", "shape": [-1, *digits_model.INPUT_SHAPE]}


class Digits(Model):
    def __init__(self, name: str, output: str, declare: bool) -> None:
        super().__init__(name)
        self.output, self.declare = output, declare
        self.ready = True

    def get_input_types(self) -> list[dict]:
        return [INPUT] if self.declare else []

    def get_output_types(self) -> list[dict]:
        if not self.declare:
            return []
        if self.output == "scores":
            return [{"name": "scores", "datatype": "FP32", "shape": [-1, digits_model.NUM_CLASSES]}]
        return [{"name": "label", "datatype": "INT64", "shape": [-1]}]

    async def predict(self, payload: InferRequest, headers=None, response_headers=None) -> InferResponse:
        x = payload.inputs[0].as_numpy()
        if self.output == "scores":
            out = digits_model.scores(x).astype(np.float32)
            result = InferOutput(name="scores", shape=list(out.shape), datatype="FP32")
        else:
            out = digits_model.labels(x)
            result = InferOutput(name="label", shape=list(out.shape), datatype="INT64")
        result.set_data_from_numpy(out, binary_data=False)
        digits_model.log_request(self.name, payload.id, x, out)
        return InferResponse(response_id=uuid.uuid4().hex, model_name=self.name, infer_outputs=[result])


if __name__ == "__main__":
    models = [Digits("digits-label", "label", True), Digits("digits-scores", "scores", True),
              Digits("digits-bare", "label", False)]
    ModelServer(http_port=server_args.http_port, grpc_port=server_args.grpc_port, enable_grpc=False).start(models)
