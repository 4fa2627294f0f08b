"""Footprint tenant: what a process costs on the device and the host. Measures, from the start of
the script: the time to the first kernel's completion (under vitamin this includes the shim's
start-up and the pool's creation), then runs a small matmul loop through the window, and at the end
reads the process's GPU memory (nvidia-smi, this pid; under MPS nvidia-smi lists the MPS server
instead, so it is empty there), the device memory in use (torch.cuda.mem_get_info: total - free;
alone on the device this is this process plus, under MPS, the MPS server) and the host RSS
high-water mark (VmHWM). Compared with its native run (no MPS) or with `vitamin_nomps` against
native and `vitamin_inproc` against `mps`, the differences are vitamin's pool and runtime.

  python3 tenants/footprint.py [--n 2048]
"""
import argparse
import os
import subprocess
import time

T0 = time.perf_counter()

import common  # noqa: E402
import torch  # noqa: E402

tenant = common.tenant


def status_mib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return None


def process_gpu_mib(pid):
    try:
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # nvidia-smi without the shim
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, env=env).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        p = [x.strip() for x in line.split(",")]
        if len(p) == 2 and p[0] == str(pid):
            try:
                return float(p[1])
            except ValueError:
                return None
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=2048)
    a = ap.parse_args()
    t = tenant.Tenant("footprint")
    dev = common.setup(False)
    x = torch.ones(1, device=dev) + 1
    common.sync()
    first = time.perf_counter() - T0
    free0, total = (0, 0) if common.SMOKE_CPU else torch.cuda.mem_get_info()
    m = torch.randn(a.n, a.n, device=dev, dtype=torch.bfloat16)
    t.ready()
    n = 0
    while t.measuring():
        m = (m @ m).tanh_()
        n += 1
        if n % 50 == 0:
            common.sync()
    common.sync()
    free1, _ = (0, 0) if common.SMOKE_CPU else torch.cuda.mem_get_info()
    return t.write({
        "role": "footprint", "first_kernel_s": first, "device_total_mib": total / 2**20,
        "device_free_delta_mib": (total - free1) / 2**20, "device_used_after_init_mib": (total - free0) / 2**20,
        "gpu_used_mib": process_gpu_mib(os.getpid()), "vm_hwm_mib": status_mib("VmHWM"),
        "vm_rss_mib": status_mib("VmRSS"), "torch_allocated_mib": None if common.SMOKE_CPU else torch.cuda.max_memory_allocated() / 2**20,
        "throughput": n / t.seconds, "unit": "matmuls/s", "check": float(x.item()),
    })


if __name__ == "__main__":
    main()
