"""MLServer custom runtime serving :mod:`digits_model` (output ``label`` INT64 or ``scores`` FP32)."""

from __future__ import annotations

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse

import digits_model


class DigitsRuntime(MLModel):
    async def load(self) -> bool:
        extra = (self.settings.parameters.extra if self.settings.parameters else None) or {}
        self.output = extra.get("output", "label")
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0])
        if self.output == "scores":
            out = digits_model.scores(x).astype(np.float32)
            encoded = NumpyCodec.encode_output(name="scores", payload=out)
        else:
            out = digits_model.labels(x)
            encoded = NumpyCodec.encode_output(name="label", payload=out)
        digits_model.log_request(self.name, payload.id, x, out)
        return InferenceResponse(model_name=self.name, id=payload.id, outputs=[encoded])
