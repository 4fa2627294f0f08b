"""What the driver says about host addresses: CU_POINTER_ATTRIBUTE_MEMORY_TYPE for pageable (numpy,
torch CPU) and pinned memory, and the device's pageable-memory attributes (HMM/ATS)."""
import ctypes
import numpy as np
import torch

cu = ctypes.CDLL("libcuda.so.1")
torch.zeros(1, device="cuda")  # a current primary context
def attr(ptr, a):
    v = ctypes.c_uint(0)
    r = cu.cuPointerGetAttribute(ctypes.byref(v), ctypes.c_int(a), ctypes.c_uint64(ptr))
    return r, v.value
def dev_attr(a):
    v = ctypes.c_int(0)
    r = cu.cuDeviceGetAttribute(ctypes.byref(v), ctypes.c_int(a), ctypes.c_int(0))
    return r, v.value
a = np.zeros(1 << 20, dtype=np.float32)
t = torch.zeros(1 << 20)
p = torch.zeros(1 << 20).pin_memory()
d = torch.zeros(1 << 20, device="cuda")
for name, ptr in [("numpy", a.ctypes.data), ("torch_cpu", t.data_ptr()), ("pinned", p.data_ptr()),
                  ("device", d.data_ptr())]:
    print(name, "MEMORY_TYPE(2)", attr(ptr, 2), "IS_MANAGED(8)", attr(ptr, 8), "MAPPED(17)?", attr(ptr, 17))
print("PAGEABLE_MEMORY_ACCESS(88)", dev_attr(88), "USES_HOST_PAGE_TABLES(100)", dev_attr(100),
      "CONCURRENT_MANAGED(89)", dev_attr(89), "HOST_NATIVE_ATOMIC(86)", dev_attr(86))
