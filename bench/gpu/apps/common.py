"""Shared helpers of the outside-application suite (bench/gpu/apps).

Each program computes with libraries nobody in this project wrote, then calls `finish(results)`:
a dict of name -> digest (SHA-256 of the tensor's bytes) written as JSON to $APP_OUT (or stdout).
Programs are deterministic by construction (seeds, deterministic algorithms), so two native runs
must give the same digests; the suite drops a program whose native runs differ.
"""

import hashlib
import json
import os
import sys


def deterministic_torch(seed=0):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def digest_bytes(b):
    return hashlib.sha256(b).hexdigest()[:16]


def digest(t):
    """Digest of a torch tensor, a numpy/cupy/jax array, or bytes."""
    if isinstance(t, (bytes, bytearray, memoryview)):
        return digest_bytes(bytes(t))
    mod = type(t).__module__
    if mod.startswith("torch"):
        x = t.detach().contiguous().cpu()
        return digest_bytes(x.view(-1).view(__import__("torch").uint8).numpy().tobytes())
    if mod.startswith("cupy"):
        return digest_bytes(t.get().tobytes())
    import numpy as np

    return digest_bytes(np.asarray(t).tobytes())


def digest_all(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(digest(t).encode())
    return h.hexdigest()[:16]


def finish(results, **info):
    out = {"digests": results, "info": info}
    path = os.environ.get("APP_OUT")
    text = json.dumps(out, indent=1, sort_keys=True)
    if path:
        with open(path, "w") as f:
            f.write(text)
    else:
        print(text)
    sys.stdout.flush()
