"""Every option of the mock teacher, defined once: the CLI flags and ``serve()`` kwargs both come from here."""

from __future__ import annotations

import argparse
import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

#: Which kinds of malformed response bodies the server can send (see ``faults``).
MALFORMED_KINDS = ("truncated", "not_json", "wrong_count", "out_of_range")

#: Environment variable with comma-separated bearer tokens (keeps secrets out of argv).
TOKENS_ENV = "LDPCLIENT_MOCK_TOKENS"


def _opt(default: Any, help: str, **extra: Any) -> Any:
    return field(default=default, metadata={"help": help, **extra})


@dataclass(frozen=True)
class ServerConfig:
    """Options of one mock teacher run. Field names are the ``serve()`` kwargs; the CLI
    flag of ``some_field`` is ``--some-field``. Validated on construction (ValueError)."""

    # network
    host: str = _opt("127.0.0.1", "address to bind (loopback by default)")
    port: int = _opt(0, "TCP port; 0 picks a free one (printed at start-up)")
    model_name: str = _opt("digits", "model name served under /v2/models/{name}")
    max_batch_size: int = _opt(256, "largest batch one request may carry (larger -> 413)")
    max_body_bytes: int = _opt(64 * 1024 * 1024, "largest request body in bytes (larger -> 413)")
    request_timeout: float = _opt(30.0, "seconds a connection may idle or stall mid-request before it is closed")
    # teacher model
    model: str = _opt(
        "digits",
        "teacher: 'digits' (small CNN trained on the bundled digits), 'trivial' (mean-intensity"
        " bucket, no training), 'folder' (small CNN trained on --train-folder), 'checkpoint' (--checkpoint)",
        choices=("digits", "trivial", "folder", "checkpoint"),
    )
    image_size: int = _opt(28, "input height = width in pixels (digits: 28 or 8; folder/trivial: any)")
    channels: int = _opt(1, "input channels for 'folder'/'trivial' teachers (1 grey or 3 RGB)")
    num_classes: int = _opt(10, "classes of the 'trivial' teacher")
    train_folder: str | None = _opt(None, "image folder laid out as class_name/*.png (implies --model folder)")
    checkpoint: str | None = _opt(None, "saved teacher checkpoint to load safely (implies --model checkpoint)")
    save_checkpoint: str | None = _opt(None, "write the teacher's weights to this file after start-up")
    arch: str = _opt(
        "small_cnn",
        "architecture of a trained teacher: 'small_cnn' (two conv layers, seconds to train) or 'resnet' (a"
        " small residual network trained with flip and crop augmentation: a stronger teacher for photos;"
        " give it --epochs 15, minutes to train, then cached)",
        choices=("small_cnn", "resnet"),
    )
    seed: int = _opt(0, "seed of the training run and of the held-out split")
    epochs: int = _opt(10, "training epochs for the CNN teacher")
    state_dir: str | None = _opt(None, "cache directory root (default: $LDPCLIENT_STATE_DIR or the XDG state dir)")
    no_cache: bool = _opt(False, "neither read nor write the trained-weights cache")
    torch_threads: int | None = _opt(None, "torch intra-op threads for inference (default: torch's choice)")
    # auth and billing
    tokens: tuple[str, ...] = _opt(
        (), f"accepted bearer token (repeatable; also ${TOKENS_ENV}, comma-separated); none = auth off"
    )
    price_per_image: float = _opt(0.001, "price of one classified image, in currency units")
    quota_images: int | None = _opt(None, "images each API key may have classified; beyond -> 429")
    # fault injection (infer requests only; seeded and deterministic in arrival order)
    fault_seed: int = _opt(0, "seed of the fault injector")
    latency: float = _opt(0.0, "fixed added latency per infer request, seconds")
    latency_jitter: float = _opt(0.0, "extra uniform random latency in [0, this] seconds")
    error_rate_500: float = _opt(0.0, "probability of answering 500")
    error_rate_503: float = _opt(0.0, "probability of answering 503")
    rate_429: float = _opt(0.0, "probability of answering 429 with Retry-After")
    retry_after: int = _opt(1, "Retry-After seconds sent with injected 429/503 and quota 429")
    drop_rate: float = _opt(0.0, "probability of dropping the connection mid-response")
    malformed_rate: float = _opt(0.0, "probability of a 200 with a malformed body")
    malformed_kind: str | None = _opt(
        None, "fixed malformed kind (default: seeded random choice)", choices=MALFORMED_KINDS
    )
    slow_rate: float = _opt(0.0, "probability of trickling the response body slowly")
    slow_body_seconds: float = _opt(1.0, "how long a slow body takes to trickle out, seconds")
    fail_first: int = _opt(0, "answer the first N infer requests with --fail-status")
    fail_status: int = _opt(503, "status for --fail-first (400..599)")
    rate_limit: float | None = _opt(None, "requests per second per API key (token bucket); beyond -> 429")
    rate_burst: int | None = _opt(None, "token-bucket size for --rate-limit (default: max(1, rate))")
    # the cloud APIs the mock also speaks (/v1/chat/completions, /v1/images:annotate): their money and behaviours
    price_input_tokens: float = _opt(0.15, "chat API: price of a million input tokens (prompt and image)")
    price_output_tokens: float = _opt(0.6, "chat API: price of a million output tokens (the answer)")
    chat_abstain_below: float = _opt(
        0.0, "chat API: answer 'cannot tell' when the model's top probability is below this (0: never)")
    chat_off_list_rate: float = _opt(
        0.0, "chat API: probability that an answer asked without a schema is a sentence outside the class list")
    chat_refusal_rate: float = _opt(0.0, "chat API: probability of a refusal ('I can't help with that image.')")
    chat_policy_rate: float = _opt(0.0, "chat and vision APIs: probability that an image draws a content-policy error")
    chat_no_schema: bool = _opt(False, "chat API: refuse response_format json_schema with a 400, as older servers do")
    chat_cut_off: bool = _opt(False, "chat API: cut every answer off at one token (finish_reason length)")
    rate_limit_header: str = _opt(
        "retry-after", "chat API: the header an injected 429 states its wait in",
        choices=("retry-after", "retry-after-ms", "x-ratelimit-reset-requests"),
    )
    chat_requests_per_window: int | None = _opt(
        None, "chat API: requests each key may make per --chat-window seconds (stated in x-ratelimit-* headers)")
    chat_window: float = _opt(1.0, "chat API: seconds of the request window of --chat-requests-per-window")
    batch_seconds: float = _opt(0.0, "Batch API: seconds a batch stays in progress before it is answered")
    batch_expire_first: int = _opt(
        0, "Batch API: the first N batches expire with the first half of their lines answered, the rest not")
    batch_fail_first: int = _opt(
        0, "Batch API: the first N batches fail with token_limit_exceeded, as when a key's enqueued tokens are spent")
    # spec conformance: behave like a stock server instead of this mock's conveniences
    strict_spec: bool = _opt(
        False,
        "behave like a stock OIP server (MLServer/KServe/Triton REST): empty health bodies, no custom metadata "
        "'parameters' (no num_classes, value_range, class_names, max_batch_size), no binary tensor extension",
    )
    fresh_response_id: bool = _opt(False, "answer infer requests with a fresh response id instead of echoing the "
                                          "request's")
    # curious-server log
    query_log: str | None = _opt(None, "append every received query tensor to this JSONL file")
    verbose: bool = _opt(False, "log every request to stderr")

    def __post_init__(self) -> None:
        for f in fields(self):
            choices = f.metadata.get("choices")
            value = getattr(self, f.name)
            if choices and value is not None and value not in choices:
                raise ValueError(f"{f.name} must be one of {', '.join(choices)}, got {value!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        for name in ("max_batch_size", "max_body_bytes", "image_size", "epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3, got {self.channels}")
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {self.num_classes}")
        for name in ("latency", "latency_jitter", "slow_body_seconds", "price_per_image", "retry_after",
                     "price_input_tokens", "price_output_tokens", "batch_seconds"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v}")
        if self.request_timeout <= 0:
            raise ValueError(f"request_timeout must be > 0, got {self.request_timeout}")
        rates = ("error_rate_500", "error_rate_503", "rate_429", "drop_rate", "malformed_rate", "slow_rate")
        for name in (*rates, "chat_off_list_rate", "chat_refusal_rate", "chat_policy_rate", "chat_abstain_below"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {v}")
        total = math.fsum(getattr(self, n) for n in rates)
        if total > 1.0 + 1e-12:
            raise ValueError(f"fault rates are exclusive per request and must sum to <= 1, got {total:g}")
        for name in ("batch_expire_first", "batch_fail_first"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.fail_first < 0:
            raise ValueError(f"fail_first must be >= 0, got {self.fail_first}")
        if not 400 <= self.fail_status <= 599:
            raise ValueError(f"fail_status must be an HTTP error status 400..599, got {self.fail_status}")
        if self.rate_limit is not None and not (math.isfinite(self.rate_limit) and self.rate_limit > 0):
            raise ValueError(f"rate_limit must be > 0 requests/s, got {self.rate_limit}")
        if self.rate_burst is not None and self.rate_burst < 1:
            raise ValueError(f"rate_burst must be >= 1, got {self.rate_burst}")
        if self.chat_requests_per_window is not None and self.chat_requests_per_window < 1:
            raise ValueError(f"chat_requests_per_window must be >= 1, got {self.chat_requests_per_window}")
        if not (math.isfinite(self.chat_window) and self.chat_window > 0):
            raise ValueError(f"chat_window must be > 0 seconds, got {self.chat_window}")
        if self.quota_images is not None and self.quota_images < 0:
            raise ValueError(f"quota_images must be >= 0, got {self.quota_images}")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ValueError(f"torch_threads must be >= 1, got {self.torch_threads}")
        if not self.model_name or "/" in self.model_name:
            raise ValueError(f"model_name must be a non-empty name without '/', got {self.model_name!r}")
        if any(not t or any(c.isspace() for c in t) for t in self.tokens):
            raise ValueError("tokens must be non-empty and contain no whitespace")
        if self.checkpoint and self.train_folder:
            raise ValueError("give either checkpoint or train_folder, not both")
        if self.checkpoint and self.model not in ("digits", "checkpoint"):
            raise ValueError(f"checkpoint given but model is {self.model!r}")
        if self.train_folder and self.model not in ("digits", "folder"):
            raise ValueError(f"train_folder given but model is {self.model!r}")
        if self.model == "folder" and not self.train_folder:
            raise ValueError("model 'folder' needs train_folder")
        if self.model == "checkpoint" and not self.checkpoint:
            raise ValueError("model 'checkpoint' needs checkpoint")

    @property
    def teacher_kind(self) -> str:
        """The model actually served: a checkpoint/folder option implies its kind."""
        if self.checkpoint:
            return "checkpoint"
        if self.train_folder:
            return "folder"
        return self.model

    @classmethod
    def from_kwargs(cls, **options: Any) -> ServerConfig:
        """Build from ``serve()``-style kwargs; unknown names raise ValueError listing them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown mock server option(s): {', '.join(unknown)}")
        if "tokens" in options:
            tokens = options["tokens"]
            options["tokens"] = (tokens,) if isinstance(tokens, str) else tuple(tokens)
        return cls(**options)

    def to_argv(self) -> list[str]:
        """CLI arguments reproducing this config (tokens excluded: pass them via ``TOKENS_ENV``)."""
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "tokens" or value == f.default or value is None:
                continue
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                argv.append(flag)
            else:
                argv += [flag, str(value)]
        return argv


def _scalar_type(f: Any) -> Any:
    default = f.default if f.default is not MISSING else None
    text = str(f.type)
    if "float" in text:
        return float
    if "int" in text:
        return int
    if isinstance(default, bool):
        return None
    return str


#: The help groups, by the first field of each (fields keep their order in :class:`ServerConfig`).
HELP_GROUPS = {
    "host": "Network",
    "model": "Teacher model",
    "tokens": "Auth and billing",
    "fault_seed": "Fault injection",
    "price_input_tokens": "Cloud APIs (chat, vision)",
    "strict_spec": "Spec conformance",
    "query_log": "Query log and output",
}
#: Fields that name a file or a folder: their placeholder.
_PATH_FIELDS = {"train_folder": "<dir>", "state_dir": "<dir>", "checkpoint": "<file>", "save_checkpoint": "<file>",
                "query_log": "<file>"}


class _HelpFormatter(argparse.HelpFormatter):
    """The help of ``ldpclient``'s own commands: ``Usage:``, options in titled groups, ``<kind>`` placeholders,
    sentences, wrapped at spaces only (an option name in a help text, ``--train-folder``, stays whole)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def add_usage(self, usage: Any, actions: Any, groups: Any, prefix: str | None = None) -> None:
        super().add_usage(usage, actions, groups, prefix="Usage: ")

    def _split_lines(self, text: str, width: int) -> list[str]:
        # ldpclient's own wrapping: a bracketed note ('[default: 30.0]') stays on one line
        from ldpclient.io.text import wrap_words

        return wrap_words(text, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        from ldpclient.io.text import wrap_words

        return "\n".join(wrap_words(text, width, indent="  "))


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _placeholder(f: Any) -> str:
    choices = f.metadata.get("choices")
    if choices:
        return "<" + "|".join(choices) + ">"
    if f.name in _PATH_FIELDS:
        return _PATH_FIELDS[f.name]
    kind = _scalar_type(f)
    return "<int>" if kind is int else "<float>" if kind is float else "<str>"


def build_parser(prog: str = "python -m mock_server") -> argparse.ArgumentParser:
    """argparse parser with one flag per ``ServerConfig`` field (CLI default port: 8000), its help in the style of
    ``ldpclient``'s commands (``prog``: ``ldpclient serve-mock`` when run through it)."""
    parser = argparse.ArgumentParser(
        prog=prog, usage="%(prog)s [OPTIONS]", formatter_class=_HelpFormatter, add_help=False,
        description="Run the bundled mock teacher: an Open Inference Protocol v2 HTTP server with billing, "
        "fault injection and an optional honest-but-curious query log. It prints the model's address for "
        "label --teacher.",
    )
    group = parser.add_argument_group()
    for f in fields(ServerConfig):
        if f.name in HELP_GROUPS:
            group = parser.add_argument_group(HELP_GROUPS[f.name])
        flag = "--" + f.name.replace("_", "-")
        help_text = _sentence(f.metadata["help"])
        if f.name == "tokens":
            group.add_argument(flag[:-1], dest="tokens", action="append", default=[], metavar="<str>", help=help_text)
        elif f.default is False:
            group.add_argument(flag, action="store_true", help=help_text)
        else:
            default = 8000 if f.name == "port" else f.default
            # a default the text states itself ('(default: torch's choice)') is not repeated
            shown = (
                "" if "default:" in help_text else " Default: none." if default is None else f" [default: {default}]"
            )
            group.add_argument(flag, type=_scalar_type(f), default=default, choices=f.metadata.get("choices"),
                               metavar=_placeholder(f), help=help_text + shown)
    group.add_argument("--help", action="help", help="Show this message and exit.")
    return parser
