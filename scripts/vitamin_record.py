"""Digest chosen tensors of a program into a vitamin determinism record (application kind).

Two hosts run the same script, each writes a record, and ``vitamin compare A B`` says per tensor
whether they agree bitwise and, where not, by how many ULPs (format: docs/determinism.md).

    from vitamin_record import Recorder

    with Recorder("run_a.json.gz") as rec:      # or Recorder() to use $VITAMIN_RECORD_OUTPUTS
        ...
        rec.add("logits", logits)              # a torch tensor, a numpy array, or
        rec.add_bytes("step", "i64", [1], b"\\x01" + bytes(7))

Only the standard library is needed; torch and numpy are used when the values are theirs. A
tensor is copied to the host as is (contiguous, little-endian element bytes; bfloat16 through its
16-bit pattern); its SHA-256 and, unless ``keep_outputs=False``, a zlib+base64 copy of its bytes go
into the record. A name recorded again gets ``#1``, ``#2``, ... appended, so a tensor recorded
every step keeps one case per step.
"""

import base64
import gzip
import hashlib
import json
import os
import socket
import sys
import time
import zlib

SCHEMA = "vitamin.determinism.record.v1"
ENV = "VITAMIN_RECORD_OUTPUTS"

_TORCH_DTYPES = {
    "torch.float32": "f32",
    "torch.bfloat16": "bf16",
    "torch.float16": "f16",
    "torch.float64": "f64",
    "torch.int64": "i64",
    "torch.int32": "i32",
    "torch.int16": "i16",
    "torch.int8": "i8",
    "torch.uint8": "u8",
    "torch.bool": "bool",
}
_NUMPY_DTYPES = {
    "float32": "f32",
    "float16": "f16",
    "float64": "f64",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "bool",
}


def _host():
    host = {"vendor": "unknown", "device": "unknown", "backend": "torch", "driver": None,
            "compiler": "python " + sys.version.split()[0], "simulated": False,
            "hostname": socket.gethostname(), "extra": {}}
    torch = sys.modules.get("torch")
    if torch is not None:
        host["compiler"] = "torch " + torch.__version__
        cuda, hip = getattr(torch.version, "cuda", None), getattr(torch.version, "hip", None)
        host["driver"] = ("HIP " + hip) if hip else (("CUDA " + cuda) if cuda else None)
        if torch.cuda.is_available():
            host["vendor"] = "AMD" if hip else "NVIDIA"
            host["device"] = torch.cuda.get_device_name()
        else:
            host["vendor"], host["device"] = "CPU", "torch CPU"
        host["extra"]["deterministic_algorithms"] = str(torch.are_deterministic_algorithms_enabled())
    return host


def _tensor_bytes(value):
    """(dtype name, shape, little-endian bytes) of a torch tensor or numpy array."""
    mod = type(value).__module__
    if mod.startswith("torch"):
        t = value.detach().cpu().contiguous()
        name = _TORCH_DTYPES.get(str(t.dtype))
        if name is None:
            raise TypeError("unsupported torch dtype %s" % t.dtype)
        if name == "bf16":
            import torch
            t = t.view(torch.int16)
        a = t.numpy()
        return name, list(t.shape), a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
    if mod.startswith("numpy"):
        import numpy as np
        a = np.ascontiguousarray(value)
        name = _NUMPY_DTYPES.get(a.dtype.name)
        if name is None:
            raise TypeError("unsupported numpy dtype %s" % a.dtype)
        return name, list(a.shape), a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
    raise TypeError("record a torch tensor or numpy array, or use add_bytes (got %s)" % type(value).__name__)


class Recorder:
    """Collects tensors and writes one record (`save`, or at the end of a `with` block)."""

    def __init__(self, path=None, variant="app", keep_outputs=True):
        self.path = path or os.environ.get(ENV)
        if not self.path:
            raise ValueError("no record path: pass one or set %s" % ENV)
        self.variant = variant
        self.keep_outputs = keep_outputs
        self.cases = []
        self._seen = {}

    def add(self, name, value):
        """Records a torch tensor or numpy array under `name`."""
        dtype, shape, data = _tensor_bytes(value)
        self.add_bytes(name, dtype, shape, data)

    def add_bytes(self, name, dtype, shape, data):
        """Records raw little-endian element bytes of `dtype` (f32, bf16, f16, f64, i64, ...)."""
        n = self._seen.get(name, 0)
        self._seen[name] = n + 1
        output = {"dtype": dtype, "shape": [int(s) for s in shape], "bytes": len(data),
                  "sha256": hashlib.sha256(data).hexdigest()}
        if self.keep_outputs:
            output["encoding"] = "zlib+base64"
            output["data"] = base64.b64encode(zlib.compress(bytes(data), 9)).decode("ascii")
        self.cases.append({"name": name if n == 0 else "%s#%d" % (name, n), "dtype": dtype, "seed": None,
                           "variant": self.variant, "output": output})

    def record(self):
        """The record as a dict."""
        now = int(time.time())
        return {"schema": SCHEMA, "kind": "application", "created_unix_s": now,
                "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                "host": _host(), "tool": {"name": "vitamin_record.py", "version": "1",
                                          "commit": os.environ.get("VITAMIN_COMMIT")},
                "cases": self.cases}

    def save(self):
        """Writes the record (gzip-compressed when the path ends in .gz)."""
        text = json.dumps(self.record(), indent=1).encode()
        if str(self.path).endswith(".gz"):
            text = gzip.compress(text, 9)
        with open(self.path, "wb") as f:
            f.write(text)
        return self.path

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.save()
        return False
